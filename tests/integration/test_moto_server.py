"""moto's Kinesis server, what many Python users test with: an implementation nobody here wrote, with
quirks of its own (sequence numbers 1, 2, ...; a split moves the parent's records into its children; a
merge copies both parents' records into the child; ListShards filters ignored). One quirk stopped
queries: moto never ends a closed shard (GetRecords keeps answering an empty page and a next
iterator), so an AvailableNow query read its closed parents batch after batch and never ended, their
children unread (issue #61 item 8). A closed shard's listed EndingSequenceNumber ends it now."""

from __future__ import annotations

import time

import boto3
import pytest
from botocore.config import Config

from tests.integration.streaming_util import Collector, reader, run_available_now
from tests.localsts import LocalSts

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


@pytest.fixture(scope="module")
def moto_kinesis():
    with LocalSts() as server:
        yield server


def client(endpoint: str):
    return boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(retries={"total_max_attempts": 2}, connect_timeout=2, read_timeout=10),
    )


def put(kinesis, stream: str, first: int, count: int) -> list[bytes]:
    payloads = [f"r{n}".encode() for n in range(first, first + count)]
    for payload in payloads:
        kinesis.put_record(StreamName=stream, Data=payload, PartitionKey=f"key-{payload.decode()}")
    return payloads


def open_shards(kinesis, stream: str) -> list[dict]:
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    return [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]


def test_an_available_now_query_after_a_split_and_a_merge_ends_with_every_record_once(
    spark, moto_kinesis, tmp_path
):
    kinesis = client(moto_kinesis.endpoint)
    stream = "moto-reshard"
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    put_all = put(kinesis, stream, 0, 20)
    first = open_shards(kinesis, stream)[0]
    low, high = int(first["HashKeyRange"]["StartingHashKey"]), int(first["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=first["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    put_all += put(kinesis, stream, 20, 20)
    shards = sorted(open_shards(kinesis, stream), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    left, right = shards[0], shards[1]  # adjacent: the split's two children
    merged_parents = {left["ShardId"], right["ShardId"]}
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge=left["ShardId"], AdjacentShardToMerge=right["ShardId"]
    )
    put_all += put(kinesis, stream, 40, 20)
    # What moto copied into the merged child: the parents' records, found there again (not the query's doing).
    copied = [
        r["Data"]
        for sid in merged_parents
        for r in kinesis.get_records(
            ShardIterator=kinesis.get_shard_iterator(
                StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )["Records"]
    ]

    df = reader(spark, moto_kinesis.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON")
    collector = Collector()
    started = time.monotonic()
    run_available_now(spark, df, str(tmp_path / "chk"), collector, timeout_s=240)
    assert time.monotonic() - started < 240  # (it ends: before, it never did)
    got = [bytes(row.data) for row in collector.rows]
    assert sorted(set(got)) == sorted(put_all)
    expected_twice = sorted(copied)
    twice = sorted(p for p in set(got) for _n in range(got.count(p) - 1))
    assert twice == expected_twice
