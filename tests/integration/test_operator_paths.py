"""Exact or loud on the paths an operator takes around a query, against a real local Kinesis and a
real SparkSession: a replay with a moved metadataPath, two queries on one metadataPath, a throttled
DescribeStreamSummary while shards age out, and a metadataPath whose oldest record an expiry rule
removed."""

from __future__ import annotations

import shutil

import pytest

from pyspark_kinesis.source.state.batch_log import source_key
from tests.helpers import client, new_stream, put, shard_sequences
from tests.integration.streaming_util import (
    Collector,
    reader,
    run_available_now,
    run_available_now_failure,
    run_once,
    start_running,
    wait_for,
)
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


class FailAt:
    """A foreachBatch that collects, and fails batch `batch`: the query dies with that batch logged
    and not committed, so a restart replays it."""

    def __init__(self, batch: int) -> None:
        self.batch, self.collector = batch, Collector()

    def __call__(self, df, batch_id: int) -> None:
        if batch_id == self.batch:
            raise RuntimeError(f"stop at batch {batch_id}")
        self.collector(df, batch_id)


def test_a_replay_with_a_moved_metadata_path_fails_before_it_reads(spark, kinesis_local, tmp_path):
    """Without the check, the replayed batch read afresh, recorded new ends under the new path and
    reached the sink with other rows than its first attempt; the query died one batch later."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 30)
    cp = str(tmp_path / "cp")
    options = {"startingPosition": "TRIM_HORIZON", "maxRecordsPerShard": "10"}
    first = FailAt(1)
    message = run_available_now_failure(
        spark, reader(spark, kinesis_local.endpoint, stream, str(tmp_path / "meta"), **options), cp, first
    )
    assert "stop at batch 1" in message and [b for b, _rows in first.collector.batches] == [0]
    again = Collector()
    df = reader(spark, kinesis_local.endpoint, stream, str(tmp_path / "moved"), **options)
    message = run_available_now_failure(spark, df, cp, again)
    assert "CheckpointMismatchError" in message and "metadataPath" in message, message[-2000:]
    assert not again.batches  # the replay never reached the sink


def test_a_second_query_on_a_metadata_path_in_use_fails_at_start(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    meta = str(tmp_path / "meta")
    running = start_running(
        reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON"),
        str(tmp_path / "cp1"),
        Collector(),
    )
    try:
        wait_for(lambda: running.lastProgress is not None, 60, "the first query's first trigger", running)
        second = reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON")
        message = run_available_now_failure(spark, second, str(tmp_path / "cp2"), Collector())
    finally:
        running.stop()
    assert "in use by another running query" in message and "its own metadataPath" in message, message[-2000:]


def test_a_throttled_stream_check_while_shards_aged_out_does_not_fail_the_query(
    spark, kinesis_local, tmp_path
):
    """A restart after a long downtime: the read finds its position aged out and checks the stream was
    not re-created (DescribeStreamSummary, 20 calls per second per account), which is throttled.
    Without retries, the task failed and the query with it."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 40)
    ((sid, records),) = shard_sequences(kin, stream).items()
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    options = {"startingPosition": "TRIM_HORIZON", "maxRecordsPerShard": "10", "failOnDataLoss": "false"}
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.aged.mode = "error"
        first = Collector()
        run_once(reader(spark, proxy.endpoint, stream, meta, **options), cp, first)
        assert len(first.rows) == 10
        proxy.trim(sid, records[15][0])  # 9 (the resume point) to 14 aged out
        proxy.fail_next[("reader", "DescribeStreamSummary")] = 5
        again = Collector()
        run_available_now(spark, reader(spark, proxy.endpoint, stream, meta, **options), cp, again)
        assert proxy.injected.get("refused DescribeStreamSummary") == 5
    assert [bytes(r["data"]).decode() for r in again.rows] == [d for _s, d in records[15:]]


def test_an_identity_record_removed_by_an_expiry_rule_does_not_stop_a_restart(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 10)
    meta, cp = tmp_path / "meta", str(tmp_path / "cp")
    first = Collector()
    run_available_now(
        spark,
        reader(spark, kinesis_local.endpoint, stream, str(meta), startingPosition="TRIM_HORIZON"),
        cp,
        first,
    )
    (token,) = [p.name for p in meta.iterdir() if not p.name.startswith("_")]
    (meta / source_key(token)).unlink()  # an S3 lifecycle rule expired it: it is written once, at the start
    put(kin, stream, 10, 10)
    again = Collector()
    run_available_now(
        spark,
        reader(spark, kinesis_local.endpoint, stream, str(meta), startingPosition="TRIM_HORIZON"),
        cp,
        again,
    )
    assert sorted(bytes(r["data"]).decode() for r in first.rows + again.rows) == sorted(
        f"r-{n}" for n in range(20)
    )
    assert (meta / source_key(token)).exists()
    shutil.rmtree(meta / token)  # everything expired: a clear error that names the cause
    message = run_available_now_failure(
        spark,
        reader(spark, kinesis_local.endpoint, stream, str(meta), startingPosition="TRIM_HORIZON"),
        cp,
        Collector(),
    )
    assert "expiry rule" in message and "exclude that prefix from expiry" in message, message[-2000:]
