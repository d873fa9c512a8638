"""The latency benchmark's account of where a batch's time goes (benchmarks/latency.py): medians of
Spark's phase timings over the batches that read rows, and the gap from one batch's start to the next."""

from __future__ import annotations

from benchmarks.latency import LatencyRun, markdown_latency, markdown_modes, phase_medians, phase_table


def _progress(start: str, rows: int | None, **durations: int) -> dict:
    return {"timestamp": start, "numInputRows": rows, "durationMs": durations}


PROGRESS = [
    _progress("2026-11-27T00:00:00.000Z", 10, latestOffset=20, addBatch=100, triggerExecution=150),
    _progress("2026-11-27T00:00:00.200Z", 0, latestOffset=5, triggerExecution=6),  # (planned nothing)
    _progress("2026-11-27T00:00:00.300Z", 30, latestOffset=40, addBatch=300, triggerExecution=390),
    _progress("2026-11-27T00:00:00.700Z", None, latestOffset=7, triggerExecution=8),
    _progress("2026-11-27T00:00:00.800Z", 20, latestOffset=30, addBatch=200, triggerExecution=260),
]


def test_the_phases_are_the_medians_of_batches_that_read_rows_and_the_gap_of_all():
    assert phase_medians(PROGRESS) == {
        "latestOffset": 30,
        "addBatch": 200,
        "triggerExecution": 260,
        "start to start": 150.0,  # (gaps 200, 100, 400, 100 ms: every batch Spark reported)
    }
    assert phase_medians([]) == {}


def test_the_table_names_the_phases_in_the_order_they_run():
    lines = phase_table(LatencyRun([0.1], 1.0, 1, None, PROGRESS))
    assert "over the 3 batches that read rows in the window (of 5 it reported)" in lines[1]
    assert lines[3:] == [
        "| batches | latestOffset | addBatch | triggerExecution | start to start |",
        "|---|---|---|---|---|",
        "| median | 30 ms | 200 ms | 260 ms | 150 ms |",
        "| slowest | 40 ms | 300 ms | 390 ms | - |",  # (the batch a tail delay waited for)
    ]
    assert phase_table(LatencyRun([0.1], 1.0, 1)) == []


def test_the_modes_section_names_only_what_ran_and_the_first_batches_after_a_quiet_start():
    run = LatencyRun([0.5, 1.0], 1.0, 2, None, PROGRESS)
    quiet = markdown_modes({"efo on local-cluster[2,1,1024]": run}, 50, 30, 4, quiet_s=150)
    assert quiet.startswith("### Enhanced fan-out after a quiet start (150 s)\n")
    assert "with polling (GetRecords)" not in quiet
    assert "two executors" in quiet and "one executor" not in quiet
    assert "empty for 150 s" in quiet and "took (start to commit) 0.15 s, 0.39 s, 0.26 s." in quiet
    both = markdown_modes({"polling": run, "efo": run}, 50, 30, 4)
    assert both.startswith("### Polling and enhanced fan-out\n")
    assert "once with polling (GetRecords) and once with enhanced fan-out" in both
    assert "quiet" not in both


def test_the_goals_are_judged_on_the_median_of_the_runs_p50_and_p99():
    """One run's p99 rests on its slowest 30 records: the goal is judged on the runs' median."""
    fast = LatencyRun([0.1] * 99 + [0.5], 2.0, 100, None, PROGRESS)
    slow = LatencyRun([0.2] * 99 + [0.9], 2.1, 100, None, PROGRESS)
    text = markdown_latency([fast, slow, fast], 100, 30, 4, "kinesalite")
    assert "`bash scripts/bench.sh latency --rate 100 --seconds 30 --shards 4 --runs 3`" in text
    assert "| 2 | 100 | 100 | 0.20 s | 0.20 s | 0.90 s | 0.90 s |" in text
    assert "| p50 at most 0.25 s | 0.10 s | yes |" in text and "| p99 at most 0.6 s | 0.50 s | yes |" in text
    text = markdown_latency([slow], 100, 30, 4, "kinesalite")
    assert "--runs" not in text and "| p99 at most 0.6 s | 0.90 s | NO |" in text
