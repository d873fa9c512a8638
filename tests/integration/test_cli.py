"""Every `pyspark-kinesis` stream and checkpoint command against the local Kinesis, output checked; and
the lag that the CLI, Spark's progress and the lag listener (CloudWatch on moto) report for a stream
with a known backlog."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from typer.testing import CliRunner

from pyspark_kinesis import metrics, spark_features
from pyspark_kinesis.cli.app import app
from tests.helpers import client, new_stream, read_all
from tests.integration.streaming_util import Collector, reader, wait_for

pytestmark = pytest.mark.kinesis
HALF = 2**127
ENV = {"COLUMNS": "200"}


def cli(*args: str, ok: bool = True):
    result = CliRunner().invoke(app, list(args), env=ENV)
    if ok:
        assert result.exit_code == 0, f"{args}: exit {result.exit_code}\n{result.output}"
    return result


def as_json(*args: str):
    return json.loads(cli(*args, "--json").stdout)


def test_create_produce_reshard_and_shards(kinesis_local):
    endpoint = ("--endpoint-url", kinesis_local.endpoint)
    name = f"cli-{uuid.uuid4().hex[:10]}"
    created = as_json("create", name, "--shards", "2", *endpoint)
    assert created["stream"] == name and created["arn"].endswith(f"stream/{name}")

    rows = as_json("shards", name, *endpoint)
    assert [r["open"] for r in rows] == [True, True]
    assert rows[0]["StartingHashKey"] == "0" and int(rows[1]["EndingHashKey"]) == 2**128 - 1

    produced = as_json("produce", name, "--count", "1234", "--size", "64", *endpoint)
    assert produced["put"] == 1234
    kinesis = client(kinesis_local.endpoint)
    assert len(read_all(kinesis, name)) == 1234

    first = rows[0]["ShardId"]
    split = as_json("reshard", "split", name, first, *endpoint)
    children = [r for r in split["shards"] if r["ParentShardId"] == first]
    assert len(children) == 2 and all(c["open"] for c in children)
    assert not next(r for r in split["shards"] if r["ShardId"] == first)["open"]

    low, high = sorted(children, key=lambda r: int(r["StartingHashKey"]))
    merged = as_json("reshard", "merge", name, low["ShardId"], high["ShardId"], *endpoint)
    child = [r for r in merged["shards"] if r["ParentShardId"] == low["ShardId"]]
    assert len(child) == 1 and child[0]["AdjacentParentShardId"] == high["ShardId"]

    scaled = as_json("reshard", "scale", name, "4", *endpoint)
    assert sum(r["open"] for r in scaled["shards"]) == 4

    tree = cli("shards", name, *endpoint).stdout
    assert f"{name} (4 open, " in tree
    assert first in tree and "closed" in tree and f"merged with {high['ShardId']}" in tree
    assert f"hash keys 0..{int(rows[0]['EndingHashKey'])} (50.0%)" in tree
    # The merged shard appears under its parent, inside the split shard's subtree: deeper than `first`.
    lines = tree.splitlines()
    depth = {
        sid: next(line.index(sid) for line in lines if sid in line) for sid in (first, child[0]["ShardId"])
    }
    assert depth[child[0]["ShardId"]] > depth[first]


def test_produce_paces_by_rate_and_puts_a_files_lines(kinesis_local, tmp_path):
    kinesis = client(kinesis_local.endpoint)
    name = new_stream(kinesis, 1)
    paced = as_json(
        "produce", name, "--count", "30", "--rate", "20", "--endpoint-url", kinesis_local.endpoint
    )
    assert paced["put"] == 30 and paced["seconds"] >= 1.4  # 30 records at 20/s cannot take under ~1.5 s
    lines = tmp_path / "lines.txt"
    lines.write_text("alpha\nbeta\n\ngamma\n")
    assert (
        as_json("produce", name, "--file", str(lines), "--endpoint-url", kinesis_local.endpoint)["put"] == 3
    )
    data = read_all(kinesis, name)
    assert data[-3:] == [b"alpha", b"beta", b"gamma"]


def test_errors_are_one_clear_line(kinesis_local):
    missing = cli("shards", "no-such-stream", "--endpoint-url", kinesis_local.endpoint, ok=False)
    assert missing.exit_code == 1
    assert "error:" in missing.output and "no-such-stream" in missing.output
    assert "Traceback" not in missing.output
    bad = cli(
        "reshard",
        "split",
        "s",
        "shardId-0",
        "--at",
        "12ab",
        "--endpoint-url",
        kinesis_local.endpoint,
        ok=False,
    )
    assert bad.exit_code == 1 and "--at must be a decimal hash key" in bad.output
    no_file = cli(
        "produce", "s", "--file", "/nonexistent/lines.txt", "--endpoint-url", kinesis_local.endpoint, ok=False
    )
    assert no_file.exit_code == 1 and "no such file" in no_file.output
    nothing = cli("lag", "--checkpoint", "/nonexistent/chk", "--metadata-path", "/nonexistent/meta", ok=False)
    assert nothing.exit_code == 1 and "does not exist" in nothing.output


@pytest.mark.spark
def test_lag_and_progress_report_a_known_backlog(spark, kinesis_local, local_s3, tmp_path):
    """100 records per shard, then two one-batch runs of 30 per shard: 40 per shard are left. The
    progress of the second run reports batch 0's lag, and `lag` counts the 80 left, shard by shard."""
    kinesis = client(kinesis_local.endpoint)
    name = new_stream(kinesis, 2)
    for half in range(2):  # two puts 1.5 s apart: what was read first is that far behind the tip
        if half:
            time.sleep(1.5)
        for low in (0, HALF):
            entries = [
                {"Data": f"{low}-{half}-{n}".encode(), "PartitionKey": "k", "ExplicitHashKey": str(low + 1)}
                for n in range(50)
            ]
            assert kinesis.put_records(StreamName=name, Records=entries)["FailedRecordCount"] == 0
    chk, meta = str(tmp_path / "chk"), str(tmp_path / "meta")
    collected = Collector()
    queries = []
    listener = metrics.LagListener(cloudwatch_namespace=f"lag-{name}", endpoint_url=local_s3.endpoint)
    spark.streams.addListener(listener)
    for _run in range(2):
        df = reader(
            spark, kinesis_local.endpoint, name, meta, startingPosition="TRIM_HORIZON", maxRecordsPerShard=30
        )
        query = (
            df.writeStream.foreachBatch(collected)
            .option("checkpointLocation", chk)
            .trigger(once=True)
            .start()
        )
        assert query.awaitTermination(180) and query.exception() is None
        queries.append(query)
    assert len(collected.rows) == 120

    if (
        not spark_features.ADMISSION_CONTROL
    ):  # PySpark 4.0/4.1 put no lag in the progress (`lag` below counts)
        spark.streams.removeListener(listener)
    else:
        report = metrics.lag(queries[1])
        assert len(report) == 1
        (figures,) = report.values()
        assert figures["batch"] == 0 and figures["recordsRead"] == 60
        assert (
            figures["shards"] == 2 and figures["shardsBehind"] == 2 and figures["maxMsBehindLatest"] >= 1000
        )
        assert metrics.lag_rows(queries[1])[0]["streamName"] == name

        # The listener published both runs' progress to CloudWatch: the second run's figures are batch 0's.
        wait_for(lambda: listener.published >= 2, 30, "the listener's progress events")
        spark.streams.removeListener(listener)
        cloudwatch = boto3.client("cloudwatch", endpoint_url=local_s3.endpoint, region_name="us-east-1")
        listed = cloudwatch.list_metrics(Namespace=f"lag-{name}")["Metrics"]
        assert {m["MetricName"] for m in listed} >= {"MaxMillisBehindLatest", "ShardsBehind", "RecordsRead"}
        assert {d["Value"] for m in listed for d in m["Dimensions"] if d["Name"] == "StreamName"} == {name}
        stats = cloudwatch.get_metric_statistics(
            Namespace=f"lag-{name}",
            MetricName="RecordsRead",
            Dimensions=next(m["Dimensions"] for m in listed if m["MetricName"] == "RecordsRead"),
            StartTime=datetime.now(UTC) - timedelta(hours=1),
            EndTime=datetime.now(UTC) + timedelta(hours=1),
            Period=3600,
            Statistics=["Maximum"],
        )
        assert [p["Maximum"] for p in stats["Datapoints"]] == [60.0]

    endpoint = ("--endpoint-url", kinesis_local.endpoint)
    lag = as_json("lag", "--checkpoint", chk, "--metadata-path", meta, *endpoint)
    assert lag["batch"] == 1
    assert sorted(s["records"] for s in lag["shards"]) == [40, 40] and all(
        s["complete"] for s in lag["shards"]
    )
    # Without --endpoint-url: the endpoint the query recorded under metadataPath (any other endpoint is
    # the loopback's dead port here, so a lag that did not learn it fails instead of reaching AWS).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        text = cli("lag", "--checkpoint", chk, "--metadata-path", meta).stdout
    assert "total records behind: 80" in text
    assert f"endpoint {kinesis_local.endpoint} (as the query recorded under metadataPath)" in text
    for line in text.splitlines():  # (never "0 ms behind" beside records behind)
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 5 and cells[4].replace(",", "").isdigit() and int(cells[4].replace(",", "")):
            assert cells[5] != "0", line

    inspected = as_json("inspect", "--checkpoint", chk, "--metadata-path", meta)
    assert inspected["batch"] == 1 and inspected["committed"] is True
    records = [r for r in inspected["records"].values() if r]
    assert sum(end["n"] for r in records for shards in r["streams"].values() for end in shards.values()) == 60
    table = cli("inspect", "--checkpoint", chk, "--metadata-path", meta, "--batch", "0").stdout
    assert "Spark batch 0, committed" in table and table.count("TRIM_HORIZON") == 2
    assert "no record yet" not in table, table
    # A committed batch whose task records were collected (what later commits do to older batches):
    # said so, not "no record yet" (which is a running or failed task's).
    import shutil
    from pathlib import Path

    from pyspark_kinesis.source.state.layout import batch_folder

    shutil.rmtree(Path(meta) / batch_folder(inspected["offset"]["token"], 0))
    table = cli("inspect", "--checkpoint", chk, "--metadata-path", meta, "--batch", "0").stdout
    assert "no record yet" not in table and table.count("record removed *") == 2, table


