"""The executor side of the source: a task's exactly-once protocol, the one shard-read loop, and the
page sources it reads from (`modes`). Runs in Spark's executor Python workers; never imports the
driver side (an import-linter contract checks it)."""
