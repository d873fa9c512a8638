"""What a Python process holds for good, kept out of the garbage collector's way (`gc.freeze()`).

A full collection walks every object the process holds. PySpark's processes hold many for good
(PySpark's and pyarrow's modules, then botocore's, its service models and clients), so the connector
freezes them where that walk is paid again and again: after every task in an executor's Python worker
(`client.freeze_long_lived`), and once in a query's planner process, before botocore loads
(`freeze_before_loading`). Kept apart from client.py so that the planner can freeze before anything
imports botocore. PYSPARK_KINESIS_GC_FREEZE=0 in a process's environment turns both off.
"""

from __future__ import annotations

import gc

from ..switches import GC_FREEZE

FREEZING = GC_FREEZE.on()
_frozen_before_loading = False


def freeze_before_loading() -> None:
    """In a query's planner process (Spark's streaming source runner), before the connector loads
    botocore: freeze what the process holds (PySpark's modules, kept for its life), once.

    Why: Spark starts that process afresh for every query, and loading botocore and making a client
    allocate tens of thousands of objects that stay; their number sets off a full collection during
    the load, which walks PySpark's objects too. Frozen, they are skipped by it and by every later
    collection of the process: about 0.02 CPU-s less per query (docs/performance.md, `bench-planner`).
    No collection first, unlike the executors' freeze: it would cost what the freeze saves. What the
    runner's start left as cyclic garbage at that moment is kept (once per process, and little)."""
    global _frozen_before_loading
    if not FREEZING or _frozen_before_loading:
        return
    _frozen_before_loading = True
    gc.freeze()