def test_local_start_prints_what_a_first_run_needs_and_serves_until_stopped(tmp_path):
    """A pip user's first minutes: `local start` prints its endpoint and the credentials to set, and
    with exactly those (no AWS configuration at all) the stream commands work against it; it serves
    until stopped."""
    import os
    import re
    import signal
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        COLUMNS="200",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    command = [
        sys.executable,
        "-m",
        "pyspark_kinesis.cli",
        "local",
        "start",
        "--kind",
        "kinesalite",
        "--seconds",
        "120",
    ]
    from pyspark_kinesis.cli.app import LOCAL_PORT
    from pyspark_kinesis.cli.local_kinesis import port_free

    default_free = port_free(LOCAL_PORT)  # (the README's snippets name it: taken, a free one is said)
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines: list[str] = []
        assert server.stdout is not None
        for _ in range(50):  # bounded: the endpoint, then what to set, then the query's options
            lines.append(server.stdout.readline())
            if "endpointUrl" in lines[-1]:
                break
        printed = "".join(lines)
        endpoint = re.search(r"listening on (http://127\.0\.0\.1:\d+)", printed)
        exports = re.search(
            r"export (AWS_ACCESS_KEY_ID=\S+) (AWS_SECRET_ACCESS_KEY=\S+) (AWS_DEFAULT_REGION=\S+)", printed
        )
        assert endpoint and exports, printed
        if default_free:
            assert endpoint.group(1) == f"http://127.0.0.1:{LOCAL_PORT}", printed
        else:
            assert f"port {LOCAL_PORT} is taken: using" in printed, printed
        assert f'.option("endpointUrl", "{endpoint.group(1)}")' in printed
        told = dict(kv.split("=", 1) for kv in exports.groups())
        made = subprocess.run(
            [
                sys.executable,
                "-m",
                "pyspark_kinesis.cli",
                "create",
                "first",
                "--endpoint-url",
                endpoint.group(1),
            ],
            capture_output=True,
            text=True,
            env={**env, **told},
            timeout=60,
        )
        assert made.returncode == 0, made.stdout + made.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    listed = cli("options").stdout
    assert "metadataPath" in listed and "maxRecordsPerShard" in listed


