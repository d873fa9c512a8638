"""The aggregated sink's repair of a stale shard map, against kinesis-local (issue #61 items 4 and 5): a
task lists the stream, the stream is split before its first put, and every aggregate it then packs for
the parent lands in a child. Read back shard by shard as the KCL reads (aws-kinesis-agg de-aggregates,
user records outside the shard's range dropped), every row arrives exactly once and each key's rows in
the order they were written; and what is put again is bounded by one buffer, not the whole task.

The task runs the sink's own partition writer (the code a Spark task runs) in this process, so the
split can come between its listing and its first put."""

from __future__ import annotations

import base64
import functools
import time

import pyarrow as pa
import pytest
from aws_kinesis_agg.deaggregator import iter_deaggregate_records

from pyspark_kinesis.kpl import MAGIC
from pyspark_kinesis.sink import producing, writers
from pyspark_kinesis.sink.options import parse_sink_options
from tests.helpers import client, kcl_hash, new_stream

pytestmark = pytest.mark.kinesis
BUFFER = 10  # entries (aggregates) the producer buffers before it writes them
AGGREGATE_BYTES = 4096  # (about 20 of these rows an aggregate)


def read_as_the_kcl(kinesis, stream: str) -> tuple[list[tuple[str, bytes]], int]:
    """Every shard in order: (key, payload) of the user records a KCL reader keeps, and how many user
    records were put in all (kept or dropped)."""
    kept, put = [], 0
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _call in range(200):
            response = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for record in response["Records"]:
                if not record["Data"].startswith(MAGIC):  # (a lone row goes as a plain record)
                    users = [(record["PartitionKey"], record.get("ExplicitHashKey"), record["Data"])]
                else:
                    users = [
                        (
                            u["kinesis"]["partitionKey"],
                            u["kinesis"].get("explicitHashKey"),
                            base64.b64decode(u["kinesis"]["data"]),
                        )
                        for u in iter_deaggregate_records([record], data_format="Boto3")
                    ]
                for key, explicit, data in users:
                    put += 1
                    where = int(explicit) if explicit else kcl_hash(key)
                    if low <= where <= high:
                        kept.append((key, data))
            iterator = response.get("NextShardIterator")
            if iterator is None or (not response["Records"] and response.get("MillisBehindLatest", 0) == 0):
                break
    return kept, put


def test_a_split_between_a_tasks_listing_and_its_puts_keeps_every_row_once_in_key_order(
    kinesis_local, monkeypatch
):
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, shards=1)
    listings: list[bool] = []
    real_router = writers._router

    def stale_then_fresh(config, name, every=False):
        listings.append(every)
        router = real_router(config, name, every)
        if len(listings) == 1:  # the task's listing: then the stream splits before its first put
            (shard,) = kinesis.list_shards(StreamName=stream)["Shards"]
            kinesis.split_shard(
                StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str(2**127)
            )
            for _ in range(100):
                summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
                if summary["StreamStatus"] == "ACTIVE":
                    break
                time.sleep(0.1)
        return router

    monkeypatch.setattr(writers, "_router", stale_then_fresh)
    monkeypatch.setattr(writers, "Producer", functools.partial(producing.Producer, buffer_records=BUFFER))
    monkeypatch.setattr(writers, "MAX_RECORD_BYTES", AGGREGATE_BYTES)
    config = parse_sink_options(
        {
            "streamName": stream,
            "region": "us-east-1",
            "endpointUrl": kinesis_local.endpoint,
            "aggregate": "true",
            "preserveOrder": "true",
        }
    )
    keys = [f"key-{n}" for n in range(30)]
    rows = [(keys[n * 7 % 30], f"row-{n:05d}-".encode() + bytes(150)) for n in range(3000)]
    batch = pa.RecordBatch.from_pydict(
        {"data": [data for _k, data in rows], "partitionKey": [key for key, _d in rows]}
    )
    message = writers.write_partition(config, iter([batch]))
    assert message.records > 0 and listings == [False, True]  # listed anew once, at the first repair

    kept, put = read_as_the_kcl(kinesis, stream)
    assert sorted(kept) == sorted(rows)  # every row once for a KCL reader
    for key in keys:
        assert [data for k, data in kept if k == key] == [data for k, data in rows if k == key], key
    # What was put beyond the rows: at most what one buffer of stale aggregates held (about 20 rows each).
    assert put - len(rows) <= BUFFER * (AGGREGATE_BYTES // 150)
