"""The driver side of the source: planning each batch (its start positions, the lineage rule, discovery,
the batch's shape and assignment, lag). Runs in the Python process Spark starts for the query's
planning; never imported by executors (an import-linter contract checks it)."""
