"""What the connector changes in the Python processes it runs in, called from one place per process.

Why one place: these act on the user's process, not on a query (a frozen garbage-collector
generation, glibc's malloc thresholds), so an operator must find each of them, what it buys and its
off switch (switches.py) without reading the read path. The botocore replacements (the data loader,
whole-body reads) are per client and live where clients are made (client.py), behind
`PYSPARK_KINESIS_STOCK_BOTOCORE`.

- `prepare_planner_process()`: Spark's streaming source runner (a query's planner, a new process
  for every query), before the connector loads botocore: freeze what PySpark left (gc_freeze.py).
- `prepare_worker_process()`: at the start of every task (a read or a write) in an executor's Python
  worker: glibc's thresholds fixed once, so response bodies read whole reuse the heap (body_heap.py),
  and what the worker holds for good frozen once more when a client was made since
  (`client.freeze_long_lived`).
- `prepare_agent_process()`: the fan-out agent's start: glibc's thresholds (events hold whole
  GetRecords-sized bodies).
Nothing here imports botocore at module level: the planner's freeze must come before it loads.
"""

from __future__ import annotations

from ..switches import STOCK_BOTOCORE
from . import body_heap, gc_freeze


def prepare_planner_process() -> None:
    gc_freeze.freeze_before_loading()


def prepare_worker_process() -> None:
    if not STOCK_BOTOCORE.on():  # (stock botocore reads bodies in pieces: nothing to keep)
        body_heap.keep_body_memory()
    from .client import freeze_long_lived

    freeze_long_lived()


def prepare_agent_process() -> None:
    if not STOCK_BOTOCORE.on():
        body_heap.keep_body_memory()