def test_the_rough_edges_a_new_user_meets(kinesis_local, tmp_path, monkeypatch):
    """A dead port fails in seconds; `produce --file` counts the file's lines, not the default count;
    `options` lists the sink's options too; printed to a pipe, tables are not cut at 80 columns."""
    import time as clock

    from pyspark_kinesis.cli.local_kinesis import free_port

    started = clock.monotonic()
    dead = cli("create", "x", "--endpoint-url", f"http://127.0.0.1:{free_port()}", ok=False)
    assert dead.exit_code == 1 and clock.monotonic() - started < 8, (clock.monotonic() - started, dead.output)
    stream = new_stream(client(kinesis_local.endpoint), shards=1)
    lines = tmp_path / "three.txt"
    lines.write_text("a\nb\nc\n")
    produced = cli("produce", stream, "--file", str(lines), "--endpoint-url", kinesis_local.endpoint)
    assert "put 3 records" in produced.stdout and "/1000" not in produced.output
    listed = CliRunner().invoke(app, ["options"], env={"COLUMNS": ""})
    assert listed.exit_code == 0 and "sink options" in listed.stdout and "preserveOrder" in listed.stdout
    shards = CliRunner().invoke(
        app, ["shards", stream, "--endpoint-url", kinesis_local.endpoint], env={"COLUMNS": ""}
    )
    assert "shardId-000000000000" in shards.stdout, shards.stdout


