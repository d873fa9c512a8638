"""The planner's freeze (aws/gc_freeze.py): once per process, without a collection, not when turned off,
and, in a fresh interpreter as Spark's streaming source runner is, before anything loads botocore."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_kinesis.aws import gc_freeze
from tests.unit.aws.test_client_sessions import Collector  # gc's stand-in


def test_the_planner_freezes_once_without_a_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    monkeypatch.setattr(gc_freeze, "gc", collector)
    monkeypatch.setattr(gc_freeze, "FREEZING", True)
    monkeypatch.setattr(gc_freeze, "_frozen_before_loading", False)
    gc_freeze.freeze_before_loading()
    gc_freeze.freeze_before_loading()
    assert collector.calls == ["freeze"]


def test_turned_off_it_does_not_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    monkeypatch.setattr(gc_freeze, "gc", collector)
    monkeypatch.setattr(gc_freeze, "FREEZING", False)  # PYSPARK_KINESIS_GC_FREEZE=0
    monkeypatch.setattr(gc_freeze, "_frozen_before_loading", False)
    gc_freeze.freeze_before_loading()
    assert collector.calls == []


OPTIONS = {
    "streamName": "s",
    "region": "us-east-1",
    "endpointUrl": "http://127.0.0.1:9",  # nothing listens: the reader's start-up check fails at once
    "awsAccessKeyId": "a",
    "awsSecretKey": "b",
    "startingPosition": "TRIM_HORIZON",
}

RUNNER = r"""
import gc, json, sys
from pyspark_kinesis.datasource import KinesisDataSource
seen = []
gc.freeze = lambda: seen.append("botocore" in sys.modules)
before = "botocore" in sys.modules
reader = KinesisDataSource(json.loads(sys.argv[1])).streamReader(None)  # (the schema: glue's only)
failed = type(getattr(reader, "error", None)).__name__  # (a refusal is raised by Spark's first call)
print(json.dumps({"before": before, "freezes": seen, "after": "botocore" in sys.modules, "failed": failed}))
"""


def test_a_fresh_planner_process_freezes_before_botocore_loads(tmp_path: Path) -> None:
    """As Spark's streaming source runner: unpickling the data source loads no botocore; the stream
    reader freezes first, then loads it (and here fails its start-up check: nothing listens)."""
    options = OPTIONS | {"metadataPath": str(tmp_path / "meta")}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYSPARK_KINESIS_GC_FREEZE"},
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"before": False, "freezes": [False], "after": True, "failed": "StreamAccessError"}, out
