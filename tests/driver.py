"""Running a streaming query in its own driver process (tests/integration/driver_app.py), so that
tests and the chaos suite can SIGKILL it, set its executors' environment, and read what it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

APP = Path(__file__).with_name("integration") / "driver_app.py"
ROOT = Path(__file__).resolve().parents[1]


def start_driver(cfg: dict, env: dict | None = None) -> subprocess.Popen:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT)
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
    """Rows of every batch in batch order, then in their order inside the batch."""
    rows = []
    folders = sorted(out.glob("batch=*"), key=lambda p: int(p.name.split("=")[1]))
    for folder in folders:
        table = pq.read_table(folder).sort_by("pos")
        rows.extend(table.to_pylist())
    return rows


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
