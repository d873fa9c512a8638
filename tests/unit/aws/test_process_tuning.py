"""The process entry points (aws/process_tuning.py) do what each process needs, each behind its switch:
the planner freezes before botocore loads, a worker keeps body memory (unless on stock botocore) and
freezes what it keeps, the fan-out agent keeps body memory; and the places Spark runs call them."""

from __future__ import annotations

from pyspark_kinesis import datasource, switches
from pyspark_kinesis.aws import body_heap, client, gc_freeze, process_tuning
from pyspark_kinesis.source.agent import process


def _record(monkeypatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(gc_freeze, "freeze_before_loading", lambda: calls.append("planner freeze"))
    monkeypatch.setattr(body_heap, "keep_body_memory", lambda: calls.append("body memory") or True)
    monkeypatch.setattr(client, "freeze_long_lived", lambda: calls.append("worker freeze"))
    return calls


def test_each_process_gets_its_own_preparation(monkeypatch):
    calls = _record(monkeypatch)
    monkeypatch.delenv(switches.STOCK_BOTOCORE.key, raising=False)
    process_tuning.prepare_planner_process()
    assert calls == ["planner freeze"]
    calls.clear()
    process_tuning.prepare_worker_process()
    assert calls == ["body memory", "worker freeze"]
    calls.clear()
    process_tuning.prepare_agent_process()
    assert calls == ["body memory"]


def test_on_stock_botocore_no_body_memory_is_kept(monkeypatch):
    calls = _record(monkeypatch)
    monkeypatch.setenv(switches.STOCK_BOTOCORE.key, "1")
    process_tuning.prepare_worker_process()
    process_tuning.prepare_agent_process()
    assert calls == ["worker freeze"]


def test_the_planner_and_the_agent_call_their_entry_points(monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(datasource, "prepare_planner_process", lambda: called.append("planner"))
    monkeypatch.setattr(datasource, "stream_reader", lambda factory: "reader")
    assert datasource.KinesisDataSource({"streamName": "s"}).streamReader(None) == "reader"
    monkeypatch.setattr(process, "prepare_agent_process", lambda: called.append("agent"))
    monkeypatch.setattr(process, "serve", lambda path, owner: called.append(f"serve {path} {owner}"))
    assert process.main(["/tmp/agent.sock", "1"]) == 0
    assert called == ["planner", "agent", "serve /tmp/agent.sock 1"]
