"""Exact starting positions against a real local Kinesis and a real SparkSession: a query restored from
another system's per-shard checkpoint reads exactly the records after it, including those of shards
split since (the lineage rule), and a shard the stream does not have is a clear error at query start."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import (
    assert_exactly_once,
    assert_key_order,
    client,
    new_stream,
    open_shards,
    put,
    shard_sequences,
    split,
)
from tests.integration.streaming_util import Collector, reader, run_available_now, run_available_now_failure

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def _restored_checkpoint(kin, stream: str) -> tuple[dict[str, str], list[str]]:
    """A stream of two shards, records in both, a per-shard checkpoint partway through each (shard 0:
    after its 10th record, shard 1: at its 20th), then shard 0 split and more records put. Returns the
    startingPosition map and every record a query starting there must read."""
    put(kin, stream, 0, 120)
    before = shard_sequences(kin, stream)
    first, second = sorted(before)
    positions = {
        first: f"AFTER_SEQUENCE_NUMBER:{before[first][9][0]}",
        second: f"AT_SEQUENCE_NUMBER:{before[second][19][0]}",
    }
    expected = [data for _seq, data in before[first][10:]] + [data for _seq, data in before[second][19:]]
    split(kin, stream, next(s for s in open_shards(kin, stream) if s["ShardId"] == first))
    expected += put(kin, stream, 120, 80)
    return {"default": "LATEST", stream: positions}, expected


def test_a_query_restored_from_per_shard_positions_reads_exactly_what_follows(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    start, expected = _restored_checkpoint(kin, stream)
    sink = Collector()
    df = reader(
        spark, kinesalite.endpoint, stream, str(tmp_path / "meta"), startingPosition=json.dumps(start)
    )
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert_exactly_once(sink.rows, expected)
    assert_key_order(sink.rows)  # the split shard's records before its children's


def test_a_batch_read_takes_the_same_per_shard_positions(spark, kinesalite):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    start, expected = _restored_checkpoint(kin, stream)
    # A batch read ends at the moment it is planned, and kinesalite stamps arrival times up to a second
    # ahead: wait that out so that the records just put are before the end.
    time.sleep(1.5)
    rows = (
        spark.read.format("kinesis")
        .option("streamName", stream)
        .option("region", "us-east-1")
        .option("endpointUrl", kinesalite.endpoint)
        .option("startingPosition", json.dumps(start))
        .load()
        .collect()
    )
    assert_exactly_once(rows, expected)


def test_a_batch_read_stops_at_per_shard_ending_positions(spark, kinesalite):
    """endingPosition per shard: shard 0 up to and including its 30th record, shard 1 up to its 40th
    (not included); shard 0 split since, and its children are after its end, so none of theirs."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 120)
    before = shard_sequences(kin, stream)
    first, second = sorted(before)
    split(kin, stream, next(s for s in open_shards(kin, stream) if s["ShardId"] == first))
    put(kin, stream, 120, 80)
    ending = {
        first: f"AFTER_SEQUENCE_NUMBER:{before[first][29][0]}",
        second: f"AT_SEQUENCE_NUMBER:{before[second][39][0]}",
    }
    rows = (
        spark.read.format("kinesis")
        .option("streamName", stream)
        .option("region", "us-east-1")
        .option("endpointUrl", kinesalite.endpoint)
        .option("startingPosition", "TRIM_HORIZON")
        .option("endingPosition", json.dumps(ending))
        .load()
        .collect()
    )
    expected = [data for _seq, data in before[first][:30]] + [data for _seq, data in before[second][:39]]
    assert_exactly_once(rows, expected)
    assert {r["shardId"] for r in rows} == {first, second}


def test_a_shard_the_stream_does_not_have_is_an_error_at_query_start(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    start = json.dumps({"shardId-000000000009": "AFTER_SEQUENCE_NUMBER:1"})
    df = reader(spark, kinesalite.endpoint, stream, str(tmp_path / "meta"), startingPosition=start)
    error = run_available_now_failure(spark, df, str(tmp_path / "cp"), Collector())
    assert "Kinesis option 'startingPosition.shardId-000000000009'" in error
    assert (
        "does not have" in error
        and "Name shards it lists: shardId-000000000000, shardId-000000000001" in error
    )
