"""A DynamoDB table's stream read by the source (`service=dynamodb`) against moto's DynamoDB Streams and a
real SparkSession: a table's changes come out once each, in order, as change columns, across a
restart. moto has one shard per table that never closes and never ends an iterator: the reads must
end at its tip all the same (three empty pages in a row, see aws/dynamodb_streams.py)."""

from __future__ import annotations

import json
import uuid

import pytest

from pyspark_kinesis import metrics, spark_features
from tests.integration.streaming_util import Collector, run_available_now
from tests.integration.test_dynamodb_streams_api import dynamodb, table

pytestmark = [pytest.mark.spark]


def read_table(spark, endpoint: str, name: str, meta: str, **options):
    r = (
        spark.readStream.format("kinesis")
        .option("service", "dynamodb")
        .option("streamName", name)
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .option("metadataPath", meta)
        .option("startingPosition", "TRIM_HORIZON")
    )
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def test_a_tables_changes_are_read_once_each_in_order_across_a_restart(spark, local_sts, tmp_path):
    endpoint, name = local_sts.endpoint, f"orders-{uuid.uuid4().hex[:8]}"
    table(endpoint, name)
    client = dynamodb(endpoint)
    for n in range(4):
        client.put_item(TableName=name, Item={"id": {"S": f"o-{n}"}, "total": {"N": f"{n}.50"}})
    df = read_table(spark, endpoint, name, str(tmp_path / "meta"))
    assert df.columns == [
        "shardId",
        "sequenceNumber",
        "approximateArrivalTimestamp",
        "streamArn",
        "tableName",
        "eventName",
        "keys",
        "newImage",
        "oldImage",
        "timeToLive",
        "sizeBytes",
        "eventId",
        "valueError",
    ]
    sink = Collector()
    run_available_now(spark, df, str(tmp_path / "cp"), sink, timeout_s=120)
    assert [(r.eventName, r.keys) for r in sink.rows] == [("INSERT", f'{{"id":"o-{n}"}}') for n in range(4)]

    client.update_item(
        TableName=name,
        Key={"id": {"S": "o-1"}},
        UpdateExpression="SET #t = :t",
        ExpressionAttributeNames={"#t": "total"},
        ExpressionAttributeValues={":t": {"N": "12345678901234567890.25"}},
    )
    client.delete_item(TableName=name, Key={"id": {"S": "o-2"}})
    queries = run_available_now(spark, df, str(tmp_path / "cp"), sink, timeout_s=120)
    if spark_features.ADMISSION_CONTROL:  # (PySpark 4.0/4.1 put no lag in the progress)
        # Lag as for a Kinesis stream (a run reports the last batch before it: the first run's), known
        # from the changes' creation times and the empty pages at the tip.
        (figures,) = metrics.lag(queries[-1]).values()
        assert figures["shards"] == 1 and figures["shardsLagUnknown"] == 0 and figures["recordsRead"] == 4, (
            figures
        )
    rows = sink.rows
    assert [(r.eventName, r.keys) for r in rows] == [
        *[("INSERT", f'{{"id":"o-{n}"}}') for n in range(4)],
        ("MODIFY", '{"id":"o-1"}'),
        ("REMOVE", '{"id":"o-2"}'),
    ]
    assert len({r.sequenceNumber for r in rows}) == 6  # each change once
    modify, remove = rows[4], rows[5]
    assert json.loads(modify.oldImage) == {"id": "o-1", "total": 1.5}
    assert modify.newImage == '{"id":"o-1","total":12345678901234567890.25}'  # every digit
    assert remove.newImage is None and remove.oldImage == '{"id":"o-2","total":2.50}'
    assert {r.tableName for r in rows} == {name} and {r.valueError for r in rows} == {None}


def test_a_table_option_that_cannot_apply_is_named_at_load(spark, local_sts, tmp_path):
    endpoint, name = local_sts.endpoint, f"orders-{uuid.uuid4().hex[:8]}"
    table(endpoint, name)
    with pytest.raises(Exception, match="DynamoDB Streams has no enhanced fan-out"):
        read_table(spark, endpoint, name, str(tmp_path / "meta"), consumerType="efo")
    with pytest.raises(Exception, match="neither a DynamoDB table name"):
        read_table(spark, endpoint, "arn:aws:kinesis:us-east-1:123456789012:stream/x", str(tmp_path / "m2"))


