"""Every example under examples/ runs against the local Kinesis and a real SparkSession, and does what
its docstring says (the same `run` function the script calls, with arguments parsed by the script)."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from examples import backfill, dynamodb_table_copy, etl_to_parquet, kinesis_to_kinesis, several_streams

from tests.helpers import client, new_stream
from tests.integration.streaming_util import wait_for
from tests.integration.test_sink import read_back

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def orders(kinesis, stream: str, start: int, count: int) -> None:
    records = [
        {
            "Data": json.dumps({"order_id": f"o{n}", "customer": f"c{n % 5}", "amount": n + 0.5}).encode(),
            "PartitionKey": f"c{n % 5}",
        }
        for n in range(start, start + count)
    ]
    assert kinesis.put_records(StreamName=stream, Records=records)["FailedRecordCount"] == 0


def finish(query, timeout_s: float = 180) -> None:
    assert query.awaitTermination(timeout_s), "the example's query did not finish"
    assert query.exception() is None, query.exception()


def common(endpoint: str, tmp_path) -> list[str]:
    return [
        "--endpoint-url", endpoint,
        "--checkpoint", str(tmp_path / "chk"),
        "--metadata-path", str(tmp_path / "meta"),
    ]  # fmt: skip


def test_etl_to_parquet(spark, kinesis_local, tmp_path, capfd):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, 2)
    orders(kin, stream, 0, 120)
    argv = [
        "--stream",
        stream,
        "--output",
        str(tmp_path / "out"),
        "--available-now",
        *common(kinesis_local.endpoint, tmp_path),
    ]
    finish(etl_to_parquet.run(spark, etl_to_parquet.arguments(argv)))
    table = spark.read.parquet(str(tmp_path / "out"))
    assert table.count() == 120 and table.select("order_id").distinct().count() == 120
    assert {"order_id", "customer", "amount", "day", "shardId", "sequenceNumber"} <= set(table.columns)
    assert table.where("order_id = 'o7'").first()["amount"] == 7.5
    # A line per batch, as a user watching the example sees it (the listener runs after each batch).
    seen: list[str] = []

    def summarized() -> bool:
        seen.append(capfd.readouterr().out)
        return re.search(r"^batch \d+: [\d,]+ rows", "".join(seen), re.M) is not None

    wait_for(summarized, 30, "a batch summary")


def test_several_streams(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    first, second = new_stream(kin, 1), new_stream(kin, 2)
    orders(kin, first, 0, 30)
    orders(kin, second, 100, 50)
    argv = [
        "--stream", f"{first}@us-east-1", "--stream", second,
        "--output", str(tmp_path / "out"), "--available-now", *common(kinesis_local.endpoint, tmp_path),
    ]  # fmt: skip
    finish(several_streams.run(spark, several_streams.arguments(argv)))
    counts = {
        r["streamName"]: r["count"]
        for r in spark.read.parquet(str(tmp_path / "out")).groupBy("streamName").count().collect()
    }
    assert counts == {first: 30, second: 50}


def test_kinesis_to_kinesis(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    source, target = new_stream(kin, 2), new_stream(kin, 2)
    orders(kin, source, 0, 40)
    kin.put_records(StreamName=source, Records=[{"Data": b"not json", "PartitionKey": "x"}])
    argv = [
        "--source",
        source,
        "--target",
        target,
        "--available-now",
        *common(kinesis_local.endpoint, tmp_path),
    ]
    finish(kinesis_to_kinesis.run(spark, kinesis_to_kinesis.arguments(argv)))
    written = [json.loads(r["data"]) for r in read_back(kinesis_local.endpoint, target)]
    assert sorted(w["order_id"] for w in written) == sorted(f"o{n}" for n in range(40))  # the bad one dropped
    assert all(w["customer"].isupper() and "/" in w["source_seq"] for w in written)


def test_backfill_runs_again_and_continues(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, 2)
    orders(kin, stream, 0, 90)
    argv = [
        "--stream",
        stream,
        "--output",
        str(tmp_path / "out"),
        "--batch-records",
        "25",
        *common(kinesis_local.endpoint, tmp_path),
    ]
    first = backfill.run(spark, backfill.arguments(argv))
    finish(first)
    assert len(first.recentProgress) >= 4  # 90 records in batches of at most 25
    orders(kin, stream, 90, 30)
    finish(backfill.run(spark, backfill.arguments(argv)))
    data = [bytes(r["data"]) for r in spark.read.parquet(str(tmp_path / "out")).select("data").collect()]
    assert len(data) == 120 and len(set(data)) == 120


@pytest.mark.parametrize(
    "script", ["etl_to_parquet", "several_streams", "kinesis_to_kinesis", "backfill", "dynamodb_table_copy"]
)
def test_each_script_runs_on_its_own(script):
    """`python examples/<script>.py --help` works from a checkout (no Spark starts for it)."""
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / f"{script}.py"
    done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--endpoint-url" in done.stdout and "usage:" in done.stdout


def test_dynamodb_table_copy_is_the_tables_scan_after_changes_and_a_restart(spark, local_sts, tmp_path):
    """The copy the example keeps equals the table as a scan reads it, after inserts, updates and
    deletes in two runs of the query (numbers compared exactly: boto3's own deserializer on one side)."""
    from decimal import Decimal

    from boto3.dynamodb.types import TypeDeserializer

    from tests.integration.test_dynamodb_streams_api import dynamodb, table

    name = f"copy-{uuid.uuid4().hex[:8]}"
    table(local_sts.endpoint, name)
    db = dynamodb(local_sts.endpoint)

    def put(n: int, total: str) -> None:
        db.put_item(
            TableName=name, Item={"id": {"S": f"o-{n}"}, "total": {"N": total}, "tag": {"S": f"t{n}"}}
        )

    for n in range(6):
        put(n, f"{n}.5")
    put(2, "12345678901234567890.75")  # an update, past a double's digits
    db.delete_item(TableName=name, Key={"id": {"S": "o-3"}})
    output = str(tmp_path / "copy")
    argv = [
        "--table", name,
        "--output", output,
        "--available-now",
        *common(local_sts.endpoint, tmp_path),
    ]  # fmt: skip
    finish(dynamodb_table_copy.run(spark, dynamodb_table_copy.arguments(argv)))
    put(6, "6")
    put(0, "0.25")
    db.delete_item(TableName=name, Key={"id": {"S": "o-5"}})
    put(3, "3.125")  # deleted, then back
    finish(dynamodb_table_copy.run(spark, dynamodb_table_copy.arguments(argv)))

    copy = {
        json.loads(r["keys"])["id"]: json.loads(r["item"], parse_float=Decimal, parse_int=Decimal)
        for r in spark.read.parquet(output).collect()
    }
    plain = TypeDeserializer()
    scanned = {
        item["id"]["S"]: {k: plain.deserialize(v) for k, v in item.items()}
        for item in db.scan(TableName=name)["Items"]
    }
    assert copy == scanned
    assert sorted(copy) == ["o-0", "o-1", "o-2", "o-3", "o-4", "o-6"]
    assert copy["o-2"]["total"] == Decimal("12345678901234567890.75")
