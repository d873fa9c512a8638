"""Latency (put to foreachBatch) and API economy (calls per minute on an idle stream) benchmarks."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.local_setup import environment, spark_session
from benchmarks.reading import fill_stream, kinesis_client, source_df
from benchmarks.report import machine


# -- 3. latency -------------------------------------------------------------------------------------
@dataclass
class LatencyRun:
    delays: list[float]  # seconds from just before each put to its foreachBatch call having its rows
    first_batch_s: float  # the query's first batch, start to commit: Python workers start cold
    put: int
    push_interval_s: float | None = None  # efo: the server's median gap between a subscription's events
    # Spark's progress of every batch in the measured window (`StreamingQueryProgress` as a dict)
    progress: list[dict[str, Any]] = field(default_factory=list)
    puts: list[float] = field(default_factory=list)  # each delay's record's put time (epoch seconds)
    attacked_from: float | None = None  # with an attack: when it began (epoch seconds)


# The phases of a micro-batch as Spark times them (`durationMs`), in the order they run.
PHASES = (
    "latestOffset",
    "walCommit",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def batches_with_rows(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batches that read rows (Spark also reports a batch that planned nothing now and then)."""
    return [p for p in progress if (p.get("numInputRows") or 0) > 0]


def phase_medians(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Each phase's median milliseconds over the batches that read rows, and the median gap from one
    batch's start to the next one's."""
    batches = batches_with_rows(progress)
    out = {
        phase: statistics.median(p["durationMs"].get(phase, 0) for p in batches)
        for phase in PHASES
        if batches and any(phase in p["durationMs"] for p in batches)
    }
    starts = sorted(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in progress)
    gaps = [(b - a).total_seconds() * 1000 for a, b in pairwise(starts)]
    if gaps:
        out["start to start"] = statistics.median(gaps)
    return out


def run_latency(
    rate: int,
    seconds: int,
    shards: int,
    work: Path,
    kind: str = "kinesalite",
    consumer_type: str = "polling",
    master: str = "local[2]",
    quiet_s: int = 0,
    attack: Callable[[], AbstractContextManager[Any]] | None = None,
) -> LatencyRun:
    """Records put at `rate`/s for `seconds` while a default-trigger query runs; each record's delay
    from just before its put to when the foreachBatch call that receives it has its rows. With
    `consumer_type` efo the query reads through enhanced fan-out (kinesis-local behind the fault
    proxy, which adds the `initial-response` event kinesis-local leaves out). `master` is Spark's: a
    `local-cluster[2,1,1024]` runs two executors, where a shard's tasks move between them.

    The clock starts once the query has finished two batches: the first one starts Spark's Python
    workers and loads the connector in them (seconds on this machine, once per query), which is a
    start-up cost, reported apart, not the latency of a running query. With `quiet_s` the stream then
    stays empty that long before records come (a quiet start: no batch runs meanwhile, and what a
    read keeps between batches, fan-out subscriptions included, may have gone). With `attack`, the
    context it makes is entered half way through the window and left at its end (`attacked_from`)."""
    environment()
    from tests.support.fault_proxy import FaultProxy

    from pyspark_kinesis.cli.local_kinesis import LocalKinesis

    efo = consumer_type == "efo"
    if efo and kind != "kinesis-local":
        raise ValueError("enhanced fan-out needs kinesis-local (kinesalite has no SubscribeToShard)")
    delays: list[float] = []
    puts: list[float] = []
    attacked_from: list[float] = []
    with LocalKinesis(kind) as server, FaultProxy(server.endpoint) if efo else nullcontext() as proxy:
        client = kinesis_client(server.endpoint)
        stream = fill_stream(client, shards, 0, 10)
        spark = spark_session(master)

        def collect(df: Any, _batch: int) -> None:
            rows = df.select("data").collect()  # the batch is read here: its rows exist from now on
            now = time.time()
            at = [float(bytes(row["data"]).decode()) for row in rows]
            puts.extend(at)
            delays.extend(now - put_at for put_at in at)

        endpoint = proxy.endpoint if proxy is not None else server.endpoint
        df = source_df(spark, endpoint, stream, work, **({"consumerType": "efo"} if efo else {}))
        checkpoint = str(work / f"cp-{uuid.uuid4().hex[:8]}")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")  # (every batch's timings)
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
        time.sleep(quiet_s)
        warm = len(query.recentProgress)
        delays.clear()
        puts.clear()
        thread = threading.Thread(target=producer)
        thread.start()
        time.sleep(seconds / 2 if attack is not None else 0)
        with attack() if attack is not None else nullcontext():
            attacked_from.append(time.time())
            thread.join(seconds + 60)
            for _wait in range(300):  # bounded: 30 s for the last records to arrive
                if len(delays) >= put[0]:
                    break
                time.sleep(0.1)
        stop.set()
        progress = list(query.recentProgress)[warm:]
        query.stop()
        spark.stop()
        pushes = push_interval(client, proxy.endpoint, stream) if proxy is not None else None
    return LatencyRun(
        delays,
        first_batch_s,
        put[0],
        pushes,
        progress,
        puts,
        attacked_from[0] if attack is not None else None,
    )


def push_interval(client: Any, endpoint: str, stream: str, seconds: float = 6.0) -> float:
    """The server's median gap between one subscription's events while records are put every 0.1 s:
    how long a record can wait in the server before it is pushed at all (on a subscription of its own,
    through the proxy at `endpoint`)."""
    from pyspark_kinesis.aws.consumers import ensure_consumer
    from pyspark_kinesis.aws.subscribe import Subscription
    from pyspark_kinesis.model import Position

    arn = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumer = ensure_consumer(client, arn, "bench-push-probe", 60).arn
    shard = client.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    start = Position.at_timestamp(int(time.time() * 1000))
    subscription = Subscription(kinesis_client(endpoint), consumer, shard, start)
    arrivals: list[float] = []
    stop = threading.Event()

    def put() -> None:
        for n in range(int(seconds * 10) + 20):  # bounded: a record every 0.1 s for the probe's length
            if stop.is_set():
                return
            client.put_record(StreamName=stream, Data=b"probe", PartitionKey=f"p{n}")
            time.sleep(0.1)

    producer = threading.Thread(target=put, daemon=True)
    producer.start()
    deadline = time.monotonic() + seconds
    try:
        for _event in subscription.events():
            arrivals.append(time.monotonic())
            if time.monotonic() > deadline:
                break
    finally:
        stop.set()
        subscription.close()
        producer.join(10)
    gaps = [b - a for a, b in pairwise(arrivals[1:])]  # (the first event comes at once)
    if not gaps:
        raise RuntimeError("the probe subscription received fewer than three events")
    return statistics.median(gaps)


def quantiles(run: LatencyRun) -> tuple[float, float, float, float]:
    """p50, p90, p99 and max of a run's delays."""
    ordered = sorted(run.delays)
    if not ordered:
        raise RuntimeError(f"no record arrived ({run.put} put)")
    pick = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))]  # noqa: E731
    return statistics.median(ordered), pick(0.9), pick(0.99), ordered[-1]


