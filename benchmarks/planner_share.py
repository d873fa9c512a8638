"""The connector's share of a streaming query's planner process, per query.

Spark starts a fresh Python process for every streaming query's planner (PySpark's streaming source
runner): it imports PySpark, unpickles the data source (which imports the connector), asks it for a
stream reader and then, batch after batch, for offsets, partitions and commits. The process's own
start is Spark's; the rest is the connector's, paid again by every query. Section 8's fixed cost holds
both (and the JVM's); this measures the connector's part alone: a fresh Python process per round makes
the runner's calls in its order (the calls of a `trigger(availableNow=True)` query of one batch)
against the benchmark server, each timed by the process's CPU time (user + system). The batch's rows
are read in between, as an executor would, and not counted. PySpark's own imports are timed too, for
comparison only: a real planner imports PySpark from `pyspark.zip`, without bytecode, so Spark's real
share is larger than this one. botocore's (and urllib3's) imports are timed on their own, after the
stream reader's first step (its freeze, aws/gc_freeze.py) and before the rest of it: the connector's
share counts them (it brings them), and the column says how much of it they are.

Bytecode: `pip install` compiles a package's modules, so an installed connector imports from bytecode.
This repository's editable install has none where PYTHONDONTWRITEBYTECODE is set (as on the machines
that run it), which would charge every round for compiling the connector. So the children keep their
bytecode in a cache of their own (PYTHONPYCACHEPREFIX), written by the warm-up round; rounds alternate
between that (as installed) and the same cache without the connector's bytecode (each process compiles
the connector's modules, as after `pip install --no-compile`), so the table shows both.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks import child_env
from benchmarks.report import machine

# The child: one query's planner, in the runner's order. Its only imports before the first clock reading
# are the standard library's; the connector loads when the data source is unpickled, as in Spark's
# runner, and botocore when the stream reader is made.
CHILD = r"""
import json, pickle, sys, time
clock = time.process_time
marks = {"start": clock()}
import pyspark.sql.streaming.python_streaming_source_runner  # what the runner imports itself
marks["pyspark"] = clock()
with open(sys.argv[1], "rb") as f:
    source, schema = pickle.load(f)  # imports the connector, as the runner's unpickling does
marks["import"] = clock()
# The stream reader's first step (its freeze, aws/gc_freeze.py), then the third-party modules the
# connector's AWS code imports, timed on their own: the reader would load them right after, in its
# first client; first here, they say how much of the share is botocore's own start.
from pyspark_kinesis.aws.gc_freeze import freeze_before_loading
freeze_before_loading()
import botocore.awsrequest, botocore.config, botocore.credentials, botocore.exceptions
import botocore.httpsession, botocore.parsers, botocore.session, urllib3.exceptions
marks["botocore"] = clock()
reader = source.streamReader(schema)
marks["reader"] = clock()
spent = 0.0
def timed(call, *args):
    global spent
    before = clock()
    out = call(*args)
    spent += clock() - before
    return out
def roundtrip(offset):  # offsets cross the runner as JSON
    return json.loads(json.dumps(offset))
prepare = getattr(reader, "prepareForTriggerAvailableNow", None)
if prepare is not None:
    timed(prepare)
start = roundtrip(timed(reader.initialOffset))
limit = timed(reader.getDefaultReadLimit)
end = roundtrip(timed(reader.latestOffset, start, limit))
parts = timed(reader.partitions, start, end)
rows = 0
for part in pickle.loads(pickle.dumps(parts)):  # the executor's part: not counted
    for batch in reader.read(part):
        rows += batch.num_rows
timed(reader.commit, end)
after = roundtrip(timed(reader.latestOffset, end, limit))  # the next trigger finds nothing new
timed(reader.stop)
marks["plan"] = spent
print(json.dumps({"marks": marks, "rows": rows, "tasks": len(parts), "moved": after != end}))
"""


@dataclass(frozen=True)
class Share:
    """One fresh planner process: CPU seconds per phase."""

    pyspark: float  # PySpark's own imports (Spark's share; larger from pyspark.zip)
    botocore: float  # botocore's and urllib3's imports (what the connector's AWS code loads)
    imports: float  # the connector's modules, loaded by unpickling the data source
    reader: float  # streamReader(): options, start-up checks, clients
    plan: float  # the planning calls of one batch and the next trigger's look
    rows: int
    tasks: int
    compiled: bool  # the connector's modules imported from bytecode (as pip installs them)

    @property
    def connector(self) -> float:
        """Everything the connector brings into the process, botocore's import included."""
        return self.botocore + self.imports + self.reader + self.plan


def _bytecode_of_the_connector(prefix: Path) -> Path:
    """Where, under a PYTHONPYCACHEPREFIX, the connector's modules keep their bytecode (the prefix
    mirrors the source tree's absolute paths)."""
    import pyspark_kinesis

    package = Path(pyspark_kinesis.__file__).resolve().parent
    return prefix / package.relative_to(package.anchor)


