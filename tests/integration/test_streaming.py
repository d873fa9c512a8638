"""The source against a real local Kinesis and a real SparkSession: delivery, restarts, positions,
admission control, triggers and batch reads."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from pyspark_kinesis import spark_features
from tests.helpers import assert_exactly_once, assert_key_order, assert_shard_order, client, new_stream, put
from tests.integration.streaming_util import (
    Collector,
    reader,
    run_available_now,
    run_once,
    start_running,
    wait_for,
)

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def test_records_put_before_and_during_the_query_arrive_once_in_order(spark, any_kinesis, tmp_path):
    kin = client(any_kinesis.endpoint)
    stream = new_stream(kin, shards=3)
    expected = put(kin, stream, 0, 300)
    sink = Collector()
    df = reader(spark, any_kinesis.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON")
    query = start_running(df, str(tmp_path / "cp"), sink, "200 milliseconds")
    try:
        wait_for(lambda: len(sink.rows) >= 300, 120, "the records put before the start", query)
        expected += put(kin, stream, 300, 300)
        wait_for(lambda: len(sink.rows) >= 600, 120, "the records put while running", query)
        time.sleep(2)  # a duplicate would show up in the next batches
    finally:
        query.stop()
    assert_exactly_once(sink.rows, expected)
    assert_shard_order(sink.rows)
    assert_key_order(sink.rows)
    assert len(sink.batches) >= 2


def test_stop_and_restart_from_checkpoint_loses_and_repeats_nothing(spark, any_kinesis, tmp_path):
    kin = client(any_kinesis.endpoint)
    stream = new_stream(kin, shards=2)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    expected = put(kin, stream, 0, 250)
    run_available_now(
        spark, reader(spark, any_kinesis.endpoint, stream, meta, startingPosition="TRIM_HORIZON"), cp, sink
    )
    first_run = len(sink.rows)
    assert first_run == 250
    expected += put(kin, stream, 250, 250)
    run_available_now(
        spark, reader(spark, any_kinesis.endpoint, stream, meta, startingPosition="TRIM_HORIZON"), cp, sink
    )
    # A third run with nothing new must read nothing and plan no batch.
    batches_before = len(sink.batches)
    run_available_now(
        spark, reader(spark, any_kinesis.endpoint, stream, meta, startingPosition="TRIM_HORIZON"), cp, sink
    )
    assert_exactly_once(sink.rows, expected)
    assert_shard_order(sink.rows)
    assert len(sink.batches) == batches_before, "a run with nothing new planned a batch"


def test_latest_reads_records_put_after_the_query_started_only(spark, any_kinesis, tmp_path):
    kinesis_local = any_kinesis
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 50, tag="old")
    time.sleep(1.5)
    sink = Collector()
    df = reader(spark, kinesis_local.endpoint, stream, str(tmp_path / "meta"))  # LATEST is the default
    query = start_running(df, str(tmp_path / "cp"), sink, "1 second")
    try:
        # LATEST is pinned when Spark initializes the source, moments after start() returns; records
        # put from then on, including before the first batch is planned, must all arrive.
        # The source's first planning (its identity record under metadataPath) comes after initialOffset()
        # pinned LATEST. (Not the offset log's first entry: an idle stream plans no batch.)
        wait_for(
            lambda: any((tmp_path / "meta").glob("*/source.json")), 60, "the source's first planning", query
        )
        expected = put(kin, stream, 0, 60, tag="new")
        wait_for(lambda: len(sink.rows) >= 60, 60, "records put after the start", query)
        time.sleep(2)
    finally:
        query.stop()
    assert_exactly_once(sink.rows, expected)


def test_at_timestamp_starts_at_that_time(spark, any_kinesis, tmp_path):
    kin = client(any_kinesis.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 40, tag="before")
    time.sleep(1.5)
    moment = datetime.now(UTC).isoformat()
    time.sleep(1.5)
    expected = put(kin, stream, 0, 40, tag="after")
    sink = Collector()
    df = reader(
        spark, any_kinesis.endpoint, stream, str(tmp_path / "meta"), startingPosition=f"AT_TIMESTAMP:{moment}"
    )
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert_exactly_once(sink.rows, expected)


@pytest.mark.skipif(
    not spark_features.ADMISSION_CONTROL,
    reason="PySpark 4.0/4.1 run a Python source's AvailableNow as one batch",
)
def test_available_now_reads_in_bounded_batches_and_stops_at_the_start_time(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 450)
    late: list[str] = []

    class LatePutter(Collector):
        def __call__(self, df, batch_id):
            super().__call__(df, batch_id)
            if batch_id == 0:
                time.sleep(1.1)
                late.extend(put(kin, stream, 1000, 50, tag="late"))

    sink = LatePutter()
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        maxRecordsPerBatch=100,
    )
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert_exactly_once(sink.rows, expected)  # the late records arrived after the trigger started
    assert all(len(rows) <= 100 for _, rows in sink.batches)
    assert len([b for b in sink.batches if b[1]]) >= 5
    # The next run picks up what arrived after the first one started.
    run_available_now(
        spark,
        reader(
            spark,
            kinesalite.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",
            maxRecordsPerBatch=100,
        ),
        str(tmp_path / "cp"),
        sink,
    )
    assert_exactly_once(sink.rows, expected + late)
    assert_shard_order(sink.rows)


def test_max_bytes_per_batch_bounds_each_batch(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    expected = put(kin, stream, 0, 200)  # payloads of 5-7 bytes
    sink = Collector()
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        maxBytesPerBatch=300,
    )
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert_exactly_once(sink.rows, expected)
    assert all(sum(len(r["data"]) for r in rows) <= 300 for _, rows in sink.batches)


def test_trigger_once_runs_one_batch(spark, kinesalite, tmp_path):
    """(With kinesisColumns: the rows carry only the Kinesis columns named, in the rows' order.)"""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 120)
    sink = Collector()
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        kinesisColumns="partitionKey,data",
    )
    assert df.columns == ["data", "partitionKey"]
    run_once(df, str(tmp_path / "cp"), sink)
    assert len(sink.batches) == 1
    assert_exactly_once(sink.rows, expected)
    assert all(
        list(r.asDict()) == ["data", "partitionKey"] and r["partitionKey"].startswith("k") for r in sink.rows
    )


