"""Fault injection seam for tests: make a task fail at a chosen step of its first attempt.

Set PYSPARK_KINESIS_FAULT to a step name ('before-record', 'after-record'); only attempt 0 of each
task fails, so Spark's retry must recover without loss or duplication. Unset in production.
With PYSPARK_KINESIS_FAULT_LOG set to a file, each injected failure appends a line there (the chaos
suite counts them).
"""

from __future__ import annotations

import os


class InjectedFault(RuntimeError):
    pass


def maybe_fail(step: str) -> None:
    if os.environ.get("PYSPARK_KINESIS_FAULT") != step:
        return
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
    except ImportError:  # pragma: no cover
        context = None
    if context is not None and context.attemptNumber() == 0:
        log = os.environ.get("PYSPARK_KINESIS_FAULT_LOG")
        if log:
            with open(log, "a") as handle:
                handle.write(f"{step} {context.partitionId()}\n")
        raise InjectedFault(f"injected fault at {step} (first attempt of partition {context.partitionId()})")
