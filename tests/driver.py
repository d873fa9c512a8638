"""Running a streaming query in its own driver process (tests/integration/driver_app.py), so that
tests and the chaos suite can SIGKILL it, set its executors' environment, and read what it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

APP = Path(__file__).with_name("integration") / "driver_app.py"
ROOT = Path(__file__).resolve().parents[1]
# On the PYTHONPATH of every driver started here (and of its local executors): the task-failure seam,
# active only where PYSPARK_KINESIS_FAULT is set (tests/support/task_faults/sitecustomize.py).
TASK_FAULTS = ROOT / "tests" / "support" / "task_faults"


def start_driver(cfg: dict, env: dict | None = None) -> subprocess.Popen:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join((str(ROOT), str(TASK_FAULTS)))
    full_env.update(env or {})
    # Its own session, so the SIGKILL below reaches the driver's JVM and Python workers too.
    return subprocess.Popen(
        [sys.executable, str(APP), json.dumps(cfg)],
        env=full_env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(cfg["checkpoint"] + ".log", "ab"),
    )


def run_driver(cfg: dict, env: dict | None = None, timeout_s: float = 240) -> None:
    process = start_driver(cfg, env)
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"driver did not finish within {timeout_s} s") from None
    log = Path(cfg["checkpoint"] + ".log").read_text(errors="replace")
    assert code == 0, f"driver exited with {code}:\n{log[-3000:]}"


def output_rows(out: Path) -> list[dict]:
    """Rows of every batch in batch order, then in their order inside the batch; each row carries its
    batch id as "batch"."""
    rows = []
    # A folder with no data file is a batch whose write a stop interrupted (Spark's writer had cleared
    # it, or left only its _temporary folder): nothing delivered (a restart runs that batch again).
    folders = sorted(
        (p for p in out.glob("batch=*") if any(p.glob("*.parquet"))), key=lambda p: int(p.name.split("=")[1])
    )
    for folder in folders:
        batch = int(folder.name.split("=")[1])
        table = pq.read_table(folder).sort_by("pos")
        rows.extend(dict(row, batch=batch) for row in table.to_pylist())
    return rows


# -- the query's state, read from its checkpoint and metadataPath ------------------------------------
def _numbered(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()} if folder.exists() else set()


def in_flight(checkpoint: Path) -> int | None:
    """The batch whose offset Spark logged and has not committed yet (None between batches)."""
    pending = _numbered(checkpoint / "offsets") - _numbered(checkpoint / "commits")
    return max(pending) if pending else None


def durable_offsets(checkpoint: Path) -> set[int]:
    """The batches whose offsets Spark wrote to its offset log (under async progress tracking, some)."""
    return _numbered(checkpoint / "offsets")


def tip_positions(checkpoint: Path, meta: Path | None = None) -> dict[str, str | None]:
    """The shards the query knows at the tip at a position a restart may resume from, each with the
    smallest sequence number among those positions (None: none is a sequence number): an entry of an
    offset Spark logged from its last committed batch on that carries a tip time (`ShardState.tip_ms`),
    and, under `meta` (the metadataPath), a batch-end record or a quiet note of a batch from then on
    that says so (a restart plans from them too: under asynchronous progress tracking a batch's record
    can say the tip while Spark's log does not have the next offset yet; found by the chaos run of
    2026-11-29, whose age-out fault trimmed records behind such a tip). Every record of such a shard
    after that position arrived after the tip was seen (within the margin of a read's timing: an
    enhanced fan-out event is a second old when it says the tip), so in a real stream none of them can
    age out within the retention."""
    from pyspark_kinesis.source.state.offsets import SourceOffset

    logged = sorted(_numbered(checkpoint / "offsets"))
    done = _numbered(checkpoint / "commits")
    first = max(done) if done else (logged[0] if logged else 0)
    tipped: set[str] = set()
    smallest: dict[str, int] = {}

    def saw(shard: str, seq: str | None, tip: bool) -> None:
        if tip:
            tipped.add(shard)
        if seq is not None:
            smallest[shard] = min(smallest.get(shard, int(seq)), int(seq))

    for batch in (b for b in logged if b >= first):
        for line in (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]:
            data = json.loads(line) if line.startswith("{") else None
            if not isinstance(data, dict) or "token" not in data:
                continue  # another source's offset (the two-source shape)
            for shards in SourceOffset.from_json(data).streams.values():
                for shard, state in shards.items():
                    saw(shard, state.position.seq, bool(state.tip_ms))
    for folder in sorted(meta.glob("*/batch-*")) if meta is not None else []:
        if int(folder.name.split("-")[1]) < first:
            continue
        for path in sorted(folder.glob("task-*.json")) + sorted(folder.glob("quiet-*.json")):
            try:
                streams = json.loads(path.read_text())["streams"]
            except (OSError, ValueError, KeyError):
                continue  # (being written)
            for shards in streams.values():
                for shard, entry in shards.items():
                    if isinstance(entry, list):  # a quiet note: [position, when]
                        saw(shard, entry[0].get("seq"), True)
                    elif entry.get("tip"):
                        saw(shard, entry["end"].get("seq"), True)
    return {shard: (str(smallest[shard]) if shard in smallest else None) for shard in tipped}


def ran_batches(out: Path) -> set[int]:
    """The batches whose rows reached the output."""
    return {int(p.name.split("=")[1]) for p in out.glob("batch=*") if any(p.glob("*.parquet"))}


def committed(checkpoint: Path) -> int:
    """How many batches the query has committed."""
    return len(_numbered(checkpoint / "commits"))


def task_records(meta: Path, batch: int) -> int:
    """How many tasks of `batch` have recorded their batch end (they read, and emit next)."""
    return sum(1 for _ in meta.glob(f"*/batch-{batch:012d}/task-*.json"))


def kill_in_window(
    process: subprocess.Popen, checkpoint: Path, meta: Path, window: str, timeout_s: float = 60
) -> str | None:
    """SIGKILL the driver (its whole session) once the query is in `window`, and say what was hit:
    "mid-batch" (a logged, uncommitted batch whose tasks have started recording their ends) or
    "before-tasks" (a logged, uncommitted batch none of whose tasks recorded yet). None when the window
    was not found in time or the driver ended first: nothing was killed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        batch = in_flight(checkpoint)
        if batch is not None:
            records = task_records(meta, batch)
            if (window == "mid-batch" and records > 0) or (window == "before-tasks" and records == 0):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
                return f"batch {batch} in flight, {records} task records written"
        time.sleep(0.01)
    return None


def config(endpoint: str, stream: str, tmp: Path, **extra) -> dict:
    cfg = {
        "options": {
            "streamName": stream,
            "region": "us-east-1",
            "endpointUrl": endpoint,
            "startingPosition": "TRIM_HORIZON",
            "metadataPath": str(tmp / "meta"),
            "maxRecordsPerBatch": "150",
        },
        "checkpoint": str(tmp / "cp"),
        "out": str(tmp / "out"),
    }
    cfg.update(extra)
    return cfg


def wait_while_running(condition, timeout_s: float, what: str, process: subprocess.Popen) -> None:
    """Wait until `condition()` holds, failing if the driver `process` ends first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the driver ended while waiting for {what} (exit {process.returncode})")
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
