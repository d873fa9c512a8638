"""Through Spark Connect: pyspark's own Connect server on 127.0.0.1 (the package installed on the server
side), and a remote session that registers the format, reads a stream in batch and streaming mode and
writes with the sink. The server has a JVM data source named "kinesis" on its classpath, as a
Databricks Runtime has its own: the client's `register` gets "pyspark_kinesis", and everything runs
under that name (the name Spark registered by itself on the server, too)."""

from __future__ import annotations

import json
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
from tests.helpers import client, new_stream, put
from tests.support.cluster import spark_home
from tests.support.jvm_kinesis import build_kinesis_named_jar

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
    kin = client(kinesalite.endpoint)
    stream, target = new_stream(kin, shards=2), new_stream(kin, shards=1)
    expected = put(kin, stream, 0, 80)
    cfg = {
        "remote": connect_server,
        "endpoint": kinesalite.endpoint,
        "stream": stream,
        "target": target,
        "meta": str(tmp_path / "meta"),
        "out": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "cp"),
    }
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("connect_client.py")), json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["name"] == pyspark_kinesis.FALLBACK_FORMAT
    assert "Another data source is registered as 'kinesis'" in done.stderr
    assert sorted(got["static"]) == sorted(expected)
    assert sorted(got["batch"]) == sorted(expected)
    assert sorted(got["streamed"]) == sorted(expected)
    shard = kin.list_shards(StreamName=target)["Shards"][0]["ShardId"]
    iterator = kin.get_shard_iterator(StreamName=target, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    written = kin.get_records(ShardIterator=iterator["ShardIterator"], Limit=10_000)["Records"]
    assert sorted(r["Data"].decode() for r in written) == sorted(expected)
