"""An enhanced fan-out query's latency before and during a flood of strangers' connections to the
fan-out agents' relay ports (issue #61.7; the attacker is `tests.support.relay_flood`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.latency import LatencyRun, run_latency
from benchmarks.report import machine

MASTER = "local-cluster[2,1,1024]"


@dataclass
class FloodRun:
    before: list[float]  # delays of records put before the flood began
    during: list[float]  # delays of records put while it lasted
    run: LatencyRun
    counts: dict[str, Any]  # what the attacker did (`RelayFlood.counts`)


def run_flood(
    rate: int, seconds: int, shards: int, work: Path, silent: int = 50, garbage: int = 16
) -> FloodRun:
    """An efo query on two executors: records put at `rate`/s for `seconds`; the flood (from three
    addresses, `silent` + `garbage` connections from each) begins half way through."""
    from tests.support.relay_flood import RelayFlood

    floods: list[RelayFlood] = []

    def attack() -> RelayFlood:
        floods.append(RelayFlood(silent=silent, garbage=garbage, max_s=seconds + 120))
        return floods[-1]

    run = run_latency(rate, seconds, shards, work, "kinesis-local", "efo", MASTER, attack=attack)
    assert run.attacked_from is not None
    before = [d for put, d in zip(run.puts, run.delays, strict=True) if put < run.attacked_from]
    during = [d for put, d in zip(run.puts, run.delays, strict=True) if put >= run.attacked_from]
    return FloodRun(before, during, run, floods[0].counts)


def _row(label: str, delays: list[float]) -> str:
    ordered = sorted(delays)
    if not ordered:
        return f"| {label} | 0 | - | - | - |"
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"| {label} | {len(ordered):,} | {statistics.median(ordered):.2f} s | {p99:.2f} s | {ordered[-1]:.2f} s |"


def markdown_flood(flood: FloodRun, rate: int, seconds: int, shards: int) -> str:
    counts = flood.counts
    return (
        "\n".join(
            [
                "### Enhanced fan-out under a flood of strangers' connections",
                "",
                f"Measured {machine()}, with `bash scripts/bench.sh flood --rate {rate} --seconds {seconds} "
                f"--shards {shards}`: an efo query on `{MASTER}` (two executors, so reads continue "
                "subscriptions held by the other executor's agent over its relay port) while records are put "
                f"at {rate}/s; half way through, another process opens connections to every relay port it finds "
                "from three loopback addresses that are not the executors' (strangers on other hosts), some "
                "silent, some writing random bytes, each opened again 0.2 s after the holder ends it (the attacker "
                "shares the machine's cores). "
                f"It opened {counts.get('connects', 0):,} connections ({counts.get('refused', 0):,} connects "
                f"failed, the holders ended {counts.get('closed_by_holder', 0):,}) to "
                f"{len(counts.get('ports', []))} relay ports. Of {flood.run.put:,} records put, "
                f"{len(flood.before) + len(flood.during):,} arrived.",
                "",
                "| window | records arrived | p50 | p99 | max |",
                "|---|---|---|---|---|",
                _row("put before the flood", flood.before),
                _row("put during the flood", flood.during),
            ]
        )
        + "\n"
    )


def write_json(flood: FloodRun, path: Path) -> None:
    """What a test checks: both windows' delays, what was put, and the attacker's counts."""
    import orjson

    path.write_bytes(
        orjson.dumps(
            {"before": flood.before, "during": flood.during, "put": flood.run.put, "counts": flood.counts}
        )
    )
