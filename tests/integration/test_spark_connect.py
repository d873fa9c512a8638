"""Through Spark Connect: pyspark's own Connect server on 127.0.0.1 (the package installed on the server
side), and a remote session that registers the format, reads a stream in batch and streaming mode and
writes with the sink. The server has a JVM data source named "kinesis" on its classpath, as a
Databricks Runtime has its own: the client's `register` gets "pyspark_kinesis", and everything runs
under that name (the name Spark registered by itself on the server, too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import pyspark_kinesis
from pyspark_kinesis.cli.local_kinesis import free_port
from tests.helpers import client, read_all
from tests.support.cluster import spark_home
from tests.support.jvm_kinesis import build_kinesis_named_jar, run_app, scenario

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


@pytest.fixture(scope="module")
def connect_server():
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="spark-connect-"))
    log = work / "server.log"
    jvm_kinesis = build_kinesis_named_jar(work)
    env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    command = [
        str(Path(spark_home()) / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--jars", jvm_kinesis,
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
    ]  # fmt: skip
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "Spark Connect server started" not in log.read_text(
            errors="replace"
        ):
            if process.poll() is not None:
                raise RuntimeError(
                    f"the Spark Connect server exited: {log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def test_batch_and_streaming_reads_and_a_sink_write_through_spark_connect(
    connect_server, kinesalite, tmp_path
):
    """The classic test's app (format_names_app.py) as a remote session: the same checks."""
    cfg, expected = scenario(kinesalite.endpoint, tmp_path, remote=connect_server)
    got = run_app(cfg)
    assert got["name"] == pyspark_kinesis.FALLBACK_FORMAT
    assert "Another data source is registered as 'kinesis'" in got["log"]
    assert got["explicit"].startswith("error: NameTakenError: The format name 'kinesis' is another")
    assert got["static"] == sorted(expected)
    assert got["batch"] == sorted(expected) and got["streamed"] == sorted(expected)
    assert sorted(d.decode() for d in read_all(client(kinesalite.endpoint), cfg["target"])) == sorted(
        expected
    )
