"""Every scheduled chaos fault reaches its own code: `ChaosRun._fire` hands each kind to the method
that delivers it (a `kill-driver-ahead` fault once ran as a before-tasks kill, and its own code was
never reached). No server, no Spark: the delivering methods are replaced by recorders."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.chaos.harness import ChaosRun
from tests.chaos.plan import LABELS, MISPLACED, Plan, Result

DELIVERED_BY = {
    "kill-driver-before-tasks": ("_kill_driver", "before-tasks"),
    "kill-driver-mid-batch": ("_kill_driver", "mid-batch"),
    "kill-driver-ahead": ("_kill_ahead",),
    "age-out": ("_age_out",),
    "kill-executor": ("_kill_executor",),
    "kill-fanout-agent": ("_kill_fanout_agent",),
    "reshard": ("_reshard",),
    "restart-server": ("_restart_server",),
}


def test_every_fault_kind_has_its_own_delivery():
    assert set(DELIVERED_BY) == set(LABELS)


@pytest.mark.parametrize("kind", sorted(LABELS))
def test_a_fault_kind_reaches_its_own_code(kind, tmp_path: Path, monkeypatch):
    run = ChaosRun(Plan.draw(index=0, seed=1, seconds=10), tmp_path)
    calls: list[tuple] = []
    for name in {method for method, *_rest in DELIVERED_BY.values()}:
        monkeypatch.setattr(run, name, lambda *args, _name=name: calls.append((_name, *args[1:2])) or "hit")
    monkeypatch.setattr(run, "_ready", lambda cfg: True)
    assert run._fire(kind, {}, None, None, None) == "hit"  # type: ignore[arg-type]
    method, *window = DELIVERED_BY[kind]
    assert len(calls) == 1 and calls[0][0] == method
    if window:
        assert calls[0][1] == window[0]


def test_enhanced_fan_out_runs_have_their_subscriptions_ended_or_reset_and_polling_runs_not():
    plans = [Plan.draw(index=i, seed=seed, seconds=600) for seed in range(1, 6) for i in range(8)]
    efo = [p for p in plans if p.consumer == "efo"]
    assert efo and all(p.subscription_cut is not None and 3 <= p.subscription_cut[1] <= 8 for p in efo)
    assert {p.subscription_cut[0] for p in efo if p.subscription_cut} == {"end", "reset"}
    assert all(p.subscription_cut is None for p in plans if p.consumer != "efo")


def test_every_run_puts_misplaced_kpl_aggregates():
    plans = [
        Plan.draw(index=i, seed=seed, seconds=600, short=i == 0) for seed in range(1, 4) for i in range(8)
    ]
    assert all(p.misplace_every in (3, 4, 6) for p in plans)


@pytest.mark.kinesis
def test_misplaced_aggregates_are_re_sent_and_the_ground_truth_holds_each_record_once(kinesalite):
    """The producer's KPL-with-a-stale-shard-map chunks against a real server: every acknowledged record
    is in the ground truth exactly once, and the copies it leaves out are the ones the producer counted
    as misplaced (an aggregate that held them landed in a shard whose range does not hold them)."""
    import boto3

    from tests.chaos.processes import Producer, everything_in
    from tests.helpers import new_stream

    kin = boto3.client("kinesis", endpoint_url=kinesalite.endpoint, region_name="us-east-1")
    stream = new_stream(kin, shards=4)
    producer = Producer(kinesalite.endpoint, stream, rate=40, misplace_every=1, seed=3)
    producer.start()
    for _wait in range(100):  # bounded: about 2 s of chunks
        if producer.chunks >= 8:
            break
        time.sleep(0.1)
    producer.done.set()
    producer.join(timeout=30)
    dropped: list[str] = []
    held = [data for _shard, _seq, data in everything_in(kin, stream, dropped)]
    assert producer.chunks >= 8 and producer.misplaced > 0
    assert sorted(held) == sorted(producer.acknowledged)
    assert len(dropped) == producer.misplaced and set(dropped) <= set(held)


def _delivered(plan: Plan, missing: str | None = None) -> Result:
    """A result in which every kind `plan` meant to deliver was delivered once, but `missing`."""
    result = Result(plan)
    for kind in plan.planned():
        if kind != missing:
            result.faults[kind] += 1
    return result


def test_every_planned_fault_kind_must_be_delivered_or_the_run_fails():
    plans = [Plan.draw(index=i, seed=seed, seconds=600) for seed in range(1, 4) for i in range(8)]
    efo = next(p for p in plans if p.consumer == "efo")
    assert {"proxy subscribe in_use", "proxy subscribe internal", MISPLACED} <= efo.planned()
    assert any(k.startswith("proxy subscription ") for k in efo.planned())
    assert _delivered(efo).ok
    for kind in sorted(efo.planned()):
        result = _delivered(efo, missing=kind)
        scheduled = kind in {LABELS[k] for _at, k in efo.events}
        assert not result.ok and kind in result.undelivered, kind
        assert ("never delivered: " + kind) in result.verdict() or scheduled


def test_a_broken_service_rule_fails_the_run():
    plan = Plan.draw(index=0, seed=1, seconds=600)
    result = _delivered(plan)
    result.violations["SubscribeToShard within 5 s"] += 39
    assert not result.ok
    assert "SubscribeToShard within 5 s: 39" in result.verdict()


def test_misplaced_records_are_counted_apart_from_the_faults_aimed_at_the_system():
    plan = Plan.draw(index=0, seed=1, seconds=600)
    result = _delivered(plan)
    result.faults[MISPLACED] += 2000
    assert result.aimed == len(plan.planned() - {MISPLACED})


def test_the_proxy_gives_a_planned_kind_no_draw_reached_to_a_later_call():
    from tests.support.fault_proxy import FaultProxy

    proxy = FaultProxy("http://127.0.0.1:9", seed=3)  # (never started: only its draws are used)
    rates = {"in_use": 0.0001, "internal": 0.0001, "limit": 0.0}
    assert [proxy.pick_fault(rates, "subscribe") for _ in range(20)] == [None] * 20  # as drawn
    proxy.ensure_after = 5
    picks = [proxy.pick_fault(rates, "subscribe") for _ in range(20)]
    assert sorted(p for p in picks if p) == ["in_use", "internal"]  # once each; "limit" is not planned
