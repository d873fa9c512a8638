"""Spark's asynchronous progress tracking: offsets and commits become durable only every interval, so
after a crash Spark plans again from an older durable batch, and batches that ran already run again
(at-least-once, by Spark's contract). The query must go on and lose nothing; here, with a sink that
writes each batch's rows to files named after the batch, every batch planned again must read what it
read the first time, so the output holds every record exactly once. Driver in its own process
(tests/integration/driver_app.py), killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.driver import config, durable_offsets, output_rows, ran_batches, start_driver, wait_while_running
from tests.helpers import client, new_stream, put

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.slow]


def test_a_query_with_async_progress_tracking_survives_a_crash_and_loses_nothing(kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 400)
    cfg = config(
        kinesis_local.endpoint, stream, tmp_path, sink="foreach", async_ms=3000, interval="100 milliseconds"
    )
    cfg["options"]["maxRecordsPerBatch"] = "40"
    out, cp = tmp_path / "out", tmp_path / "cp"
    log = Path(cfg["checkpoint"] + ".log")

    driver = start_driver(cfg)
    try:
        # Several batches run past the last durable offset before the crash.
        wait_while_running(
            lambda: (
                len(ran_batches(out)) >= 4
                and max(ran_batches(out)) > max(durable_offsets(cp), default=-1) + 1
            ),
            180,
            "batches beyond the durable offset log",
            driver,
        )
        ran, durable = max(ran_batches(out)), max(durable_offsets(cp), default=-1)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        assert ran > durable + 1, (ran, durable)

        driver = start_driver(cfg)  # Spark plans again from batch `durable`
        wait_while_running(
            lambda: sum(1 for _ in output_rows(out)) >= len(expected), 180, "every record", driver
        )
        time.sleep(2)  # a batch planned again and still running would show up as a duplicate or a gap
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert "is missing under metadataPath" not in text, text[-3000:]
    seen = Counter(bytes(r["data"]).decode() for r in output_rows(out))
    assert set(seen) == set(expected), f"{len(set(expected) - set(seen))} lost"
    assert max(seen.values()) == 1, f"duplicated: {[k for k, v in seen.items() if v > 1][:5]}"
