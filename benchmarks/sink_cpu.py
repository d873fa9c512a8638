"""The sink's CPU per MB written, against a boto3 PutRecords loop, on the benchmark server.

Why this and not `bench.sh sink`: that one measures wall time on kinesalite, which sets the pace (the
server shares the two cores); what a user pays is CPU. The benchmark server (memory_server.py, its own
process, its CPU not counted) accepts every PutRecords at once, so each writer runs as fast as its own
CPU lets it. The same N records of S bytes (partition keys "0", "1", ...) are written four ways, taking
turns for `rounds` rounds:

1. `loop`: its own process; as many threads as the concurrency, each sending 500-record PutRecords calls
   with one boto3 client (`local_setup.put_all`, what a careful user writes by hand);
2. `producer`: its own process; the sink's per-task engine (`producing.Producer`), rows added one by
   one as a task adds them;
3. `aggregated`: its own process; the same with rows packed into KPL aggregated records per shard
   (`aggregate=true`);
4. `spark`: `df.write.format("kinesis")` of a cached one-partition DataFrame, every Spark process's CPU
   (ProcessMeter: the JVM, the Python workers, the driver's Python), and beside it the same write of
   one row (Spark's fixed cost of a write job), so that what each further MB costs shows.

The loop's and the producers' CPU is their process time around the writes, after one warm-up call
(clients made, service model loaded). Figures are MB of payload per CPU-second, medians over the
rounds with the lowest and highest. Nothing here is asserted: `goals` says what the run shows.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass, field

from benchmarks import child_figures
from benchmarks.process_cpu import DRIVER_PYTHON, EXECUTOR_PYTHON, JVM, ProcessMeter, Usage
from benchmarks.report import Spread, machine

MB = 1_000_000
CHILD_WAYS = ("loop", "producer", "aggregated")
PRODUCER_VS_LOOP, AGGREGATED_VS_LOOP, SPARK_VS_PRODUCER = 1.5, 4.0, 1.3  # issue 65.4's goals


@dataclass
class SinkCpu:
    records: int
    size: int
    concurrency: int
    shards: int
    cpu: dict[str, list[float]] = field(default_factory=lambda: {w: [] for w in CHILD_WAYS})
    spark: list[Usage] = field(default_factory=list)
    fixed: list[Usage] = field(default_factory=list)  # the same write of one row

    @property
    def megabytes(self) -> float:
        return self.records * self.size / MB

    def rate(self, way: str) -> Spread:
        """MB per CPU-second of a way, over the rounds."""
        seconds = [u.total for u in self.spark] if way == "spark" else self.cpu[way]
        return Spread([self.megabytes / max(s, 1e-9) for s in seconds])

    def beyond_fixed(self) -> Spread:
        """The Spark write's MB per CPU-second beyond its fixed cost: each round's whole write minus
        that round's one-row write (measured after the same history)."""
        spent = [w.total - f.total for w, f in zip(self.spark, self.fixed, strict=True)]
        return Spread([self.megabytes / max(s, 1e-9) for s in spent])

    def flagged(self) -> int:
        return sum(u.flagged() for u in (*self.spark, *self.fixed))


# -- the loop and the producers, each in its own process ----------------------------------------------
def child() -> None:
    """Entry of a child: argv way, endpoint, stream, records, size, concurrency; prints its CPU."""
    way, endpoint, stream = sys.argv[1], sys.argv[2], sys.argv[3]
    records, size, concurrency = (int(a) for a in sys.argv[4:7])
    from benchmarks.local_setup import environment

    environment()
    payloads = [(b"%0*d" % (size, 7))[:size]] * records
    if way == "loop":
        import boto3
        from botocore.config import Config

        from benchmarks.local_setup import put_all

        client = boto3.client(
            "kinesis",
            endpoint_url=endpoint,
            region_name="us-east-1",
            config=Config(max_pool_connections=concurrency * 2),
        )
        put_all(client, stream, payloads[:1], 1)  # (warm-up: the client made, the model loaded)
        begin, wall = time.process_time(), time.perf_counter()
        put_all(client, stream, payloads, concurrency, keys_from=0)
    else:
        write = _producer_write(endpoint, stream, concurrency, aggregate=way == "aggregated")
        write(payloads[:1])
        begin, wall = time.process_time(), time.perf_counter()
        write(payloads)
    print(json.dumps({"cpu": time.process_time() - begin, "wall": time.perf_counter() - wall}))


def _producer_write(endpoint: str, stream: str, concurrency: int, aggregate: bool):  # type: ignore[no-untyped-def]
    """A function that writes payloads through the sink's engine, as one task of a write does."""
    from pyspark_kinesis.aws.kinesis import KinesisProxy, sink_target
    from pyspark_kinesis.sink.options import parse_sink_options
    from pyspark_kinesis.sink.packing import Aggregator, ShardRouter
    from pyspark_kinesis.sink.producing import MAX_RECORD_BYTES, Entry, Producer

    options = {
        "streamName": stream,
        "region": "us-east-1",
        "endpointUrl": endpoint,
        "maxConcurrentRequests": str(concurrency),
        "aggregate": str(aggregate).lower(),
    }
    config = parse_sink_options(options)
    router = ShardRouter(KinesisProxy(sink_target(config.aws, stream), agent="sink").list_shards(True))

    def write(payloads: list[bytes]) -> None:
        producer = Producer(config)
        adder = (
            Aggregator(producer, MAX_RECORD_BYTES, lambda _stream, _refresh: router)
            if aggregate
            else producer
        )
        for i, data in enumerate(payloads):
            adder.add(Entry(stream, data, str(i), None, i))
        adder.flush()
        producer.close()

    return write


