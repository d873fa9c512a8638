"""The process entry points (aws/process_tuning.py) do what each process needs, each behind its switch:
the planner freezes before botocore loads, a worker freezes what it keeps; and the places Spark runs
call them."""

from __future__ import annotations

from pyspark_kinesis import datasource, switches
from pyspark_kinesis.aws import client, gc_freeze, process_tuning


def _record(monkeypatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(gc_freeze, "freeze_before_loading", lambda: calls.append("planner freeze"))
    monkeypatch.setattr(client, "freeze_long_lived", lambda: calls.append("worker freeze"))
    return calls


def test_each_process_gets_its_own_preparation(monkeypatch):
    calls = _record(monkeypatch)
    monkeypatch.delenv(switches.STOCK_BOTOCORE.key, raising=False)
    process_tuning.prepare_planner_process()
    assert calls == ["planner freeze"]
    calls.clear()
    process_tuning.prepare_worker_process()
    assert calls == ["worker freeze"]


def test_the_planner_calls_its_entry_point(monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(datasource, "prepare_planner_process", lambda: called.append("planner"))
    monkeypatch.setattr(datasource, "stream_reader", lambda factory: "reader")
    assert datasource.KinesisDataSource({"streamName": "s"}).streamReader(None) == "reader"
    assert called == ["planner"]
