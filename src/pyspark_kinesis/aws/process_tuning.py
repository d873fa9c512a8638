"""What the connector changes in the Python processes it runs in, called from one place per process.

Why one place: these act on the user's process, not on a query (a frozen garbage-collector
generation), so an operator must find each of them, what it buys and its off switch (switches.py)
without reading the read path. The botocore replacements (the data loader, whole-body reads, the
sink's PutRecords encoding) are per client and live where clients are made (client.py), behind
`PYSPARK_KINESIS_STOCK_BOTOCORE`. What each buys is measured by `bash scripts/bench.sh tunings`
(docs/performance.md); one that bought under 5% was dropped (glibc's malloc thresholds, fixed for
bodies read whole: -2.6% and -4.0% in two runs).

- `prepare_planner_process()`: Spark's streaming source runner (a query's planner, a new process
  for every query), before the connector loads botocore: freeze what PySpark left (gc_freeze.py).
- `prepare_worker_process()`: at the start of every task (a read or a write) in an executor's Python
  worker: what the worker holds for good frozen once more when a client was made since
  (`client.freeze_long_lived`).
Nothing here imports botocore at module level: the planner's freeze must come before it loads.
"""

from __future__ import annotations

from . import gc_freeze


def prepare_planner_process() -> None:
    gc_freeze.freeze_before_loading()


def prepare_worker_process() -> None:
    from .client import freeze_long_lived

    freeze_long_lived()
