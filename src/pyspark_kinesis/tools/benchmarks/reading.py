"""Read-path benchmarks: decode cost, end-to-end throughput against a boto3 loop, latency, API economy.

Each function runs one benchmark against local servers on loopback and returns rows of figures;
`markdown_*` turns them into the sections of docs/performance.md (see `write_section`). Nothing here
is asserted: the tests check behaviour, these print what the machine does.
"""

from __future__ import annotations

import base64
import os
import platform
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from .local_setup import create_stream, environment, put_all, spark_session

SIZES = (100, 1000, 10_000)


def machine() -> str:
    return (
        f"{date.today().isoformat()}, {os.cpu_count()}-core {platform.machine()}, Python "
        f"{platform.python_version()}"
    )


def _best(fns: list[Callable[[], Any]], repeat: int) -> list[float]:
    """Each function's best time over `repeat` rounds, the functions taking turns in every round: this
    VM runs in faster and slower phases lasting seconds, and turns let every function meet the same
    phases, so their ratios hold even when the absolute figures move."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for index, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


# -- 1. decode ---------------------------------------------------------------------------------------
@dataclass
class DecodeRow:
    size: int
    records: int
    botocore_s: float
    msgspec_s: float  # the project's decode by msgspec alone (what bodies the scan leaves cost)
    decode_s: float  # the project's decode of the body alone (the vectorised scan)
    path_s: float  # decode + cut to limits + Arrow batch: what a task does per response

    def rates(self, seconds: float) -> tuple[float, float]:
        return self.records / seconds, self.records * self.size / seconds / 1e6


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

    from ...aws.get_records import decode, decode_msgspec
    from ...model import Position
    from ...source.fetching import ShardLimits, ShardRead

    shape = (
        botocore.session.get_session().get_service_model("kinesis").operation_model("GetRecords").output_shape
    )
    proxy = SimpleNamespace(
        name="bench", spec=SimpleNamespace(key="arn:aws:kinesis:us-east-1:0:stream/bench")
    )
    rows = []
    for size in SIZES:
        count = min(10_000, 10_000_000 // size)  # one full GetRecords response (10,000 records / 10 MB)
        body = get_records_body(size, count)
        response = {"body": body, "headers": {}, "status_code": 200}

        def path(body: bytes = body) -> None:
            read = ShardRead(proxy, "shardId-0", Position.trim_horizon(), ShardLimits(100_000, 1 << 26), None)
            read.take(decode(body)["Records"], Position.trim_horizon())
            read.cols.to_arrow()

        times = _best(
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
        f"Measured {machine()}, with `pyspark-kinesis bench-decode`: one full GetRecords body (10,000 "
        f"records, or 10 MB) per record size, best of {DECODE_REPEAT} rounds in which the four take turns. `botocore` is botocore's JSON parser (what a plain "
        "boto3 client does); `msgspec` is the project's decode by msgspec alone (the bodies the scan leaves "
        "to it); `decode` is `aws.get_records.decode` (the vectorised scan, into Arrow arrays); `path` adds "
        "what a task does with a response: cut it to the batch's limits and build the Arrow batch.",
        "",
        "| record size | botocore records/s | botocore MB/s | msgspec MB/s | decode MB/s | path records/s | path MB/s "
        "| path vs botocore |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        b_rate, b_mb = row.rates(row.botocore_s)
        _d_rate, d_mb = row.rates(row.decode_s)
        p_rate, p_mb = row.rates(row.path_s)
        m_mb = row.rates(row.msgspec_s)[1]
        lines.append(
            f"| {row.size:,} B | {b_rate:,.0f} | {b_mb:.0f} | {m_mb:.0f} | {d_mb:.0f} | {p_rate:,.0f} | {p_mb:.0f} | "
            f"{row.botocore_s / row.path_s:.1f}x |"
        )
    return "\n".join(lines) + "\n"


# -- 2. end to end -----------------------------------------------------------------------------------
@dataclass
class ThroughputRow:
    shards: int
    records: int
    size: int
    loop_s: float
    connector_s: float
    connector_rows: int


def _kinesis(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "kinesis", endpoint_url=endpoint, region_name="us-east-1", config=Config(max_pool_connections=64)
    )


def _fill(client: Any, shards: int, records: int, size: int) -> str:
    stream = create_stream(client, shards)
    put_all(client, stream, [os.urandom(size // 2).hex().encode()[:size]] * records, 8)
    return stream


def _loop_read(client: Any, stream: str, expected: int) -> float:
    """The baseline: one thread per shard, GetRecords (Limit 10,000) until the shard is drained."""
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
    counts = dict.fromkeys(shards, 0)

    def read(shard: str) -> None:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _call in range(100_000):
            response = client.get_records(ShardIterator=iterator, Limit=10_000)
            counts[shard] += len(response["Records"])
            iterator = response.get("NextShardIterator")
            if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
                return

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(shards)) as pool:
        list(pool.map(read, shards))
    seconds = time.perf_counter() - start
    if sum(counts.values()) != expected:
        raise RuntimeError(f"the loop read {sum(counts.values())} records, expected {expected}")
    return seconds


def _source(spark: Any, endpoint: str, stream: str, work: Path, **options: str) -> Any:
    """A streaming read from TRIM_HORIZON with its own metadataPath under `work`."""
    reader = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .option("startingPosition", "TRIM_HORIZON")
        .option("metadataPath", str(work / f"meta-{uuid.uuid4().hex[:8]}"))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _connector_read(spark: Any, endpoint: str, stream: str, work: Path) -> tuple[float, int]:
    """The connector: Trigger.AvailableNow into the noop sink, start to finish."""
    # Local servers have no read quota; neither has the loop.
    df = _source(spark, endpoint, stream, work, shardReadBytesPerSecond="0")
    start = time.perf_counter()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(work / f"cp-{uuid.uuid4().hex[:8]}"))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(1800):
        query.stop()
        raise RuntimeError("the AvailableNow query did not finish within 30 minutes")
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    return seconds, sum(p["numInputRows"] for p in query.recentProgress)


def run_throughput(shard_counts: list[int], records: int, size: int, work: Path) -> list[ThroughputRow]:
    environment()
    from ..local import LocalKinesis

    rows = []
    with LocalKinesis("kinesalite") as server:
        client = _kinesis(server.endpoint)
        spark = spark_session()
        warm = _fill(client, 1, 100, size)  # start Spark's Python workers before timing anything
        _connector_read(spark, server.endpoint, warm, work)
        for shards in shard_counts:
            stream = _fill(client, shards, records, size)
            loop_s = _loop_read(client, stream, records)
            connector_s, got = _connector_read(spark, server.endpoint, stream, work)
            rows.append(ThroughputRow(shards, records, size, loop_s, connector_s, got))
        spark.stop()
    return rows


def markdown_throughput(rows: list[ThroughputRow], plot: str | None) -> str:
    lines = [
        "## 2. End to end: the connector against a boto3 loop",
        "",
        f"Measured {machine()}, with `pyspark-kinesis bench-read`, against kinesalite on loopback (which "
        "shares the two cores with Spark and the readers): a stream pre-filled with "
        f"{rows[0].records:,} records of {rows[0].size:,} B per shard count, read to its end once by a plain "
        "boto3 loop (one thread per shard, GetRecords with Limit 10,000 until drained) and once by the "
        "connector (`trigger(availableNow=True)` into the noop sink, `local[2]`, query start to finish, "
        "Spark's planning and commits included). Both read the same stream in the same run; byte pacing is "
        "off for both (`shardReadBytesPerSecond=0`: the local server has no read quota).",
        "",
        "| shards | loop records/s | connector records/s | connector vs loop | rows read by the connector |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        loop, conn = row.records / row.loop_s, row.records / row.connector_s
        lines.append(
            f"| {row.shards} | {loop:,.0f} | {conn:,.0f} | {conn / loop:.2f}x | {row.connector_rows:,} |"
        )
    if plot:
        lines += ["", f"![throughput by shard count]({Path(plot).name})"]
    return "\n".join(lines) + "\n"


def plot_throughput(rows: list[ThroughputRow], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shards = [r.shards for r in rows]
    figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    axes.plot(shards, [r.records / r.loop_s for r in rows], marker="o", label="boto3 GetRecords loop")
    axes.plot(
        shards, [r.records / r.connector_s for r in rows], marker="s", label="pyspark-kinesis (AvailableNow)"
    )
    axes.set_xscale("log", base=2)
    axes.set_xticks(shards, [str(s) for s in shards])
    axes.set_xlabel("shards")
    axes.set_ylabel("records/s")
    axes.set_title(f"Read throughput, {rows[0].records:,} x {rows[0].size:,} B, kinesalite ({date.today()})")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


# -- 3. latency -------------------------------------------------------------------------------------
@dataclass
class LatencyRun:
    delays: list[float]  # seconds from just before each put to its foreachBatch call having its rows
    first_batch_s: float  # the query's first batch, start to commit: Python workers start cold
    put: int


def run_latency(rate: int, seconds: int, shards: int, work: Path, kind: str = "kinesalite") -> LatencyRun:
    """Records put at `rate`/s for `seconds` while a default-trigger query runs; each record's delay
    from just before its put to when the foreachBatch call that receives it has its rows.

    The clock starts once the query has finished two batches: the first one starts Spark's Python
    workers and loads the connector in them (seconds on this machine, once per query), which is a
    start-up cost, reported apart, not the latency of a running query."""
    environment()
    from ..local import LocalKinesis

    delays: list[float] = []
    with LocalKinesis(kind) as server:
        client = _kinesis(server.endpoint)
        stream = _fill(client, shards, 0, 10)
        spark = spark_session()

        def collect(df: Any, _batch: int) -> None:
            rows = df.select("data").collect()  # the batch is read here: its rows exist from now on
            now = time.time()
            delays.extend(now - float(bytes(row["data"]).decode()) for row in rows)

        df = _source(spark, server.endpoint, stream, work)
        checkpoint = str(work / f"cp-{uuid.uuid4().hex[:8]}")
        query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
        stop = threading.Event()
        put = [0]

        def producer() -> None:
            interval = 1.0 / rate
            deadline = time.monotonic() + seconds
            next_at = time.monotonic()
            while time.monotonic() < deadline and not stop.is_set():
                client.put_record(
                    StreamName=stream, Data=repr(time.time()).encode(), PartitionKey=f"k{put[0]}"
                )
                put[0] += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

        for _wait in range(1200):  # bounded: 120 s for the first two batches (the stream is idle)
            if len(query.recentProgress) >= 2:
                break
            time.sleep(0.1)
        else:
            query.stop()
            raise RuntimeError("the query did not finish its first two batches within 120 s")
        first_batch_s = query.recentProgress[0]["durationMs"]["triggerExecution"] / 1000.0
        delays.clear()
        thread = threading.Thread(target=producer)
        thread.start()
        thread.join(seconds + 60)
        for _wait in range(300):  # bounded: 30 s for the last records to arrive
            if len(delays) >= put[0]:
                break
            time.sleep(0.1)
        stop.set()
        query.stop()
        spark.stop()
    return LatencyRun(delays, first_batch_s, put[0])


def markdown_latency(run: LatencyRun, rate: int, seconds: int, shards: int, kind: str) -> str:
    ordered = sorted(run.delays)
    if not ordered:
        raise RuntimeError(f"no record arrived ({run.put} put)")
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        "\n".join(
            [
                "## 3. Latency from put to foreachBatch",
                "",
                f"Measured {machine()}, with `pyspark-kinesis bench-latency --rate {rate} --seconds {seconds} "
                f"--shards {shards}`, on {kind}: records put one by one at {rate}/s for {seconds} s into a "
                f"{shards}-shard stream while a query with the default trigger (micro-batches back to back) runs; "
                "each record carries its put time, and its delay is taken when the foreachBatch call receiving it "
                "has collected its rows on the driver. Default options (`idlePollIntervalMs` 500). The clock "
                "starts after the query's first two batches: the first starts Spark's Python workers and loads "
                f"the connector in them, once per query (here {run.first_batch_s:.1f} s).",
                "",
                "| records put | records arrived | p50 | p90 | p99 | max |",
                "|---|---|---|---|---|---|",
                f"| {run.put:,} | {len(ordered):,} | {p50:.2f} s | {ordered[int(len(ordered) * 0.9)]:.2f} s | "
                f"{p99:.2f} s | {ordered[-1]:.2f} s |",
            ]
        )
        + "\n"
    )


# -- 4. API economy ---------------------------------------------------------------------------------
def run_api(
    shards: int, seconds: int, work: Path, idle_ms: int = 500
) -> tuple[dict[tuple[str, str], int], float]:
    """Calls per (agent, operation) at a counting proxy while a default-trigger query reads an idle stream."""
    environment()
    from ..local import LocalKinesis
    from ..local.fault_proxy import FaultProxy

    with LocalKinesis("kinesalite") as server, FaultProxy(server.endpoint) as proxy:
        client = _kinesis(server.endpoint)
        stream = _fill(client, shards, 0, 10)
        spark = spark_session()
        df = _source(spark, proxy.endpoint, stream, work, idlePollIntervalMs=str(idle_ms))
        checkpoint = str(work / f"cp-{uuid.uuid4().hex[:8]}")
        query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
        time.sleep(15)  # start-up and the first batches
        before, start = dict(proxy.calls), time.monotonic()
        time.sleep(seconds)
        after, window = dict(proxy.calls), time.monotonic() - start
        query.stop()
        spark.stop()
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}, window


def markdown_api(calls: dict[tuple[str, str], int], window: float, shards: int, idle_ms: int) -> str:
    per_minute = 60.0 / window
    lines = [
        "## 4. API economy on an idle stream",
        "",
        f"Measured {machine()}, with `pyspark-kinesis bench-api --shards {shards}`: a query with the default "
        f"trigger over an idle {shards}-shard kinesalite stream, `idlePollIntervalMs` {idle_ms} and the default "
        f"`shardDiscoveryIntervalMs` (10 s), its calls counted by a proxy over {window:.0f} s after start-up, by "
        "the part of the connector that made them (the User-Agent says `pyspark-kinesis/planner` on the "
        "driver, `/reader` on executors). The configured ceiling is one GetRecords per shard per "
        f"{idle_ms} ms: {60_000 / idle_ms:.0f} per shard per minute.",
        "",
        "| caller | operation | calls per minute | per shard per minute |",
        "|---|---|---|---|",
    ]
    for (agent, operation), count in sorted(calls.items()):
        lines.append(
            f"| {agent} | {operation} | {count * per_minute:.1f} | {count * per_minute / shards:.2f} |"
        )
    driver_reads = calls.get(("planner", "GetRecords"), 0)
    lines += ["", f"GetRecords calls made by the driver: {driver_reads}."]
    return "\n".join(lines) + "\n"


# -- docs ---------------------------------------------------------------------------------------------
def write_section(path: str, name: str, text: str) -> None:
    """Replace the section between `<!-- name -->` markers in `path` (appended when absent)."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    file = Path(path)
    current = file.read_text() if file.exists() else "# Performance\n"
    block = f"{begin}\n{text}{end}"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _old, tail = rest.split(end, 1)
        current = head + block + tail
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    file.write_text(current)