def test_a_batch_read_of_a_tables_stream_returns_its_changes_once(spark, local_sts, tmp_path):
    endpoint, name = local_sts.endpoint, f"orders-{uuid.uuid4().hex[:8]}"
    table(endpoint, name)
    client = dynamodb(endpoint)
    for n in range(3):
        client.put_item(TableName=name, Item={"id": {"S": f"o-{n}"}})
    rows = (
        spark.read.format("kinesis")
        .option("service", "dynamodb")
        .option("streamName", name)
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .load()
        .collect()
    )
    assert sorted(r.keys for r in rows) == [f'{{"id":"o-{n}"}}' for n in range(3)]
    assert {r.eventName for r in rows} == {"INSERT"}


def test_an_image_schema_makes_the_images_typed_structs_with_exact_decimals(spark, local_sts, tmp_path):
    from decimal import Decimal

    from pyspark.sql.types import DecimalType, StringType, StructField, StructType

    endpoint, name = local_sts.endpoint, f"orders-{uuid.uuid4().hex[:8]}"
    table(endpoint, name)
    client = dynamodb(endpoint)
    client.put_item(TableName=name, Item={"id": {"S": "o-1"}, "total": {"N": "12345678901234567890.25"}})
    client.put_item(TableName=name, Item={"id": {"S": "o-2"}, "total": {"N": "0.125"}})  # 3 decimals: no fit
    image = StructType([StructField("id", StringType()), StructField("total", DecimalType(38, 2))])
    df = read_table(spark, endpoint, name, str(tmp_path / "meta"), imageSchema=image.json())
    assert df.schema["newImage"].dataType == image and df.schema["oldImage"].dataType == image
    sink = Collector()
    run_available_now(spark, df, str(tmp_path / "cp"), sink, timeout_s=120)
    fits, misfit = sink.rows
    assert fits.newImage.asDict() == {"id": "o-1", "total": Decimal("12345678901234567890.25")}
    assert fits.valueError is None and fits.oldImage is None
    assert misfit.newImage is None and "total = 0.125 does not fit decimal(38,2) exactly" in misfit.valueError


def test_the_lag_command_counts_a_tables_changes_behind_the_committed_batch(spark, local_sts, tmp_path):
    from tests.integration.test_cli import as_json

    endpoint, name = local_sts.endpoint, f"orders-{uuid.uuid4().hex[:8]}"
    table(endpoint, name)
    client = dynamodb(endpoint)
    for n in range(3):
        client.put_item(TableName=name, Item={"id": {"S": f"o-{n}"}})
    meta, chk = str(tmp_path / "meta"), str(tmp_path / "cp")
    run_available_now(spark, read_table(spark, endpoint, name, meta), chk, Collector(), timeout_s=120)
    for n in range(3, 8):  # five changes the query has not read
        client.put_item(TableName=name, Item={"id": {"S": f"o-{n}"}})
    report = as_json("lag", "--checkpoint", chk, "--metadata-path", meta, "--endpoint-url", endpoint)
    (shard,) = report["shards"]
    assert shard["stream"].startswith("arn:aws:dynamodb:") and shard["records"] == 5 and shard["complete"]


def test_a_table_deleted_while_the_query_runs_ends_it_with_one_clear_error(spark, local_sts, tmp_path):
    """moto's DynamoDB Streams answers ResourceNotFoundException for a deleted table's stream, and
    ListStreams no newer stream for it: not a stream disabled and enabled again, the table is gone."""
    from tests.integration.streaming_util import start_running, wait_for

    endpoint, name = local_sts.endpoint, f"gone-{uuid.uuid4().hex[:8]}"
    table(endpoint, name)
    client = dynamodb(endpoint)
    for n in range(3):
        client.put_item(TableName=name, Item={"id": {"S": f"o-{n}"}})
    df = read_table(spark, endpoint, name, str(tmp_path / "meta"), shardDiscoveryIntervalMs=500)
    sink = Collector()
    query = start_running(df, str(tmp_path / "cp"), sink)
    try:
        wait_for(lambda: len(sink.rows) >= 3, 90, "the changes made before the start", query)
        client.delete_table(TableName=name)
        with pytest.raises(Exception, match="was deleted") as failure:
            query.awaitTermination(90)
    finally:
        query.stop()
    message = str(failure.value)
    assert f"of DynamoDB table '{name}' was deleted (with its table) while the query read it" in message, (
        message[-2000:]
    )
