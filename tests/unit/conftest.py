"""Unit tests run in one long pytest process: the connector's `gc.freeze()` (aws/gc_freeze.py: where an
executor's task starts, and where a planner makes its stream reader) would freeze the test process's
objects for good, so it is off here; its own tests turn it on against a stand-in `gc`, and the
integration tests run it in Spark's processes as it runs in production."""

from __future__ import annotations

import pytest

from pyspark_kinesis.aws import gc_freeze


@pytest.fixture(autouse=True)
def _no_gc_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc_freeze, "FREEZING", False)
