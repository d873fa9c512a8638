"""The chaos suite's smoke run, part of the default tests: one short run with every kind of fault a
single local[2] query on kinesalite can take (proxy faults, a driver SIGKILL at a random moment and
one between an offset-log write and its commit, first-attempt task failures, a reshard, and a
foreachBatch that uses none of some batches and only partition 0 of others)."""

from __future__ import annotations

import pytest

from tests.chaos.harness import ChaosRun, Plan

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.slow]


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
    counts = (
        result.lost,
        result.duplicated,
        result.extra,
        result.order_violations,
        result.lineage_violations,
    )
    assert counts == (0, 0, 0, 0, 0), result
    assert (result.server_lost, result.unplanned_exits) == (0, 0), result
    assert result.ok
