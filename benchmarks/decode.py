"""Decode benchmark: botocore's GetRecords parser against the connector's decode and fetch path, per core."""

from __future__ import annotations

import base64
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.report import Spread, machine

SIZES = (100, 1000, 10_000)


def _timings(
    fns: list[Callable[[], Any]], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> list[Spread]:
    """Each function's times over `repeat` rounds, the functions taking turns in every round: this VM
    runs in faster and slower phases lasting seconds, and turns let every function meet the same
    phases, so their medians compare even when the absolute figures move."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for index, fn in enumerate(fns):
            # As timeit does: the garbage one function leaves (botocore's and msgspec's objects per
            # record) is collected before the next one starts, not inside its timing.
            gc.collect()
            gc.disable()
            try:
                start = clock()
                fn()
                samples[index].append(clock() - start)
            finally:
                gc.enable()
    return [Spread(s) for s in samples]


# -- 1. decode ---------------------------------------------------------------------------------------
@dataclass
class DecodeRow:
    size: int
    records: int
    botocore: Spread
    msgspec: Spread  # the project's decode by msgspec alone (what bodies the scan leaves cost)
    decode: Spread  # the project's decode of the body alone (the vectorised scan)
    path: Spread  # decode + cut to limits + Arrow batch: what a task does per response

    def mb(self, spread: Spread) -> str:
        """MB of payload per second: median (lowest-highest)."""
        return spread.show_rate(self.records * self.size, 1e6)


def get_records_body(size: int, count: int) -> bytes:
    """A GetRecords response body as Kinesis sends it (JSON, base64 payloads, epoch-second floats)."""
    import orjson

    payload = base64.b64encode(os.urandom(size)).decode()
    records = [
        {
            "SequenceNumber": str(49_650_000_000_000_000_000_000_000_000_000_000_000_000_000_000 + 17 * i),
            "ApproximateArrivalTimestamp": 1_763_800_000.123 + i / 1000,
            "Data": payload,
            "PartitionKey": f"customer-{i % 997}",
        }
        for i in range(count)
    ]
    return orjson.dumps({"Records": records, "NextShardIterator": "AAAAAAAA" * 20, "MillisBehindLatest": 0})


# Rounds: each run takes milliseconds, and on a shared VM interference only ever adds time.
DECODE_REPEAT = 20


def run_decode(repeat: int = DECODE_REPEAT) -> list[DecodeRow]:
    """One core: botocore's parser and the project's path on the same bytes."""
    from types import SimpleNamespace

    import botocore.session
    from botocore.parsers import JSONParser

    from pyspark_kinesis.aws.get_records import decode, decode_msgspec
    from pyspark_kinesis.model import Position
    from pyspark_kinesis.source.executor.cutting import BatchCut, ShardLimits

    shape = (
        botocore.session.get_session().get_service_model("kinesis").operation_model("GetRecords").output_shape
    )
    proxy = SimpleNamespace(
        name="bench", spec=SimpleNamespace(resolved_arn="arn:aws:kinesis:us-east-1:0:stream/bench")
    )
    rows = []
    for size in SIZES:
        count = min(10_000, 10_000_000 // size)  # one full GetRecords response (10,000 records / 10 MB)
        body = get_records_body(size, count)
        response = {"body": body, "headers": {}, "status_code": 200}

        def path(body: bytes = body) -> None:
            read = BatchCut(
                proxy.name,
                proxy.spec.resolved_arn,
                "shardId-0",
                Position.trim_horizon(),
                ShardLimits(100_000, 1 << 26),
                None,
            )
            read.take(decode(body)["Records"], Position.trim_horizon())
            read.cols.to_batches()

        times = _timings(
            [
                lambda response=response: JSONParser().parse(response, shape),
                lambda body=body: decode_msgspec(body),
                lambda body=body: decode(body),
                path,
            ],
            repeat,
        )
        rows.append(DecodeRow(size, count, *times))
    return rows


def markdown_decode(rows: list[DecodeRow]) -> str:
    lines = [
        "## 1. Decoding GetRecords responses (one core)",
        "",
        f"Measured {machine()}, with `bash scripts/bench.sh decode`: one full GetRecords body (10,000 "
        f"records, or 10 MB) per record size, timed {DECODE_REPEAT} times, the four taking turns in every "
        "round, the garbage of the previous call collected before each call and the collector paused "
        "during it (as timeit does: otherwise botocore's and msgspec's per-record objects are collected in "
        "the next function's time); each cell is the median MB of payload per second, with the lowest and "
        "highest of the rounds "
        "in brackets. `botocore` is botocore's JSON parser (what a plain boto3 client does); `msgspec` is the "
        "project's decode by msgspec alone (the bodies the scan leaves to it); `decode` is "
        "`aws.get_records.decode` (the vectorised scan, into Arrow arrays); `path` adds what a task does "
        "with a response: cut it to the batch's limits and build its Arrow batch. The last column is the "
        "ratio of the medians. The bodies are the scan's best case, as Kinesis sends plain records: every "
        "record lists its members in the same order, no string holds an escape, no payload is a KPL "
        "aggregate, all payloads have one size; a body the scan does not fully recognise (escapes, "
        "`ChildShards`, an unknown member) is decoded at the `msgspec` column's rate instead.",
        "",
        "| record size | botocore MB/s | msgspec MB/s | decode MB/s | path MB/s | path vs botocore |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.size:,} B | {row.mb(row.botocore)} | {row.mb(row.msgspec)} | {row.mb(row.decode)} | "
            f"{row.mb(row.path)} | {row.botocore.median / row.path.median:.1f}x |"
        )
    return "\n".join(lines) + "\n"
