"""Streams that go away, come back, expire, or are read before their start: each ends in the rows the
guarantees promise or in one clear error, against a real local Kinesis and a real SparkSession."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import client, new_stream, put, wait_active
from tests.integration.streaming_util import (
    Collector,
    reader,
    run_available_now,
    run_available_now_failure,
    start_running,
    wait_for,
)
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def payloads(rows) -> list[str]:
    return sorted(bytes(r["data"]).decode() for r in rows)


def test_a_stream_deleted_while_the_query_runs_ends_it_with_one_clear_error(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 40)
    sink = Collector()
    df = reader(
        spark,
        kinesis_local.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        shardDiscoveryIntervalMs="500",
    )
    query = start_running(df, str(tmp_path / "cp"), sink)
    try:
        wait_for(lambda: len(sink.rows) >= 40, 90, "the records put before the start", query)
        kin.delete_stream(StreamName=stream)
        with pytest.raises(Exception, match="was deleted") as failure:
            query.awaitTermination(90)
    finally:
        query.stop()
    message = str(failure.value)
    assert f"stream '{stream}'" in message and "was deleted while the query read it" in message, message[
        -2000:
    ]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_stream_deleted_and_recreated_while_the_query_is_down(
    spark, kinesis_local, tmp_path, fail_on_data_loss
):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 30, tag="old")
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    options = {"startingPosition": "TRIM_HORIZON", "failOnDataLoss": str(fail_on_data_loss).lower()}
    first = Collector()
    run_available_now(spark, reader(spark, kinesis_local.endpoint, stream, meta, **options), cp, first)
    assert len(first.rows) == 30
    kin.delete_stream(StreamName=stream)
    time.sleep(1.1)  # creation times are kept in milliseconds; make the new one differ
    kin.create_stream(StreamName=stream, ShardCount=1)
    wait_active(kin, stream)
    expected = put(kin, stream, 0, 12, tag="new")
    second = Collector()
    df = reader(spark, kinesis_local.endpoint, stream, meta, **options)
    if fail_on_data_loss:
        message = run_available_now_failure(spark, df, cp, second)
        assert "re-created" in message and "failOnDataLoss=false" in message and stream in message
    else:
        run_available_now(spark, df, cp, second)
        assert payloads(second.rows) == sorted(expected)  # the new stream from its start, nothing old


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_shard_that_expired_before_it_was_read_is_a_loss(spark, kinesis_local, tmp_path, fail_on_data_loss):
    """The query's shard list still shows the shard, but GetShardIterator says it is gone (it went past
    retention in between): a DataLossError naming it, or with failOnDataLoss=false the other shards go on."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 40, keys=16)
    shards = sorted(s["ShardId"] for s in kin.list_shards(StreamName=stream)["Shards"])
    sink = Collector()
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.gone.add(shards[0])
        df = reader(
            spark,
            proxy.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",
            failOnDataLoss=str(fail_on_data_loss).lower(),
        )
        if fail_on_data_loss:
            message = run_available_now_failure(spark, df, str(tmp_path / "cp"), sink)
            assert "DataLossError" in message and shards[0] in message and "past retention" in message
            return
        run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert {r["shardId"] for r in sink.rows} == {shards[1]}
    assert len(sink.rows) == sum(
        1
        for _ in kin.get_records(
            ShardIterator=kin.get_shard_iterator(
                StreamName=stream, ShardId=shards[1], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )["Records"]
    )


def test_a_start_ahead_of_the_service_clock_waits_for_it(spark, kinesis_local, tmp_path):
    """Kinesis refuses an AT_TIMESTAMP iterator in its future (a LATEST pinned by a driver whose clock runs
    ahead, or a timestamp not reached yet): the shards are at their tip until the service's clock gets there."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 10, tag="before")
    start = datetime.now(UTC) + timedelta(seconds=6)
    sink = Collector()
    df = reader(
        spark,
        kinesis_local.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition=f"AT_TIMESTAMP:{start.isoformat()}",
    )
    query = start_running(df, str(tmp_path / "cp"), sink, "500 milliseconds")
    try:
        wait_for(lambda: datetime.now(UTC) > start + timedelta(seconds=1), 30, "the start time", query)
        expected = put(kin, stream, 0, 10, tag="after")
        wait_for(lambda: len(sink.rows) >= 10, 60, "the records put after the start", query)
        time.sleep(1)
    finally:
        query.stop()
    assert query.exception() is None
    assert payloads(sink.rows) == sorted(expected)


def test_records_without_a_partition_key_are_read_with_a_null_one(spark, kinesis_local, tmp_path):
    """GetRecords leaves PartitionKey out for records put with the service's AUTO record distribution."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    expected = put(kin, stream, 0, 25)
    sink = Collector()
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.strip_partition_keys = True
        df = reader(spark, proxy.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON")
        run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert payloads(sink.rows) == sorted(expected)
    assert {r["partitionKey"] for r in sink.rows} == {None}
