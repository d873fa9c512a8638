"""The README's first command, `pyspark-kinesis demo`, run as a user runs it (its own process, its own
local Kinesis and Spark session): every order it puts arrives once in its Parquet output, over a stop
and a restart from the checkpoint. Nothing else runs the demo, and a change to it would otherwise
first fail on a newcomer's machine."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def test_the_demo_puts_orders_and_reads_each_once_across_a_restart(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pyspark_kinesis.cli", "demo", "--workdir", str(tmp_path), "--orders", "300"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "restarting the query from its checkpoint" in done.stdout
    assert "arrived 300 rows, 300 distinct orders, of 300 put" in done.stdout
    assert (tmp_path / "orders").is_dir() and (tmp_path / "checkpoint").is_dir()