def test_local_start_dynamodb_serves_a_table_stream_and_its_printed_commands_work(tmp_path):
    """`local start --kind dynamodb` (moto's server) prints its endpoint, the credentials and a command
    that creates a table with a stream; that command works as printed, and the table's stream is there."""
    import os
    import re
    import shlex
    import signal
    import subprocess
    import sys

    import boto3

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        COLUMNS="400",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    command = [
        sys.executable,
        "-m",
        "pyspark_kinesis.cli",
        "local",
        "start",
        "--kind",
        "dynamodb",
        "--port",
        "0",
    ]
    server = subprocess.Popen(
        [*command, "--seconds", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        lines: list[str] = []
        assert server.stdout is not None
        for _ in range(50):  # bounded: the endpoint, what to set, the table, the query's options
            lines.append(server.stdout.readline())
            if "endpointUrl" in lines[-1]:
                break
        printed = "".join(lines)
        endpoint = re.search(r"listening on (http://127\.0\.0\.1:\d+)", printed)
        exports = re.search(
            r"export (AWS_ACCESS_KEY_ID=\S+) (AWS_SECRET_ACCESS_KEY=\S+) (AWS_DEFAULT_REGION=\S+)", printed
        )
        create = next((line.strip() for line in lines if line.strip().startswith("python -c")), None)
        assert endpoint and exports and create, printed
        told = dict(kv.split("=", 1) for kv in exports.groups())
        argv = shlex.split(create)
        made = subprocess.run(
            [sys.executable, *argv[1:]], capture_output=True, text=True, env={**env, **told}, timeout=60
        )
        assert made.returncode == 0, made.stdout + made.stderr
        streams = boto3.client(
            "dynamodbstreams",
            endpoint_url=endpoint.group(1),
            region_name="us-east-1",
            aws_access_key_id=told["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=told["AWS_SECRET_ACCESS_KEY"],
        ).list_streams(TableName="orders")["Streams"]
        assert len(streams) == 1
        assert 'option("service", "dynamodb")' in printed and endpoint.group(1) in printed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
