"""Sink throughput against a plain boto3 PutRecords loop, on the same kinesalite, same concurrency.

Three ways to write the same N records of S bytes to a fresh stream:
1. `loop`: C threads, each putting pre-built 500-record PutRecords calls with one boto3 client (the
   baseline a careful user would write by hand);
2. `producer`: the sink's per-task engine (`producing.Producer`) with C concurrent requests;
3. `spark`: `df.write.format("kinesis")` from a DataFrame of one partition (so one task with C
   concurrent requests), Spark's job overhead included.
All three write the same records (the same payload bytes, partition keys "0", "1", ...). The ways take
turns, `repeat` rounds; each is reported as its median rate with the lowest and highest (the machine
has 2 cores, shared with the server).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import boto3

from benchmarks.local_setup import create_stream, environment, put_all, spark_session
from benchmarks.report import Spread, machine


@dataclass
class Result:
    way: str
    records: int
    seconds: float
    calls: int = 0  # PutRecords calls (0: not counted)

    def rate(self, size: int) -> tuple[float, float]:
        return self.records / self.seconds, self.records * size / self.seconds / 1e6


def run(records: int, size: int, concurrency: int, shards: int, repeat: int) -> list[Result]:
    environment()
    from botocore.config import Config

    from pyspark_kinesis.aws.kinesis import KinesisProxy, sink_target
    from pyspark_kinesis.cli.local_kinesis import LocalKinesis
    from pyspark_kinesis.sink.options import parse_sink_options
    from pyspark_kinesis.sink.packing import Aggregator, ShardRouter
    from pyspark_kinesis.sink.producing import MAX_RECORD_BYTES, Entry, Producer

    text = os.urandom(size // 2 + 1).hex()[:size]  # ASCII: the same bytes as a string column in Spark
    payloads = [text.encode()] * records
    results: list[Result] = []
    with LocalKinesis("kinesalite") as server:
        client = boto3.client(
            "kinesis",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            config=Config(max_pool_connections=concurrency * 2),
        )
        options = {
            "region": "us-east-1",
            "endpointUrl": server.endpoint,
            "maxConcurrentRequests": str(concurrency),
        }
        spark = spark_session()
        df = spark.range(records, numPartitions=1).selectExpr(
            f"'{text}' AS data", "cast(id AS string) AS partitionKey"
        )
        df = df.cache()
        df.count()
        # Warm up Spark's Python workers once, so the timed runs measure writing.
        df.limit(100).write.format("kinesis").options(**options, streamName=create_stream(client, 1)).mode(
            "append"
        ).save()
        for _ in range(repeat):
            stream = create_stream(client, shards)
            start = time.perf_counter()
            put_all(client, stream, payloads, concurrency, keys_from=0)
            results.append(Result("loop", records, time.perf_counter() - start))

            stream = create_stream(client, shards)
            config = parse_sink_options(dict(options, streamName=stream))
            start = time.perf_counter()
            producer = Producer(config)
            for i, data in enumerate(payloads):
                producer.add(Entry(stream, data, str(i), None, i))
            producer.flush()
            producer.close()
            results.append(Result("producer", records, time.perf_counter() - start, producer.stats.calls))

            stream = create_stream(client, shards)
            config = parse_sink_options(dict(options, streamName=stream, aggregate="true"))
            start = time.perf_counter()
            producer = Producer(config)
            router = ShardRouter(
                KinesisProxy(sink_target(config.aws, stream), agent="sink").list_shards(True)
            )
            aggregator = Aggregator(producer, MAX_RECORD_BYTES, lambda _stream, r=router: r)
            for i, data in enumerate(payloads):
                aggregator.add(Entry(stream, data, str(i), None, i))
            aggregator.flush()
            producer.close()
            results.append(Result("aggregated", records, time.perf_counter() - start, producer.stats.calls))

            stream = create_stream(client, shards)
            start = time.perf_counter()
            df.write.format("kinesis").options(**options, streamName=stream).mode("append").save()
            results.append(Result("spark", records, time.perf_counter() - start))
        spark.stop()
    return results


WAYS = ("loop", "producer", "aggregated", "spark")


def spreads(results: list[Result]) -> dict[str, Spread]:
    """Each way's times over the rounds."""
    times: dict[str, list[float]] = {}
    for result in results:
        times.setdefault(result.way, []).append(result.seconds)
    return {way: Spread(samples) for way, samples in times.items()}


def markdown(results: list[Result], records: int, size: int, concurrency: int, shards: int) -> str:
    ways = spreads(results)
    rounds = len(ways["loop"].samples)
    lines = [
        "# Sink throughput",
        "",
        f"Measured {machine()}, against kinesalite on loopback, with `bash scripts/bench.sh sink --records "
        f"{records} --size {size} --concurrency {concurrency} --shards {shards} --repeat {rounds}`: the same "
        f"{records} records of {size} bytes (partition keys 0, 1, ...) into a fresh {shards}-shard stream, "
        f"concurrency {concurrency}, each way {rounds} times in turns: median (lowest-highest). The server shares "
        "the two cores with the writer, so these figures are the local server's ceiling, not Kinesis'.",
        "",
        "| way | records/s | MB/s | vs loop (medians) | PutRecords calls per 1,000 rows |",
        "|---|---|---|---|---|",
    ]
    calls = {r.way: r.calls for r in results if r.calls}
    calls["loop"] = -(-records // 500)
    for way in WAYS:
        spread = ways[way]
        per_thousand = f"{calls[way] * 1000 / records:.1f}" if way in calls else "-"
        lines.append(
            f"| {way} | {spread.show_rate(records)} | {spread.show_rate(records * size, 1e6, 1)} | "
            f"{ways['loop'].median / spread.median:.2f}x | {per_thousand} |"
        )
    lines += [
        "",
        "`loop`: as many threads as the concurrency, putting pre-built 500-record calls with one boto3 "
        "client. `producer`: the sink's "
        "per-task engine. `aggregated`: the same with `aggregate=true` (rows packed into KPL aggregated "
        'records per shard). `spark`: `df.write.format("kinesis")` of a one-partition DataFrame (one task), '
        "Spark's job overhead included.",
    ]
    return "\n".join(lines) + "\n"
