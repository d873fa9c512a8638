"""What a scheduled job pays: a `trigger(availableNow=True)` query started in a fresh driver process
(the JVM's start, Spark's Python workers and the connector's imports included), beside the same query
run again in a session that has just run one with a batch (the back-to-back figure of sections 7 and
8), and in a session that ran one and then sat idle for longer than Spark keeps an idle Python worker
(`IDLE_S`: PySpark's worker factory ends a worker idle for a minute, so the next query starts its
workers again: what "a query after other work" pays).

Why: a job started every few minutes by a scheduler pays everything a fresh process costs on every
run, and the back-to-back fixed cost (about 1.3 CPU-s) says nothing of it. All three are measured the same
way here: the job is a child process (`python -m benchmarks.scheduled JOB`) whose whole tree the
meter counts (benchmarks/process_cpu.py), from a "go" on its stdin to its exit (fresh) or to its
"done" (warm and idle: the process had run the same query, with records to read, before the "go").
Nothing here is asserted."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.local_setup import create_stream, environment
from benchmarks.process_cpu import ROLES, ProcessMeter, Usage, ended_whole
from benchmarks.report import Spread, machine

WAIT_S = 600  # one job's bound
IDLE_S = 75  # longer than the minute after which Spark's Python worker factory ends an idle worker
KINDS = ("fresh", "warm", "idle")
AFTER_WORK_GOAL = 1.3  # issue #65.1: a query after other work at most 1.3x the same query back to back
FRESH_GOAL, FRESH_GOAL_MB = 1.5, 1000  # issue #65.2: a fresh job at 1 GB at least 1.5x the script's MB/CPU-s


@dataclass
class JobRun:
    kind: str  # one of KINDS
    usage: Usage
    wall_s: float
    rows: int


def _job(config: dict[str, Any]) -> None:
    """The child: wait for "go", run the query (a warm one runs it once before), say "done", end. A
    `script` job is the boto3 loop instead (section 8's), in a process of its own as a scheduler
    would run a plain script: its imports and client are inside the measurement."""
    if config["kind"] == "script":
        sys.stdin.readline()  # (go)
        from benchmarks.reading import kinesis_client, loop_read

        loop_read(kinesis_client(config["endpoint"]), config["stream"], config["records"])
        print(f"done {config['records']}", flush=True)
        sys.stdin.readline()  # (end)
        return
    from benchmarks.local_setup import spark_session

    def read(spark: Any) -> int:
        query = (
            spark.readStream.format("kinesis")
            .option("streamName", config["stream"])
            .option("region", "us-east-1")
            .option("endpointUrl", config["endpoint"])
            .option("startingPosition", "TRIM_HORIZON")
            .option("metadataPath", config["metadata"])
            .option("shardReadBytesPerSecond", "0")  # (local servers have no read quota; nor has the loop)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", config["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(WAIT_S) or query.exception() is not None:
            raise RuntimeError(f"the job's query did not end well: {query.exception()}")
        return sum(p["numInputRows"] for p in query.recentProgress)

    spark = None
    if config["kind"] != "fresh":
        spark = spark_session()
        if read(spark) == 0:
            raise RuntimeError("the first query read nothing: its session ran no batch")
        time.sleep(IDLE_S if config["kind"] == "idle" else 0)
        print("ready", flush=True)
    sys.stdin.readline()  # (go)
    if spark is None:
        spark = spark_session()
    rows = read(spark)
    print(f"done {rows}", flush=True)
    sys.stdin.readline()  # (end: the warm measurement stops at "done", before Spark's stop)
    spark.stop()


def _put_one_per_shard(client: Any, stream: str) -> int:
    shards = client.list_shards(StreamName=stream)["Shards"]
    for shard in shards:
        client.put_record(
            StreamName=stream,
            Data=b"x" * 1000,
            PartitionKey="k",
            ExplicitHashKey=shard["HashKeyRange"]["StartingHashKey"],
        )
    return len(shards)


def _show(values: list[float], digits: int) -> str:
    spread = Spread(values)
    return f"{spread.median:,.{digits}f} ({spread.samples[0]:,.{digits}f}-{spread.samples[-1]:,.{digits}f})"


def _measure(
    config: dict[str, Any], before_go: Callable[[], int], servers: tuple[int, ...] = ()
) -> tuple[JobRun, int]:
    """One job measured; `before_go` puts its records (after a warm or idle job's first query, which
    reads the ones put before it starts) and says how many; `servers`' CPU is taken out of the
    machine's busy time by the cross-check."""
    import psutil

    fresh = config["kind"] in ("fresh", "script")  # (measured to the exit of every process)
    if not fresh:
        before_go()  # (for the session's first query: a batch, so its workers are up)
    others = {child.pid for child in psutil.Process().children()}
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scheduled", json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        if not fresh and child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {config['kind']} job did not get ready")
        put = before_go()
        with ProcessMeter(root=child.pid, servers=servers) as meter:
            start = time.perf_counter()
            child.stdin.write("go\n")
            child.stdin.flush()
            done = child.stdout.readline().split()
            if fresh:  # (to its very end: Spark's stop and the JVM's exit are the job's too)
                child.stdin.write("end\n")
                child.stdin.flush()
                _until_exited(child.pid, others)
            wall = time.perf_counter() - start
        if not done or done[0] != "done":
            raise RuntimeError("the job failed (its output above)")
        if not fresh:
            child.stdin.write("end\n")
            child.stdin.flush()
        child.wait(timeout=WAIT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
    return JobRun(config["kind"], meter.usage, wall, int(done[1])), put


def _until_exited(pid: int, others: set[int]) -> None:
    """Until the job and every process it left behind have ended: the job's JVM outlives its Python by
    a moment and is then this process's (the meter makes it a child subreaper), so all of this
    process's children but `others` (the local server) must have ended, every thread (not reaped
    yet: the meter still reads their times)."""
    import psutil

    for _poll in range(WAIT_S * 20):
        children = [child.pid for child in psutil.Process().children() if child.pid not in others]
        if all(ended_whole(child) for child in children):
            return
        time.sleep(0.05)
    raise RuntimeError(f"job {pid} or a process it started did not exit")


def run(shards: int, rounds: int, work: Path) -> list[JobRun]:
    """`rounds` jobs of each kind taking turns, each reading the record per shard put since the last
    run, from one checkpoint (as a scheduled job does)."""
    environment()
    from benchmarks.reading import kinesis_client
    from pyspark_kinesis.cli.local_kinesis import LocalKinesis

    runs = []
    with LocalKinesis("kinesalite") as server:
        client = kinesis_client(server.endpoint)
        stream = create_stream(client, shards)
        base = {
            "endpoint": server.endpoint,
            "stream": stream,
            "metadata": str(work / f"meta-{uuid.uuid4().hex[:8]}"),
            "checkpoint": str(work / f"cp-{uuid.uuid4().hex[:8]}"),
        }

        def put() -> int:
            return _put_one_per_shard(client, stream)

        for kind in ("fresh", "warm"):  # (a warm-up: the machine's caches, the server's first calls)
            _measure({**base, "kind": kind}, put)
        for _round in range(rounds):
            for kind in KINDS:
                job, count = _measure({**base, "kind": kind}, put)
                if job.rows != count:
                    raise RuntimeError(f"a job read {job.rows} rows, {count} were put since the last run")
                runs.append(job)
    return runs


def run_sizes(megabytes: list[int], rounds: int, work: Path) -> dict[int, list[JobRun]]:
    """Per size: `rounds` fresh jobs and `rounds` boto3 scripts in fresh processes taking turns, each
    reading the whole stream (4 shards of 1,000 B records) from the benchmark server; each job with a
    checkpoint of its own, so each reads it all."""
    from benchmarks.cpu import memory_stream

    environment()
    out: dict[int, list[JobRun]] = {}
    for size in megabytes:
        records = 4 * (size * 1000 // 4)
        with memory_stream(4, records, 1000) as (endpoint, stream, server):
            runs = out[size] = []
            for number in range(rounds + 1):  # (the first of each: a warm-up)
                for kind in ("fresh", "script"):
                    config = {
                        "kind": kind,
                        "endpoint": endpoint,
                        "stream": stream,
                        "records": records,
                        "metadata": str(work / f"meta-{uuid.uuid4().hex[:8]}"),
                        "checkpoint": str(work / f"cp-{uuid.uuid4().hex[:8]}"),
                    }
                    job, _put = _measure(config, functools.partial(int, records), servers=(server,))
                    if job.rows != records:
                        raise RuntimeError(f"a {kind} job read {job.rows} rows of {records}")
                    if number:
                        runs.append(job)
    return out


def break_even_mb(sizes: dict[int, list[JobRun]]) -> float | None:
    """The size (MB) below which the script costs less CPU than the job: where the straight lines
    through the two kinds' median CPU-s at the smallest and largest size cross (None: they do not,
    or one size only)."""
    if len(sizes) < 2:
        return None
    low, high = min(sizes), max(sizes)

    def line(kind: str) -> tuple[float, float]:
        a, b = (Spread([r.usage.total for r in sizes[size] if r.kind == kind]).median for size in (low, high))
        slope = (b - a) / (high - low)
        return a - slope * low, slope

    (job_fixed, job_slope), (script_fixed, script_slope) = line("fresh"), line("script")
    if script_slope <= job_slope:
        return None
    return (job_fixed - script_fixed) / (script_slope - job_slope)


def markdown_sizes(sizes: dict[int, list[JobRun]], command: str) -> str:
    lines = [
        "### A scheduled job against a plain boto3 script, both in fresh processes",
        "",
        f"Measured {machine()}, with `{command}`, against the benchmark server (section 8's, its own process, "
        "not counted): 4 shards of 1,000 B records. `job`: section 8's query (`trigger(availableNow=True)` "
        "into the noop sink, byte pacing off) in a new Python process with a checkpoint of its own, measured "
        "from its go to the exit of every process it started, as the fresh row above; `script`: section 8's "
        "boto3 loop (one thread per shard, GetRecords Limit 10,000) in a new Python process, measured from "
        "its go (before it imports boto3) to its exit. MB (10^6 B) of payload per CPU-second, median "
        "(lowest-highest) of the rounds; the break-even size is where the lines through both kinds' CPU-s "
        "at the smallest and the largest size cross.",
        "",
        "| MB | job CPU-s | script CPU-s | job MB/CPU-s | script MB/CPU-s | job vs script | job wall s | "
        "script wall s | busy time unexplained |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for size, runs in sorted(sizes.items()):
        job = [r for r in runs if r.kind == "fresh"]
        script = [r for r in runs if r.kind == "script"]
        job_cpu, script_cpu = (Spread([r.usage.total for r in mine]).median for mine in (job, script))
        unexplained = Spread([r.usage.unexplained / max(r.usage.busy, 1e-9) * 100 for r in runs])
        cells = [
            f"{size:,}",
            _show([r.usage.total for r in job], 2),
            _show([r.usage.total for r in script], 2),
            _show([size / r.usage.total for r in job], 1),
            _show([size / r.usage.total for r in script], 1),
            f"{script_cpu / job_cpu:.2f}x",
            _show([r.wall_s for r in job], 1),
            _show([r.wall_s for r in script], 1),
            f"{unexplained.median:+.1f}%",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if FRESH_GOAL_MB in sizes:
        job_cpu, script_cpu = (
            Spread([r.usage.total for r in sizes[FRESH_GOAL_MB] if r.kind == kind]).median
            for kind in ("fresh", "script")
        )
        lines += _goal(
            f"a job in a fresh process at {FRESH_GOAL_MB:,} MB at least {FRESH_GOAL}x the script's MB per CPU-second",
            script_cpu / job_cpu,
            script_cpu / job_cpu >= FRESH_GOAL,
        )
    even = break_even_mb(sizes)
    lines += [
        "",
        f"Break-even: about {even:,.0f} MB per run (below it the script costs less CPU; Spark's start is the "
        "difference)."
        if even is not None
        else "Break-even: the lines do not cross within these sizes' slopes.",
    ]
    return "\n".join(lines) + "\n"


def markdown(runs: list[JobRun], shards: int, command: str) -> str:
    lines = [
        "### A scheduled job: a fresh driver process per run",
        "",
        f"Measured {machine()}, with `{command}`, on kinesalite: a `trigger(availableNow=True)` query into the "
        f"noop sink over a {shards}-shard stream, one checkpoint for all runs, one 1,000 B record per shard put "
        "before each run (what a job started every few minutes finds). `fresh`: the job in a new Python "
        "process, measured from its go (the interpreter up, nothing of Spark's loaded) to the exit of every "
        "process it started (the JVM's start and stop, the SparkSession, Spark's Python workers, the "
        "connector's imports, the query), as a scheduler runs it; `warm`: the same query in a process that "
        "has just run it (a batch read), from its start to its end (the back-to-back fixed cost of sections 7 and 8); "
        f"`idle`: the same, after the process sat idle for {IDLE_S} s (longer than the minute after which Spark "
        "ends an idle Python worker: what a query after other work pays). Every process of the job's tree is counted (benchmarks/process_cpu.py); median "
        "(lowest-highest) of the rounds.",
        "",
        "| run | CPU-s | "
        + " | ".join(f"{role} CPU-s" for role in ROLES)
        + " | wall s | busy time unexplained |",
        "|---|---|" + "---|" * len(ROLES) + "---|---|",
    ]
    for kind in KINDS:
        mine = [r for r in runs if r.kind == kind]
        if not mine:
            continue
        cells = [_show([r.usage.total for r in mine], 2)]
        cells += [_show([r.usage.seconds[role] for r in mine], 2) for role in ROLES]
        cells += [_show([r.wall_s for r in mine], 1)]
        unexplained = Spread([r.usage.unexplained / max(r.usage.busy, 1e-9) * 100 for r in mine])
        cells += [f"{unexplained.median:+.1f}%"]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    warm, idle = ([r.usage.total for r in runs if r.kind == kind] for kind in ("warm", "idle"))
    if warm and idle:
        after = Spread(idle).median / Spread(warm).median
        lines += _goal(
            f"a query after other work (`idle`) at most {AFTER_WORK_GOAL}x the same query back to back (`warm`), in CPU-s",
            after,
            after <= AFTER_WORK_GOAL,
        )
    return "\n".join(lines) + "\n"


def _goal(goal: str, measured: float, met: bool) -> list[str]:
    """A goal's table under the figures it is judged from."""
    return [
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        f"| {goal} | {measured:.2f}x | {'yes' if met else 'NO'} |",
    ]


if __name__ == "__main__":
    _job(json.loads(sys.argv[1]))