def one_query(
    endpoint: str, stream: str, work: Path, prefix: Path, compiled: bool, write: bool = False
) -> Share:
    """A fresh process plans (and reads) one batch of `stream` from TRIM_HORIZON, with the bytecode
    cache `prefix` (written only when `write`), without the connector's part of it unless `compiled`."""
    from pyspark_kinesis.datasource import KinesisDataSource

    options = {
        "streamName": stream,
        "region": "us-east-1",
        "endpointUrl": endpoint,
        "startingPosition": "TRIM_HORIZON",
        "metadataPath": str(work / f"meta-{len(os.listdir(work))}"),
        "shardReadBytesPerSecond": "0",
    }
    source = KinesisDataSource(options)
    blob = work / "source.pickle"
    blob.write_bytes(pickle.dumps((source, source.schema())))
    env = child_env() | {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "PYTHONPYCACHEPREFIX": str(prefix),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write:  # the warm-up writes the cache, no measured round does
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    connector = _bytecode_of_the_connector(prefix)
    aside = connector.with_name(connector.name + ".aside")
    if not compiled:
        connector.rename(aside)  # the process finds no bytecode of the connector's modules
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(blob)], env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        if not compiled:
            aside.rename(connector)
    if done.returncode != 0:
        raise RuntimeError(f"the planner process failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out["moved"]:
        raise RuntimeError("the trigger after the batch found new records: the stream was not still")
    marks = out["marks"]
    return Share(
        pyspark=marks["pyspark"] - marks["start"],
        botocore=marks["botocore"] - marks["import"],
        imports=marks["import"] - marks["pyspark"],
        reader=marks["reader"] - marks["botocore"],
        plan=marks["plan"],
        rows=out["rows"],
        tasks=out["tasks"],
        compiled=compiled,
    )


def run(shard_counts: list[int], rounds: int) -> dict[tuple[int, bool], list[Share]]:
    """`rounds` fresh planner processes per shard count and bytecode case (alternating), over a stream
    of one record per shard."""
    from benchmarks.cpu import memory_stream

    results: dict[tuple[int, bool], list[Share]] = {}
    for shards in shard_counts:
        with (
            memory_stream(shards, shards, 1000) as (endpoint, stream, _pid),
            tempfile.TemporaryDirectory(prefix="bench-planner-") as work,
            tempfile.TemporaryDirectory(prefix="bench-planner-pyc-") as prefix,
        ):
            # warm-up, not counted: writes the bytecode cache, fills the OS's file cache
            one_query(endpoint, stream, Path(work), Path(prefix), compiled=True, write=True)
            for case in (True, False):
                results[(shards, case)] = []
            for _ in range(rounds):
                for case in (True, False):
                    results[(shards, case)].append(
                        one_query(endpoint, stream, Path(work), Path(prefix), case)
                    )
        for shares in (results[(shards, True)], results[(shards, False)]):
            for share in shares:
                if share.rows != shards:
                    raise RuntimeError(f"{shards} shards: the batch read {share.rows} rows, not {shards}")
    return results


GOAL_S = 0.2  # issue #48: the connector's share of a query's planner, CPU-s


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):.3f} ({ordered[0]:.3f}-{ordered[-1]:.3f})"


def markdown(results: dict[tuple[int, bool], list[Share]], rounds: int, command: str) -> str:
    lines = [
        "## 10. The connector's share of a query's planner process",
        "",
        f"Measured {machine()}, with `{command}`. Spark starts a fresh Python process for every "
        "streaming query's planner; this runs that process's calls (benchmarks/planner_share.py: "
        "unpickle the data source, `streamReader`, then one `trigger(availableNow=True)` batch's "
        "`prepareForTriggerAvailableNow`, `initialOffset`, `getDefaultReadLimit`, `latestOffset`, "
        "`partitions`, `commit`, and the next trigger's `latestOffset`) in a fresh process per round "
        f"against the benchmark server, over a stream of one 1,000 B record per shard, {rounds} rounds "
        "after a warm-up, each phase timed by the process's CPU time. The batch's rows are read in "
        "between, as an executor would, and not counted. `PySpark imports` is the runner's own import "
        "of PySpark, for comparison only: a real planner imports it from `pyspark.zip` without bytecode, "
        "so Spark's share there is larger (section 8's fixed cost holds both, and the JVM's). "
        "`connector modules` are loaded by unpickling the data source; `botocore imports` are the "
        "botocore and urllib3 modules the connector's AWS code imports, loaded on their own after the "
        "stream reader's first step (its `gc.freeze()` of what the process held, aws/gc_freeze.py) to "
        "show their part; `streamReader` is the rest of it (options, start-up checks, clients); "
        "`connector per query` is the sum of the four columns before it, botocore's import included. `bytecode`: `installed` imports the connector "
        "from bytecode, as `pip install` leaves it (the goal's row); `none` compiles its modules in "
        "every process (after `pip install --no-compile`, or an editable install where "
        "PYTHONDONTWRITEBYTECODE is set); the rounds alternate between the two. Median "
        "(lowest-highest), CPU seconds.",
        "",
        "| shards | tasks | bytecode | PySpark imports (Spark's) | connector modules | botocore imports "
        "| streamReader (checks, clients) | planning calls | connector per query | goal (< 0.2 CPU-s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (shards, compiled), shares in results.items():
        connector = statistics.median(s.connector for s in shares)
        verdict = ("met" if connector < GOAL_S else "not met") if compiled else "(not the goal's case)"
        lines.append(
            f"| {shards} | {shares[0].tasks} | {'installed' if compiled else 'none'} | "
            f"{_spread([s.pyspark for s in shares])} | "
            f"{_spread([s.imports for s in shares])} | {_spread([s.botocore for s in shares])} | "
            f"{_spread([s.reader for s in shares])} | "
            f"{_spread([s.plan for s in shares])} | {_spread([s.connector for s in shares])} | {verdict} |"
        )
    return "\n".join(lines) + "\n"
