"""Unit tests run in one long pytest process: the executors' `gc.freeze()` (aws/client.py
`freeze_long_lived`, called where a task starts) would freeze the test process's objects for good, so
it is off here; its own test turns it on against a stand-in `gc`, and the integration tests run it in
Spark's workers as it runs in production."""

from __future__ import annotations

import pytest

from pyspark_kinesis.aws import client


@pytest.fixture(autouse=True)
def _no_gc_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "FREEZING", False)