def run_child(way: str, endpoint: str, stream: str, records: int, size: int, concurrency: int) -> float:
    code = "from benchmarks.sink_cpu import child; child()"
    args = [way, endpoint, stream, str(records), str(size), str(concurrency)]
    return float(child_figures(code, args, f"the {way} writer")["cpu"])


# -- the run -----------------------------------------------------------------------------------------
def run(records: int, size: int, concurrency: int, shards: int, rounds: int) -> SinkCpu:
    from benchmarks.cpu import memory_stream
    from benchmarks.local_setup import environment, spark_session

    environment()
    result = SinkCpu(records, size, concurrency, shards)
    spark = spark_session()
    try:
        # (the server's own stream holds one record per shard: it is written to, never read)
        with memory_stream(shards, shards, 1) as (endpoint, stream, server_pid):
            options = {
                "streamName": stream,
                "region": "us-east-1",
                "endpointUrl": endpoint,
                "maxConcurrentRequests": str(concurrency),
            }
            text = (b"%0*d" % (size, 7))[:size].decode()
            whole = spark.range(records, numPartitions=1).selectExpr(
                f"'{text}' AS data", "cast(id AS string) AS partitionKey"
            )
            whole = whole.cache()
            whole.count()
            one = whole.limit(1).cache()
            one.count()

            def write(df) -> None:  # type: ignore[no-untyped-def]
                df.write.format("kinesis").options(**options).mode("append").save()

            write(one)  # (warm-up: the session's first write job, its Python workers)
            for _round in range(rounds):
                for way in CHILD_WAYS:
                    result.cpu[way].append(run_child(way, endpoint, stream, records, size, concurrency))
                write(one)  # (unmeasured: each measured write follows a write, after the same history)
                with ProcessMeter(servers=(server_pid,)) as measured:
                    write(one)
                result.fixed.append(measured.usage)
                with ProcessMeter(servers=(server_pid,)) as measured:
                    write(whole)
                result.spark.append(measured.usage)
    finally:
        spark.stop()
    return result


# -- the report --------------------------------------------------------------------------------------
def goals(result: SinkCpu) -> list[tuple[str, str, bool]]:
    """(goal, measured, met) for the issue's three goals."""
    loop = result.rate("loop").median
    producer = result.rate("producer").median
    aggregated = result.rate("aggregated").median
    beyond = result.beyond_fixed().median
    return [
        (
            f"producer at least {PRODUCER_VS_LOOP}x the loop's MB per CPU-second",
            f"{producer / loop:.2f}x",
            producer / loop >= PRODUCER_VS_LOOP,
        ),
        (
            f"aggregated at least {AGGREGATED_VS_LOOP}x the loop's",
            f"{aggregated / loop:.2f}x",
            aggregated / loop >= AGGREGATED_VS_LOOP,
        ),
        (
            f"the Spark write beyond its fixed cost within {SPARK_VS_PRODUCER}x of the producer",
            f"{producer / beyond:.2f}x the producer's CPU per MB",
            producer / beyond <= SPARK_VS_PRODUCER,
        ),
    ]


def markdown(result: SinkCpu, command: str) -> str:
    loop = result.rate("loop").median
    rounds = len(result.spark)
    lines = [
        "## 11. The sink's CPU per MB written",
        "",
        f"Measured {machine()}, with `{command}`: {result.records:,} records of {result.size:,} B "
        f"({result.megabytes:,.0f} MB; partition keys 0, 1, ...) into the benchmark server's "
        f"{result.shards}-shard stream (it accepts every PutRecords at once; its CPU is not counted), "
        f"concurrency {result.concurrency}, the four ways taking turns, {rounds} rounds: MB of payload per "
        "CPU-second, median (lowest-highest).",
        "",
        "| way | MB per CPU-s | vs loop |",
        "|---|---|---|",
    ]
    for way in (*CHILD_WAYS, "spark"):
        spread = result.rate(way)
        lines.append(f"| {way} | {_show(spread)} | {spread.median / loop:.2f}x |")
    beyond = result.beyond_fixed()
    fixed = statistics.median(u.total for u in result.fixed)
    split = ", ".join(
        f"{role} {statistics.median(u.seconds[role] / max(u.total, 1e-9) for u in result.spark):.0%}"
        for role in (JVM, EXECUTOR_PYTHON, DRIVER_PYTHON)
    )
    lines += [
        f"| spark, beyond its fixed cost | {_show(beyond)} | {beyond.median / loop:.2f}x |",
        "",
        f"Spark's fixed cost of a write job (the same write of one row): {fixed:.2f} CPU-s (median). "
        f"Where the Spark write's CPU goes (median shares): {split}. "
        f"Measurements the meter flagged (a process left uncounted or counted twice): {result.flagged()} "
        f"of {2 * rounds}.",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    lines += [f"| {goal} | {got} | {'yes' if met else 'NO'} |" for goal, got, met in goals(result)]
    return "\n".join(lines) + "\n"


def _show(spread: Spread) -> str:
    return f"{spread.median:.1f} ({spread.samples[0]:.1f}-{spread.samples[-1]:.1f})"