def latency_row(run: LatencyRun, label: str) -> str:
    p50, p90, p99, worst = quantiles(run)
    return f"| {label} | {run.put:,} | {len(run.delays):,} | {p50:.2f} s | {p90:.2f} s | {p99:.2f} s | {worst:.2f} s |"


def markdown_modes(
    runs: dict[str, LatencyRun], rate: int, seconds: int, shards: int, quiet_s: int = 0
) -> str:
    """Polling and/or enhanced fan-out on kinesis-local (keys: "mode" or "mode on master"); the text
    names only the modes and masters that ran."""
    masters = [m for m in dict.fromkeys(label.partition(" on ")[2] for label in runs) if m]
    efo = next((run for label, run in runs.items() if label.partition(" on ")[0] == "efo"), None)
    flags = "".join(f" --master '{m}'" for m in masters) + (f" --quiet-s {quiet_s}" if quiet_s else "")
    ran = list(dict.fromkeys(label.partition(" on ")[0] for label in runs))
    modes = "both" if len(ran) > 1 else ran[0]
    return (
        "\n".join(
            [
                "### "
                + " and ".join(TITLES[m] for m in ran).capitalize()
                + (f" after a quiet start ({quiet_s} s)" if quiet_s else ""),
                "",
                f"Measured {machine()}, with `bash scripts/bench.sh latency --kind kinesis-local --consumer-type "
                f"{modes} --rate {rate} --seconds {seconds} --shards {shards}{flags}`: the measurement above on "
                "kinesis-local, "
                + ("once " if len(ran) > 1 else "")
                + " and once ".join(READINGS[m] for m in ran)
                + "".join(f"; {MASTERS[m]}" for m in masters if m in MASTERS)
                + "."
                + (quiet_note(runs, quiet_s) if quiet_s else "")
                + (
                    " On Kinesis, fan-out propagates records in about 70 ms against about 200 ms for polling "
                    "(AWS's figures); a local server shows what the connector adds, not the service's "
                    "propagation."
                    if efo is not None
                    else ""
                )
                + push_note(efo),
                "",
                "| reading | records put | records arrived | p50 | p90 | p99 | max |",
                "|---|---|---|---|---|---|---|",
                *(latency_row(run, mode) for mode, run in runs.items()),
            ]
        )
        + "\n"
    )


