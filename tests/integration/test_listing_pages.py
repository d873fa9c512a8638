"""A stream with more shards than one ListShards page (kinesis-local pages at 100): the source's
discovery, a batch read, the sink's shard map (aggregate=true) and the CLI see every shard, those of
the second page too."""

from __future__ import annotations

import base64
import json

import pytest
from aws_kinesis_agg.deaggregator import iter_deaggregate_records
from typer.testing import CliRunner

from pyspark_kinesis.cli.app import app
from tests.helpers import client, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]
SHARDS = 150  # two pages
KPL_MAGIC = bytes([0xF3, 0x89, 0x9A, 0xC2])


def every_shard(kin, stream: str) -> list[dict]:
    """ListShards, every page, as the test's own oracle."""
    response = kin.list_shards(StreamName=stream)
    shards = list(response["Shards"])
    while response.get("NextToken"):
        response = kin.list_shards(NextToken=response["NextToken"])
        shards += response["Shards"]
    return shards


def test_every_shard_of_a_stream_listed_in_two_pages(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=SHARDS)
    shards = every_shard(kin, stream)
    first_page = kin.list_shards(StreamName=stream)
    assert len(shards) == SHARDS and first_page.get("NextToken"), (
        "the server gave one page: this shows nothing"
    )
    # One record into shards on both pages, placed by explicit hash key.
    chosen = [shards[i] for i in (0, 99, 100, 149)]
    expected = []
    for n, shard in enumerate(chosen):
        data = f"on-{shard['ShardId']}"
        kin.put_record(
            StreamName=stream,
            Data=data.encode(),
            PartitionKey=f"k{n}",
            ExplicitHashKey=shard["HashKeyRange"]["StartingHashKey"],
        )
        expected.append(data)
    options = {"startingPosition": "TRIM_HORIZON", "targetTasks": "4"}
    sink = Collector()
    df = reader(spark, kinesis_local.endpoint, stream, str(tmp_path / "m"), **options)
    run_available_now(spark, df, str(tmp_path / "c"), sink)
    assert sorted(bytes(r["data"]).decode() for r in sink.rows) == sorted(expected)
    batch = (
        spark.read.format("kinesis")
        .options(streamName=stream, region="us-east-1", endpointUrl=kinesis_local.endpoint)
        .load()
    )
    assert sorted(r["data"].decode() for r in batch.select("data").collect()) == sorted(expected)

    # The sink's shard map: rows for two shards of the second page are packed per shard (a map of the
    # first page alone would pack them together, and one aggregate would hold the other shard's rows).
    targets = [shards[120], shards[149]]
    rows = [
        (f"agg-{t['ShardId']}-{i}", f"p{i}", t["HashKeyRange"]["StartingHashKey"])
        for i in range(3)
        for t in targets
    ]
    (
        spark.createDataFrame(rows, "data string, partitionKey string, explicitHashKey string")
        .write.format("kinesis")
        .options(streamName=stream, region="us-east-1", endpointUrl=kinesis_local.endpoint, aggregate="true")
        .mode("append")
        .save()
    )
    for target in targets:
        iterator = kin.get_shard_iterator(
            StreamName=stream, ShardId=target["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )
        landed = kin.get_records(ShardIterator=iterator["ShardIterator"], Limit=1000)["Records"]
        users = []  # aggregates opened by aws-kinesis-agg (it hands payloads back in base64)
        for record in landed:
            if record["Data"].startswith(KPL_MAGIC):
                users += [
                    base64.b64decode(u["kinesis"]["data"]).decode()
                    for u in iter_deaggregate_records([record], data_format="Boto3")
                ]
            else:
                users.append(record["Data"].decode())
        mine = [d for d, _k, _h in rows if d.startswith(f"agg-{target['ShardId']}-")]
        assert sorted(u for u in users if u.startswith("agg-")) == sorted(mine), target["ShardId"]

    # The CLI.
    listed = CliRunner().invoke(
        app, ["shards", stream, "--endpoint-url", kinesis_local.endpoint, "--json"], env={"COLUMNS": "200"}
    )
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == SHARDS
