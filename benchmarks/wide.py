"""A running query over a wide stream (issue #65 item 5): what a processingTime query on two executors
costs its driver and executors as the shard count grows, most of the shards idle.

Why a running query and not the planning benchmark (section 5): at thousands of shards what a user
pays is per trigger, every trigger, for the query's life: the looks at idle shards (one GetRecords of
one record each, at most one per shard per `idlePollIntervalMs`), the planning Spark waits for in
`latestOffset`, the tasks a batch of a few busy shards among thousands takes, and the memory the
driver and the executors hold. Everything goes through the strict proxy (Kinesis's quotas and rules,
counted by caller), and a few records a second arrive at random shards so that batches run.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .local_setup import create_stream, environment, spark_session
from .process_cpu import spark_jvm
from .reading import kinesis_client, source_df
from .report import machine

MASTER = "local-cluster[2,1,1024]"


@dataclass
class WideRun:
    """The figures of one run at one shard count."""

    shards: int
    window_s: float
    planning_ms: list[float] = field(default_factory=list)  # latestOffset per batch
    trigger_ms: list[float] = field(default_factory=list)  # triggerExecution per batch
    tasks: list[int] = field(default_factory=list)  # tasks per batch (from the offset log)
    rows: int = 0
    calls: dict[tuple[str, str], int] = field(default_factory=dict)  # in the window
    violations: dict[str, int] = field(default_factory=dict)
    driver_mib: float = 0.0  # peak RSS: the driver's JVM and Python
    executors_mib: float = 0.0  # peak RSS: the executors' JVMs and Python workers

    def per_shard_s(self, agent: str, operation: str) -> float:
        return self.calls.get((agent, operation), 0) / self.shards / self.window_s


def _rss_mib(process: psutil.Process) -> float:
    try:
        return float(process.memory_info().rss) / 2**20
    except psutil.Error:  # (ended between the listing and the reading)
        return 0.0


def memory_sample() -> tuple[float, float]:
    """(driver, executors) RSS in MiB now. The driver is this Python process (the strict proxy's threads
    included) and its Spark JVM (`process_cpu.spark_jvm`); executors are every process under that JVM
    (their JVMs and Python workers). The local Kinesis server, a child of this process, is left out."""
    me = psutil.Process()
    try:
        jvm = psutil.Process(spark_jvm())
    except (RuntimeError, psutil.Error):
        return _rss_mib(me), 0.0
    try:
        under = jvm.children(recursive=True)
    except psutil.Error:
        under = []
    return _rss_mib(me) + _rss_mib(jvm), sum(_rss_mib(p) for p in under)


def tasks_per_batch(checkpoint: str, batches: list[int]) -> list[int]:
    """Each batch's task count, as its offset in Spark's offset log says."""
    from pyspark_kinesis.source.state.offsets import SourceOffset

    out = []
    for batch in batches:
        path = Path(checkpoint) / "offsets" / str(batch)
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        offset = SourceOffset.from_json(json.loads(lines[2]))
        out.append(len(offset.tasks()))
    return out


def run_wide(
    shards: int, seconds: int, work: Path, trigger_ms: int = 5000, rate: int = 20, idle_ms: int = 500
) -> WideRun:
    """One run: a `shards`-shard kinesalite stream behind the strict proxy, a processingTime query on
    `MASTER` from TRIM_HORIZON, `rate` records a second to random shards; figures over `seconds` after
    the first batches."""
    environment()
    from tests.support.fault_proxy import FaultProxy

    from pyspark_kinesis.cli.local_kinesis import LocalKinesis

    run = WideRun(shards, float(seconds))
    limit = max(1000, shards + 10)
    with (
        LocalKinesis("kinesalite", shard_limit=limit) as server,
        FaultProxy(server.endpoint, strict=True) as proxy,
    ):
        client = kinesis_client(server.endpoint)
        stream = create_stream(client, shards)
        spark = spark_session(MASTER)
        df = source_df(spark, proxy.endpoint, stream, work, idlePollIntervalMs=str(idle_ms))
        checkpoint = str(work / f"cp-{uuid.uuid4().hex[:8]}")
        query = (
            df.writeStream.format("noop")
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        stop = threading.Event()
        generator = random.Random(shards)

        def put() -> None:
            while not stop.wait(1.0 / rate):
                key = str(generator.randrange(2**128))
                client.put_record(StreamName=stream, Data=b"x" * 100, PartitionKey="k", ExplicitHashKey=key)

        putter = threading.Thread(target=put, daemon=True)
        putter.start()
        deadline = time.monotonic() + 600
        while (
            query.lastProgress is None or int(query.lastProgress["batchId"]) < 1
        ) and time.monotonic() < deadline:
            time.sleep(1)  # (start-up: the first batch reads every shard once)
        first = int(query.lastProgress["batchId"]) if query.lastProgress else -1
        before, start = dict(proxy.calls), time.monotonic()
        while time.monotonic() - start < seconds:
            driver, executors = memory_sample()
            run.driver_mib, run.executors_mib = max(run.driver_mib, driver), max(run.executors_mib, executors)
            time.sleep(1)
        after = dict(proxy.calls)
        run.window_s = time.monotonic() - start
        progress = [p for p in query.recentProgress if int(p["batchId"]) > first]
        stop.set()
        putter.join(timeout=10)
        query.stop()
        spark.stop()
        assert proxy.rules is not None
        run.violations = dict(proxy.rules.violations)
    run.calls = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    with_rows = [p for p in progress if p.get("numInputRows", 0) > 0]
    run.planning_ms = [float(p["durationMs"].get("latestOffset", 0)) for p in with_rows]
    run.trigger_ms = [float(p["durationMs"].get("triggerExecution", 0)) for p in with_rows]
    run.rows = sum(int(p.get("numInputRows", 0)) for p in progress)
    run.tasks = tasks_per_batch(checkpoint, sorted({int(p["batchId"]) for p in with_rows}))
    return run


def _median(values: list[float] | list[int]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})" if values else "-"


def markdown_wide(runs: list[WideRun], command: str, plot: str | None) -> str:
    lines = [
        "## 12. A running query over a wide stream",
        "",
        f"Measured {machine()}, with `{command}`: a `processingTime` query (5 s) on `{MASTER}` (two "
        "executors of one core) over an empty kinesalite stream of each width behind the strict proxy "
        "(Kinesis's quotas and rules, calls counted by caller), from TRIM_HORIZON, while 20 records a second "
        "arrive at random shards (so most shards idle, a few have news each trigger). Figures over the "
        "window after the first batches; batches with rows only; medians (lowest-highest). Planning is "
        "Spark's `latestOffset` (the connector's looks at idle shards and its plan); tasks per batch are "
        "from the offset Spark logged; memory is the peak resident set of the driver (its JVM, and the "
        "Python process, which also runs the strict proxy here) and of the two executors (JVMs and Python "
        "workers). Calls per shard per second are against Kinesis's 5 GetRecords per shard per second.",
        "",
        "| shards | batches | planning ms | trigger ms | tasks per batch | rows | planner GetRecords /shard/s "
        "| readers' calls /shard/s | driver MiB | executors MiB | rules broken |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        readers = (
            sum(n for (agent, _op), n in run.calls.items() if agent == "reader") / run.shards / run.window_s
        )
        broken = sum(run.violations.values())
        lines.append(
            f"| {run.shards:,} | {len(run.planning_ms)} | {_median(run.planning_ms)} | {_median(run.trigger_ms)} "
            f"| {_median(run.tasks)} | {run.rows:,} | {run.per_shard_s('planner', 'GetRecords'):.2f} "
            f"| {readers:.3f} | {run.driver_mib:,.0f} | {run.executors_mib:,.0f} | {broken} |"
        )
    if plot:
        lines += ["", f"![planning time and memory by shard count]({plot})"]
    return "\n".join(lines) + "\n"


def draw(runs: list[WideRun], path: str) -> None:
    """Planning time and peak memory against the shard count (docs/img/wide.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = [r.shards for r in runs]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(widths, [statistics.median(r.planning_ms) if r.planning_ms else 0 for r in runs], marker="o")
    left.set(xlabel="shards", ylabel="latestOffset, median ms", title="planning per batch")
    right.plot(widths, [r.driver_mib for r in runs], marker="o", label="driver")
    right.plot(widths, [r.executors_mib for r in runs], marker="o", label="executors")
    right.set(xlabel="shards", ylabel="peak RSS, MiB", title="memory")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