TITLES = {"polling": "polling", "efo": "enhanced fan-out"}
READINGS = {
    "polling": "with polling (GetRecords)",
    "efo": "with enhanced fan-out (SubscribeToShard, through the test proxy that adds the "
    "`initial-response` event kinesis-local leaves out)",
}
MASTERS = {
    "local[2]": "`local[2]` is one executor",
    "local-cluster[2,1,1024]": "`local-cluster[2,1,1024]` is two executors of one core, where Spark places "
    "a shard's tasks on either one batch after batch",
}


def quiet_note(runs: dict[str, LatencyRun], quiet_s: int) -> str:
    """What a quiet start is, and each run's first batches after it (the ones new workers run)."""
    firsts = "; ".join(
        (f"{label}: " if len(runs) > 1 else "")
        + ", ".join(f"{p['durationMs']['triggerExecution'] / 1000:.2f} s" for p in with_rows[:3])
        for label, run in runs.items()
        if (with_rows := [p for p in run.progress if p.get("numInputRows")])
    )
    return (
        f" After the query's first two batches the stream stays empty for {quiet_s} s (no batch runs, and "
        "Spark ends idle Python workers after a minute), then records come; the first three batches with "
        f"records after the quiet spell took (start to commit) {firsts}."
    )


def push_note(run: LatencyRun | None) -> str:
    if run is None or run.push_interval_s is None:
        return ""
    return (
        f" kinesis-local pushes a subscription's events every {run.push_interval_s:.2f} s (the median gap "
        "between events on a probe subscription of the same stream while records were put every 0.1 s, "
        f"after the efo run), so under fan-out a record waits {run.push_interval_s / 2:.2f} s on average in "
        "the server before it is pushed at all; Kinesis pushes records as they arrive."
    )


P50_GOAL_S, P99_GOAL_S = 0.25, 0.6  # issue #65.7: polling, default options, 100 records/s on 4 shards


def markdown_latency(runs: list[LatencyRun], rate: int, seconds: int, shards: int, kind: str) -> str:
    """The section: a row per run (one after another, each its own query and stream), the goals judged
    on the median of the runs' p50 and p99 (one run's p99 rests on its slowest 30 records), and where
    the time of the first run's batches goes."""
    figures = [quantiles(run) for run in runs]
    p50 = statistics.median(f[0] for f in figures)
    p99 = statistics.median(f[2] for f in figures)
    command = f"bash scripts/bench.sh latency --rate {rate} --seconds {seconds} --shards {shards}"
    command += f" --runs {len(runs)}" if len(runs) > 1 else ""
    return (
        "\n".join(
            [
                "## 3. Latency from put to foreachBatch",
                "",
                f"Measured {machine()}, with `{command}`, on {kind}: records put one by one at {rate}/s for "
                f"{seconds} s into a {shards}-shard stream while a query with the default trigger (micro-batches "
                "back to back) runs; each record carries its put time, and its delay is taken when the "
                "foreachBatch call receiving it has collected its rows on the driver. Default options "
                "(`idlePollIntervalMs` 500). The clock starts after the query's first two batches: the first "
                "starts Spark's Python workers and loads the connector in them, once per query (here "
                + ", ".join(f"{run.first_batch_s:.1f}" for run in runs)
                + " s). "
                + (
                    f"{len(runs)} runs, one after another, each with its own stream and query."
                    if len(runs) > 1
                    else ""
                ),
                "",
                "| run | records put | records arrived | p50 | p90 | p99 | max |",
                "|---|---|---|---|---|---|---|",
                *(
                    f"| {number} | {run.put:,} | {len(run.delays):,} | {f[0]:.2f} s | {f[1]:.2f} s | {f[2]:.2f} s | "
                    f"{f[3]:.2f} s |"
                    for number, (run, f) in enumerate(zip(runs, figures, strict=True), 1)
                ),
                "",
                "| goal (median of the runs) | measured | met |",
                "|---|---|---|",
                f"| p50 at most {P50_GOAL_S} s | {p50:.2f} s | {'yes' if p50 <= P50_GOAL_S else 'NO'} |",
                f"| p99 at most {P99_GOAL_S} s | {p99:.2f} s | {'yes' if p99 <= P99_GOAL_S else 'NO'} |",
                *phase_table(runs[0]),
            ]
        )
        + "\n"
    )


