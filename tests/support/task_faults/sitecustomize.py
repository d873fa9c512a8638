"""The task-failure seam of the fault tests and the chaos suite, kept out of the wheel.

A process that has this folder on its PYTHONPATH imports this module at start-up (Python's `site`
does, for every interpreter: drivers, Spark's Python daemons and the workers they fork). With
PYSPARK_KINESIS_FAULT set to 'before-record' or 'after-record' it wraps `BatchEndLog.write`, the one
durable step of a task (source/executor/task.py), so that the first attempt of each task fails just
before its batch-end record is written, or just after it is durable and before its rows leave: Spark's
retry must then recover without loss or duplication. 'mixed' does both in one run: even partitions fail
before their record, odd ones after it. Only attempt 0 fails, and only inside a task (the driver writes
records too, when it closes a task that never ran; it has no task context).
With PYSPARK_KINESIS_FAULT_LOG set to a file, each injected failure appends a line there (the chaos
suite counts them: the driver's log does not show another executor's failures).
"""

from __future__ import annotations

import os

STEPS = ("before-record", "after-record")
MIXED = "mixed"


class InjectedFault(RuntimeError):
    pass


def _maybe_fail(step: str) -> None:
    mode = os.environ.get("PYSPARK_KINESIS_FAULT")
    if mode != step and mode != MIXED:
        return
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0:
        return
    if mode == MIXED and STEPS[context.partitionId() % 2] != step:
        return
    log = os.environ.get("PYSPARK_KINESIS_FAULT_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{step} {context.partitionId()}\n")
    raise InjectedFault(f"injected fault at {step} (first attempt of partition {context.partitionId()})")


def _install() -> None:
    from pyspark_kinesis.source.state.batch_log import BatchEndLog

    write = BatchEndLog.write

    def failing_write(self, record):  # type: ignore[no-untyped-def]
        _maybe_fail("before-record")
        winner = write(self, record)
        _maybe_fail("after-record")
        return winner

    BatchEndLog.write = failing_write  # type: ignore[method-assign]


if os.environ.get("PYSPARK_KINESIS_FAULT") in (*STEPS, MIXED):
    _install()
