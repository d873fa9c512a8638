"""End-to-end read benchmark: the connector (AvailableNow, noop sink) against a boto3 GetRecords loop.

Each function runs against local servers on loopback and returns rows of figures; `markdown_*` turns
them into sections of docs/performance.md (`report.write_section`). Nothing here is asserted: the
tests check behaviour, these print what the machine does.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.local_setup import create_stream, environment, put_all, spark_session, trusted_certificate
from benchmarks.report import Spread, machine


# -- 2. end to end -----------------------------------------------------------------------------------
@dataclass
class ThroughputRow:
    shards: int
    records: int
    size: int
    loop: Spread  # the boto3 loop's times
    warm: Spread  # the connector's times, queries after the session's first
    cold_s: float  # the connector's first query in a fresh SparkSession (Python workers start)
    rows: int  # rows every connector query read (each is checked to equal `records`)

    def ratio(self) -> float:
        """The connector's warm median rate over the loop's median rate (both read `records`)."""
        return self.loop.median / self.warm.median


def kinesis_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "kinesis", endpoint_url=endpoint, region_name="us-east-1", config=Config(max_pool_connections=64)
    )


def fill_stream(client: Any, shards: int, records: int, size: int) -> str:
    stream = create_stream(client, shards)
    put_all(client, stream, [os.urandom(size // 2).hex().encode()[:size]] * records, 8)
    return stream


def loop_read(client: Any, stream: str, expected: int) -> float:
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


def source_df(spark: Any, endpoint: str, stream: str, work: Path, **options: str) -> Any:
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


def connector_read(
    spark: Any, endpoint: str, stream: str, work: Path, options: dict[str, str] | None = None
) -> tuple[float, int]:
    """The connector: Trigger.AvailableNow into the noop sink, start to finish; `options` are extra
    source options (tuning runs)."""
    # Local servers have no read quota; neither has the loop.
    df = source_df(spark, endpoint, stream, work, **{"shardReadBytesPerSecond": "0", **(options or {})})
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


def run_throughput(
    shard_counts: list[int], records: int, size: int, work: Path, repeat: int = 3, tls: bool = False
) -> list[ThroughputRow]:
    """Per shard count: a stream filled once, a fresh SparkSession whose first query is the cold
    figure, then `repeat` rounds in which the loop and a warm query take turns on the same stream
    (each query from TRIM_HORIZON with its own checkpoint and metadataPath, so each reads it all).
    With `tls`, the server serves HTTPS (a certificate the process trusts: `trusted_certificate`)."""
    environment()
    from pyspark_kinesis.cli.local_kinesis import LocalKinesis

    rows = []
    with LocalKinesis("kinesalite", tls=trusted_certificate(str(work)) if tls else None) as server:
        client = kinesis_client(server.endpoint)
        for shards in shard_counts:
            stream = fill_stream(client, shards, records, size)
            spark = spark_session()
            cold_s, got = connector_read(spark, server.endpoint, stream, work)
            counts = [got]
            loop, warm = [], []
            for _round in range(repeat):
                loop.append(loop_read(client, stream, records))
                seconds, got = connector_read(spark, server.endpoint, stream, work)
                warm.append(seconds)
                counts.append(got)
            spark.stop()
            if set(counts) != {records}:
                raise RuntimeError(f"the connector read {counts} rows, expected {records} each time")
            rows.append(ThroughputRow(shards, records, size, Spread(loop), Spread(warm), cold_s, records))
    return rows


def markdown_throughput(rows: list[ThroughputRow], plot: str | None, command: str, tls: bool = False) -> str:
    """The section, naming the exact `command` that printed it (the plot's path included)."""
    lines = [
        "### Over TLS" if tls else "## 2. End to end: the connector against a boto3 loop",
        "",
        f"Measured {machine()}, with `{command}`, against kinesalite on loopback "
        + (
            "serving HTTPS as Kinesis does (a self-signed certificate for 127.0.0.1 that every process "
            "trusts by AWS_CA_BUNDLE; both sides pay TLS on every connection; "
            if tls
            else "("
        )
        + "which "
        "shares the two cores with Spark and the readers): per shard count, a stream filled once with "
        f"{rows[0].records:,} records of {rows[0].size:,} B, read to its end by a plain boto3 loop (one thread "
        "per shard, GetRecords with Limit 10,000 until drained) and by the connector "
        "(`trigger(availableNow=True)` into the noop sink, `local[2]`, query start to finish: Spark's "
        "planning and commits included). `cold` is the first query of a fresh SparkSession (Spark starts "
        f"its Python workers and loads the connector); then {len(rows[0].loop.samples)} rounds in which the "
        "loop and a warm query take turns on the same stream: median (lowest-highest) records per second, "
        "from the rows each query read (checked equal to the records put). Byte pacing is off "
        "(`shardReadBytesPerSecond=0`: the local server has no read quota).",
        "",
        "| shards | loop records/s | connector warm records/s | warm vs loop (medians) | connector cold records/s |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.shards} | {row.loop.show_rate(row.records)} | {row.warm.show_rate(row.records)} | "
            f"{row.ratio():.2f}x | {row.rows / row.cold_s:,.0f} |"
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
    axes.plot(shards, [r.records / r.loop.median for r in rows], marker="o", label="boto3 GetRecords loop")
    axes.plot(shards, [r.rows / r.warm.median for r in rows], marker="s", label="pyspark-kinesis, warm")
    axes.plot(shards, [r.rows / r.cold_s for r in rows], marker="^", label="pyspark-kinesis, cold", alpha=0.6)
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
