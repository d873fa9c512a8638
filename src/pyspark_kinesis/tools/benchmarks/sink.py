"""Sink throughput against a plain boto3 PutRecords loop, on the same kinesalite, same concurrency.

Three ways to write the same N records of S bytes to a fresh stream:
1. `loop`: C threads, each putting pre-built 500-record PutRecords calls with one boto3 client (the
   baseline a careful user would write by hand);
2. `producer`: the sink's per-task engine (`producing.Producer`) with C concurrent requests;
3. `spark`: `df.write.format("kinesis")` from a DataFrame of one partition (so one task with C
   concurrent requests), Spark's job overhead included.
Each is run `repeat` times; the best run is reported (the machine has 2 cores, shared with the server).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from datetime import date

import boto3

from .local_setup import create_stream, environment, put_all, spark_session


@dataclass
class Result:
    way: str
    records: int
    seconds: float

    def rate(self, size: int) -> tuple[float, float]:
        return self.records / self.seconds, self.records * size / self.seconds / 1e6


def run(records: int, size: int, concurrency: int, shards: int, repeat: int) -> list[Result]:
    environment()
    from botocore.config import Config

    from pyspark_kinesis.sink.options import parse_sink_options
    from pyspark_kinesis.sink.producing import Entry, Producer
    from pyspark_kinesis.tools.local import LocalKinesis

    payload = os.urandom(size // 2).hex().encode()[:size]
    payloads = [payload] * records
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
            f"repeat('x', {size}) AS data", "cast(id AS string) AS partitionKey"
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
            put_all(client, stream, payloads, concurrency)
            results.append(Result("loop", records, time.perf_counter() - start))

            stream = create_stream(client, shards)
            config = parse_sink_options(dict(options, streamName=stream))
            start = time.perf_counter()
            producer = Producer(config)
            for i, data in enumerate(payloads):
                producer.add(Entry(stream, data, str(i), None, i))
            producer.flush()
            producer.close()
            results.append(Result("producer", records, time.perf_counter() - start))

            stream = create_stream(client, shards)
            start = time.perf_counter()
            df.write.format("kinesis").options(**options, streamName=stream).mode("append").save()
            results.append(Result("spark", records, time.perf_counter() - start))
        spark.stop()
    return results


def best(results: list[Result]) -> dict[str, Result]:
    out: dict[str, Result] = {}
    for result in results:
        if result.way not in out or result.seconds < out[result.way].seconds:
            out[result.way] = result
    return out


def markdown(results: list[Result], records: int, size: int, concurrency: int, shards: int) -> str:
    top = best(results)
    loop_rate = top["loop"].rate(size)[0]
    lines = [
        "# Sink throughput",
        "",
        f"Measured {date.today().isoformat()} on a {os.cpu_count()}-core {platform.machine()} machine (Python "
        f"{platform.python_version()}), against kinesalite on loopback, with `pyspark-kinesis bench-sink "
        f"--records {records} --size {size} --concurrency {concurrency} --shards {shards}`: {records} records of "
        f"{size} bytes into a {shards}-shard stream, concurrency {concurrency}, best of the runs. The server shares "
        "the two cores with the writer, so these figures are the local server's ceiling, not Kinesis'.",
        "",
        "| way | records/s | MB/s | vs loop |",
        "|---|---|---|---|",
    ]
    for way in ("loop", "producer", "spark"):
        rate, mbs = top[way].rate(size)
        lines.append(f"| {way} | {rate:,.0f} | {mbs:.1f} | {rate / loop_rate:.2f}x |")
    lines += [
        "",
        "`loop`: C threads putting pre-built 500-record calls with one boto3 client. `producer`: the sink's "
        'per-task engine. `spark`: `df.write.format("kinesis")` of a one-partition DataFrame (one task), '
        "Spark's job overhead included.",
    ]
    return "\n".join(lines) + "\n"
