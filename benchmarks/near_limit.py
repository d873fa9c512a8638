"""How near a query's cost per MB comes to decoding its responses alone, and where the rest goes.

Why (issue #65, item 6): beyond its fixed cost, a query reading the benchmark server pays for each MB
in three kinds of process: the executor's Python workers (receiving the bodies over HTTP or TLS,
decoding them, cutting them to the batch, handing Arrow batches to Spark), the JVM (Spark turning
those batches into rows, scheduling, committing) and the driver-side Python (planning). The decoder
alone (section 1's `aws.get_records.decode`, one core) is the floor a pure-Python reader cannot go
under; how far above it the whole query lies, and in which process the difference is spent, says
what could still be cut and by whom.

The decoder runs here on bodies the benchmark server itself would send (its own `Stream`, so the same
records, members and sizes), in a process of its own, timed by that process's CPU time with the
collector paused as section 1 does.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks import child_figures
from benchmarks.process_cpu import DRIVER_PYTHON, EXECUTOR_PYTHON, JVM, Usage

MB = 1_000_000
WITHIN = 1.5  # the goal: the cost per MB beyond the fixed cost within 1.5x of the decoder's alone


def decode_child() -> None:
    """Entry of the decoder's process: argv record size, records, rounds; prints MB per CPU-second
    of each round (every round decodes one full answer of the server's as many times as the stream
    holds full answers: the same bytes each time but the sequence numbers, which cost the same)."""
    from benchmarks.memory_server import Stream
    from pyspark_kinesis.aws.get_records import decode

    size, records, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    per_call = Stream(1, 1, size).shards[0].per_call  # (a full answer: 10,000 records or 10 MB)
    shard = Stream(1, per_call, size).shards[0]
    answer, end = shard.answer(0, per_call)
    tail = f'],"NextShardIterator":"0:{end}","MillisBehindLatest":0}}'.encode()
    body = b'{"Records":[' + bytes(answer) + tail  # one full answer, as the server sends it
    calls = max(1, records // per_call)  # the stream's worth of full answers
    decode(body)  # (the decoder's modules loaded before the clock)
    rates = []
    for _ in range(rounds):
        spent = 0.0
        for _call in range(calls):
            gc.collect()
            gc.disable()
            try:
                begin = time.process_time()
                decode(body)
                spent += time.process_time() - begin
            finally:
                gc.enable()
        rates.append(calls * per_call * size / MB / spent)
    print(json.dumps({"rates": rates}))


def decode_rates(size: int, records: int, rounds: int) -> list[float]:
    """The decoder's MB per CPU-second over `records` records of `size` bytes, one figure per round."""
    code = "from benchmarks.near_limit import decode_child; decode_child()"
    figures = child_figures(code, [str(size), str(records), str(rounds)], "the decoder alone")
    return [float(r) for r in figures["rates"]]


@dataclass
class Beyond:
    """A configuration's cost per MB beyond the fixed cost, per role, against the decoder's."""

    megabytes: float
    whole: list[Usage]
    fixed: list[Usage]
    decode: list[float]  # the decoder's MB per CPU-second, per round

    def per_mb_ms(self, role: str | None = None) -> float:
        """CPU milliseconds per MB beyond the fixed cost (of one role, or all): the median over the
        rounds of (whole - fixed), each pair measured in the same round."""

        def spent(u: Usage) -> float:
            return u.total if role is None else u.seconds[role]

        extra = statistics.median(spent(w) - spent(f) for w, f in zip(self.whole, self.fixed, strict=True))
        return 1000 * extra / self.megabytes

    def decode_ms(self) -> float:
        """The decoder's CPU milliseconds per MB (median of its rounds)."""
        return 1000 / statistics.median(self.decode)

    def ratio(self) -> float:
        """How many times the decoder's CPU per MB the query spends per MB beyond its fixed cost."""
        return self.per_mb_ms() / self.decode_ms()

    def met(self) -> bool:
        return self.ratio() <= WITHIN


HEADER = [
    "decoder alone ms/MB (MB/CPU-s)",
    "query beyond fixed ms/MB",
    "vs decoder",
    "JVM ms/MB",
    "executor Python ms/MB (beyond the decode)",
    "driver Python ms/MB",
]


def cells(beyond: Beyond) -> list[str]:
    decode = beyond.decode_ms()
    executor = beyond.per_mb_ms(EXECUTOR_PYTHON)
    return [
        f"{decode:.2f} ({statistics.median(beyond.decode):,.0f})",
        f"{beyond.per_mb_ms():.2f}",
        f"{beyond.ratio():.2f}x",
        f"{beyond.per_mb_ms(JVM):.2f}",
        f"{executor:.2f} ({executor - decode:+.2f})",
        f"{beyond.per_mb_ms(DRIVER_PYTHON):.2f}",
    ]


def goal(beyond: Beyond) -> tuple[str, str, bool]:
    return (
        f"CPU per MB beyond the fixed cost within {WITHIN}x of decoding the same responses alone (one core)",
        f"{beyond.ratio():.2f}x",
        beyond.met(),
    )


def markdown(label: str, beyond: Beyond) -> list[str]:
    """The lines of the near-the-limit table for one configuration."""
    return [
        "",
        f"Near the limit ({label}): CPU milliseconds per MB of payload beyond the fixed cost, by process, "
        "against the decoder alone on the server's own responses (`aws.get_records.decode`, section 1's "
        "decoder, in a process of its own, the collector paused as there; median of the rounds). The "
        "executor's Python holds the decode; what it spends beyond the decoder's figure is receiving the "
        "bodies (HTTP or TLS), cutting them to the batch and handing Arrow batches to Spark; the JVM's is "
        "Spark's (turning Arrow batches into rows, scheduling, committing).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
        "| " + " | ".join(cells(beyond)) + " |",
    ]
