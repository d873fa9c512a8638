"""The chaos suite's smoke runs, CI's slow job's two: one short run with every kind of fault a single
local[2] query on kinesalite can take (proxy faults, a driver SIGKILL at a random moment and one
between an offset-log write and its commit, first-attempt task failures, a reshard, and a
foreachBatch that uses none of some batches and only partition 0 of others); and one enhanced fan-out
run on two executors in their own JVMs (local-cluster) against kinesis-local, which adds what only
there happens: executors killed, an executor's fan-out agent killed, the server restarted, and a
subscription reset mid-event, beside the driver kills, the reshards and the proxy's faults."""

from __future__ import annotations

import pytest

from tests.chaos.harness import ChaosRun, Plan

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.slow]


def _assert_exactly_once(result) -> None:
    """Nothing lost, duplicated, invented, out of key order or read before its parents."""
    counts = (
        result.lost,
        result.duplicated,
        result.extra,
        result.order_violations,
        result.lineage_violations,
    )
    assert counts == (0, 0, 0, 0, 0), result


def test_a_short_chaos_run_loses_and_repeats_nothing(tmp_path):
    plan = Plan.draw(index=1, seed=2026, seconds=20, short=True)
    result = ChaosRun(plan, tmp_path / "run").run()
    assert not result.error, result.error
    assert not result.missed, f"scheduled faults that found nothing to hit: {result.missed}"
    assert (
        result.faults["driver SIGKILL before tasks"] == 1 and result.faults["driver SIGKILL mid-batch"] == 1
    )
    assert any(
        "task records written" in hit and not hit.endswith(" 0 task records written") for hit in result.hits
    )
    assert result.faults["reshard"] >= 1 and result.child_rows > 0, result  # the reshard's children were read
    assert result.faults["partial batch"] >= 2, result.faults
    assert sum(v for k, v in result.faults.items() if k.startswith("proxy")) >= 5, result.faults
    assert result.put > 100 and result.read >= result.put
    _assert_exactly_once(result)
    assert (result.server_lost, result.unplanned_exits) == (0, 0), result
    assert result.ok


def test_a_fanout_chaos_run_on_two_executors_loses_and_repeats_nothing(tmp_path):
    plan = Plan.draw(index=20, seed=2026, seconds=20)
    assert (plan.consumer, plan.master, plan.subscription_cut[0]) == (
        "efo",
        "local-cluster[2,1,1024]",
        "reset",
    )
    result = ChaosRun(plan, tmp_path / "run").run()
    assert not result.error, result.error
    assert not result.missed, f"scheduled faults that found nothing to hit: {result.missed}"
    for kind in ("driver SIGKILL before tasks", "driver SIGKILL mid-batch", "fan-out agent SIGKILL"):
        assert result.faults[kind] == 1, (kind, result.faults)
    assert result.faults["executor SIGKILL"] == 2 and result.faults["server restart"] == 1, result.faults
    assert result.child_rows > 0, result  # the reshards' children were read
    assert result.put > 100 and result.read >= result.put
    _assert_exactly_once(result)
    assert result.ok
