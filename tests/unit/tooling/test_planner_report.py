"""The planner-share benchmark's arithmetic and page (benchmarks/planner_share.py): the connector's share
is its imports, its stream reader and its planning calls (never PySpark's imports), each a median with
the lowest and highest, judged against the goal (only where the connector is imported from bytecode, as
installed), under the command that regenerates it."""

from __future__ import annotations

from benchmarks.planner_share import Share, markdown


def share(
    pyspark: float, imports: float, reader: float, plan: float, botocore: float = 0.0, compiled: bool = True
) -> Share:
    return Share(
        pyspark=pyspark,
        botocore=botocore,
        imports=imports,
        reader=reader,
        plan=plan,
        rows=4,
        tasks=2,
        compiled=compiled,
    )


def test_the_connectors_share_counts_botocores_import_and_leaves_pysparks_out() -> None:
    assert share(0.9, 0.05, 0.03, 0.02, botocore=0.1).connector == 0.1 + 0.05 + 0.03 + 0.02


def test_each_shard_count_is_a_row_of_medians_and_spreads_judged_against_the_goal() -> None:
    results = {
        (4, True): [share(0.5, 0.06, 0.04, 0.02), share(0.6, 0.05, 0.03, 0.01), share(0.7, 0.07, 0.05, 0.03)],
        (4, False): [share(0.5, 0.2, 0.1, 0.05, compiled=False)] * 3,
        (16, True): [share(0.5, 0.1, 0.1, 0.05), share(0.5, 0.1, 0.1, 0.04), share(0.5, 0.1, 0.1, 0.06)],
    }
    text = markdown(results, 3, "bash scripts/bench.sh planner --shards 4,16 --rounds 3")
    assert "`bash scripts/bench.sh planner --shards 4,16 --rounds 3`" in text
    assert (
        "| 4 | 2 | installed | 0.600 (0.500-0.700) | 0.060 (0.050-0.070) | 0.000 (0.000-0.000) | 0.040 (0.030-0.050) "
        "| 0.020 (0.010-0.030) | 0.120 (0.090-0.150) | met |" in text
    )
    assert "| 4 | 2 | none | 0.500 (0.500-0.500) | 0.200 (0.200-0.200) | 0.000 (0.000-0.000) |" in text
    assert "| 0.350 (0.350-0.350) | (not the goal's case) |" in text
    assert "| 16 | 2 | installed | 0.500 (0.500-0.500) | 0.100 (0.100-0.100) | 0.000 (0.000-0.000) |" in text
    assert text.rstrip().endswith("| 0.250 (0.240-0.260) | not met |")