def phase_table(run: LatencyRun) -> list[str]:
    """Where a batch's time goes, from Spark's own timings of the batches in the measured window."""
    medians = phase_medians(run.progress)
    if not medians:
        return []
    read = len(batches_with_rows(run.progress))
    return [
        "",
        f"Where the time goes (the first run): the median of Spark's timings (`durationMs`) over the {read} "
        f"batches that read rows in the window (of {len(run.progress)} it reported), and the slowest of them "
        "(by `triggerExecution`), where the tail comes from. A record waits for the batch under way to "
        "end, then for the next one: `latestOffset` is the source's planning, `addBatch` the tasks' reads and "
        "the foreachBatch call, `walCommit`/`commitOffsets` the checkpoint's writes.",
        "",
        "| batches | " + " | ".join(medians) + " |",
        "|" + "---|" * (len(medians) + 1),
        "| median | " + " | ".join(f"{ms:.0f} ms" for ms in medians.values()) + " |",
        "| slowest | "
        + " | ".join(
            f"{ms:.0f} ms" if ms is not None else "-" for ms in slowest_phases(run.progress, medians)
        )
        + " |",
    ]


def slowest_phases(progress: list[dict[str, Any]], medians: dict[str, float]) -> list[float | None]:
    """The phases of the slowest batch that read rows (by `triggerExecution`): where a tail delay comes
    from (a record that waited for it waited its whole length). `start to start` has no such figure."""
    batches = batches_with_rows(progress)
    slowest = max(batches, key=lambda p: p["durationMs"].get("triggerExecution", 0))
    return [slowest["durationMs"].get(phase, 0) if phase in PHASES else None for phase in medians]


# -- 4. API economy ---------------------------------------------------------------------------------
def _last_batch(query: Any) -> int:
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def run_api(
    shards: int, seconds: int, work: Path, idle_ms: int = 500
) -> tuple[dict[tuple[str, str], int], float, int, dict[str, int]]:
    """Calls per (agent, operation) at a counting proxy while a default-trigger query reads an idle
    stream, the window's length, the batches Spark ran in it, and the service rules the connector
    broke from start-up to stop (the proxy is strict: it enforces Kinesis's quotas, which the local
    servers do not, so a rate that only looks cheap here would show up as violations)."""
    environment()
    from tests.support.fault_proxy import FaultProxy

    from pyspark_kinesis.cli.local_kinesis import LocalKinesis

    with LocalKinesis("kinesalite") as server, FaultProxy(server.endpoint, strict=True) as proxy:
        client = kinesis_client(server.endpoint)
        stream = fill_stream(client, shards, 0, 10)
        spark = spark_session()
        df = source_df(spark, proxy.endpoint, stream, work, idlePollIntervalMs=str(idle_ms))
        checkpoint = str(work / f"cp-{uuid.uuid4().hex[:8]}")
        query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
        time.sleep(15)  # start-up and the first batches
        before, start, first = dict(proxy.calls), time.monotonic(), _last_batch(query)
        time.sleep(seconds)
        after, window, batches = dict(proxy.calls), time.monotonic() - start, _last_batch(query) - first
        query.stop()
        spark.stop()
        assert proxy.rules is not None
        violations = dict(proxy.rules.violations)
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}, window, batches, violations


def markdown_api(
    calls: dict[tuple[str, str], int],
    window: float,
    shards: int,
    idle_ms: int,
    batches: int,
    violations: dict[str, int],
) -> str:
    per_minute = 60.0 / window
    lines = [
        "## 4. API economy on an idle stream",
        "",
        f"Measured {machine()}, with `bash scripts/bench.sh api --shards {shards}`: a query with the default "
        f"trigger over an idle {shards}-shard kinesalite stream, `idlePollIntervalMs` {idle_ms} and the default "
        f"`shardDiscoveryIntervalMs` (10 s), its calls counted by a proxy in strict mode (it enforces "
        f"Kinesis's quotas and rules, docs/testing.md) over {window:.0f} s after start-up, by "
        "the part of the connector that made them (the User-Agent says `pyspark-kinesis/planner` on the "
        "driver, `/reader` on executors). The driver's GetRecords are its looks at idle shards (one record "
        "at most, not kept), so that no batch is planned while nothing is new; their ceiling is one per "
        f"shard per {idle_ms} ms: {60_000 / idle_ms:.0f} per shard per minute.",
        "",
        "| caller | operation | calls per minute | per shard per minute |",
        "|---|---|---|---|",
    ]
    for (agent, operation), count in sorted(calls.items()):
        lines.append(
            f"| {agent} | {operation} | {count * per_minute:.1f} | {count * per_minute / shards:.2f} |"
        )
    broken = ", ".join(f"{rule}: {n}" for rule, n in sorted(violations.items())) or "none"
    lines += [
        "",
        f"Batches Spark ran in those {window:.0f} s: {batches}. Service rules the connector broke, from "
        f"start-up to stop (the strict proxy's count): {broken}.",
    ]
    return "\n".join(lines) + "\n"