def test_batch_read_between_positions(spark, any_kinesis):
    kin = client(any_kinesis.endpoint)
    stream = new_stream(kin, shards=2)
    first = put(kin, stream, 0, 70, tag="a")
    time.sleep(1.5)
    moment = datetime.now(UTC).isoformat()
    time.sleep(1.5)
    second = put(kin, stream, 0, 30, tag="b")

    def batch(**options):
        r = spark.read.format("kinesis").option("streamName", stream).option("region", "us-east-1")
        r = r.option("endpointUrl", any_kinesis.endpoint)
        for key, value in options.items():
            r = r.option(key, value)
        return r.load().collect()

    assert_exactly_once(batch(), first + second)
    assert_exactly_once(batch(endingPosition=f"AT_TIMESTAMP:{moment}"), first)
    assert_exactly_once(batch(startingPosition=f"AT_TIMESTAMP:{moment}"), second)
    rows = batch()
    assert {r["streamName"] for r in rows} == {stream}
    assert all(
        r["approximateArrivalTimestamp"] is not None and r["partitionKey"].startswith("k") for r in rows
    )


def test_kpl_aggregates_cut_by_batch_limits_arrive_once(spark, kinesalite, tmp_path):
    """A batch limit smaller than an aggregate ends batches inside KPL aggregates; the sub-records
    must still arrive once each, in order, with their sub-sequence numbers."""
    from aws_kinesis_agg.aggregator import RecordAggregator

    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    expected = []
    for blob in range(6):
        aggregator = RecordAggregator()
        for i in range(10):
            payload = f"agg-{blob * 10 + i}"
            aggregator.add_user_record(f"k{i % 3}", payload.encode())
            expected.append(payload)
        key, _hash, data = aggregator.clear_and_get().get_contents()
        kin.put_record(StreamName=stream, Data=data, PartitionKey=key)
    expected += put(kin, stream, 0, 5, tag="plain")
    sink = Collector()
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        maxRecordsPerBatch=7,
    )
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert_exactly_once(sink.rows, expected)
    assert_shard_order(sink.rows)
    assert all(len(rows) <= 7 for _, rows in sink.batches)
    assert sorted({r["subSequenceNumber"] for r in sink.rows}) == list(range(10))


def partitions_per_batch(spark, kinesalite, tmp_path, **options) -> list[int]:
    """An availableNow run over six shards holding 300 records: each batch's task count (after
    checking every record arrived once and in shard order)."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=6)
    expected = put(kin, stream, 0, 300, keys=30)
    partitions: list[int] = []

    class Counting(Collector):
        def __call__(self, df, batch_id):
            partitions.append(df.rdd.getNumPartitions())
            super().__call__(df, batch_id)

    sink = Counting()
    df = reader(
        spark, kinesalite.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON", **options
    )
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert_exactly_once(sink.rows, expected)
    assert_shard_order(sink.rows)
    return partitions


@pytest.mark.parametrize(
    ("options", "tasks"),
    [
        ({"targetTasks": 2}, 2),
        ({"maxShardsPerTask": 4}, 2),
        ({"targetTasks": 3, "shardAssigner": "hash_range"}, 3),
        ({}, 6),
    ],
)
def test_task_count_per_batch_follows_the_options(spark, kinesalite, tmp_path, options, tasks):
    partitions = partitions_per_batch(spark, kinesalite, tmp_path, **options)
    assert partitions[0] == tasks  # the first batch reads all six shards
    assert max(partitions) <= tasks


def test_light_shards_share_a_task_once_their_load_is_known(spark, kinesalite, tmp_path):
    """With default options a batch gives each shard whose recent load is unknown a task of its own
    (the first batch), then groups shards that read little into a task per MiB of recent bytes per
    batch (source/driver/batch_shape.py `light_task_count`): here one task for six quiet shards."""
    partitions = partitions_per_batch(spark, kinesalite, tmp_path, maxRecordsPerBatch=60)
    assert len(partitions) >= 3, partitions
    assert partitions[0] == 6 and set(partitions[1:]) == {1}, partitions
