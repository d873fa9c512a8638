"""What each of the connector's process tunings buys: section 8's measurement (1,000 B records, 4
shards, the benchmark server) with every tuning on, and again with each one turned off by its switch
(src/pyspark_kinesis/switches.py).

Why: a tuning changes how the user's processes run (the collector's frozen generation, botocore's data
loader and body reads); each costs a reader's attention and may misbehave
on someone's platform, so each must show what it buys, and one that buys under 5% should go. Each
configuration runs in a Python process of its own (a switch is read by every Spark process at its
start, and PySpark keeps its JVM for the life of the driving process), one after the other; the boto3
loop runs beside the connector in every round, and the comparison is of the connector-vs-loop ratios,
so that a slower phase of the machine moves both. Nothing here is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks import child_env
from benchmarks.report import machine

# (a configuration's name, the switches it sets; the first is the reference: every tuning on)
CONFIGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("every tuning on", {}),
    ("gc.freeze off", {"PYSPARK_KINESIS_GC_FREEZE": "0"}),
    ("stock botocore", {"PYSPARK_KINESIS_STOCK_BOTOCORE": "1"}),
)
WORTH = 0.05  # a tuning that buys less than this of the whole query's rate is not worth keeping


@dataclass(frozen=True)
class Figures:
    name: str
    loop: float  # MB per CPU-second, median
    whole: float  # the connector's, whole query
    beyond: float  # beyond the fixed cost
    fixed: float  # CPU-s
    flagged: int

    @property
    def ratio(self) -> float:
        return self.whole / self.loop

    @property
    def beyond_ratio(self) -> float:
        return self.beyond / self.loop


def child() -> None:
    """Entry of one configuration's process: argv MB, rounds; prints its figures as JSON."""
    from benchmarks.cpu import run_cpu

    megabytes, rounds = float(sys.argv[1]), int(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="bench-tunings-") as work:
        rows, _cold = run_cpu("memory", [1000], [4], megabytes, rounds, Path(work))
    row = rows[0]
    figures = {
        "loop": row.loop_rate().median,
        "whole": row.spark_rate().median,
        "beyond": row.marginal_rate(),
        "fixed": row.fixed_s(),
        "flagged": row.unexplained()[1],
    }
    print("FIGURES " + json.dumps(figures), flush=True)


def run(megabytes: float, rounds: int) -> list[Figures]:
    out = []
    for name, switches in CONFIGS:
        code = "from benchmarks.tunings import child; child()"
        done = subprocess.run(
            [sys.executable, "-c", code, str(megabytes), str(rounds)],
            env={**child_env(), **switches},
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("FIGURES ")), None)
        if done.returncode != 0 or line is None:
            raise RuntimeError(f"{name}: the run failed: {done.stderr.strip()[-2000:]}")
        out.append(Figures(name, **json.loads(line.removeprefix("FIGURES "))))
        print(f"{name}: {out[-1]}", file=sys.stderr, flush=True)
    return out


def buys(reference: Figures, without: Figures) -> float:
    """What a tuning buys: how much higher the whole query's rate against the loop is with it."""
    return reference.ratio / without.ratio - 1


def markdown(figures: list[Figures], command: str) -> str:
    reference = figures[0]
    lines = [
        "### What each process tuning buys",
        "",
        f"Measured {machine()}, with `{command}`: section 8's query (1,000 B records, 4 shards, the benchmark "
        "server, `trigger(availableNow=True)` into the noop sink) and its boto3 loop in each round, once with "
        "every tuning on and once per tuning with its switch turned off (docs/operations.md), each "
        "configuration in a process of its own, one after the other. Rates are MB per CPU-second (median of "
        "the rounds); `buys` is how much higher the connector-vs-loop ratio of the whole query is with the "
        f"tuning than without it (a tuning buying under {WORTH:.0%} is not worth its switch).",
        "",
        "| configuration | loop MB/CPU-s | connector MB/CPU-s | vs loop | beyond fixed (vs loop) | fixed CPU-s "
        "| buys | flagged measurements |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        bought = "-" if f is reference else f"{buys(reference, f):+.1%}"
        lines.append(
            f"| {f.name} | {f.loop:.1f} | {f.whole:.1f} | {f.ratio:.2f}x | {f.beyond:.1f} ({f.beyond_ratio:.2f}x) "
            f"| {f.fixed:.2f} | {bought} | {f.flagged} |"
        )
    return "\n".join(lines) + "\n"
