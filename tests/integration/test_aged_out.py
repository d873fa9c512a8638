"""Records that aged out past retention while the query was stopped: exact or loud, against a real
local Kinesis and a real SparkSession (exactly-once-design.md, invariant 9).

The local servers keep records 24 hours at least, so the fault proxy trims a shard's head instead, and
answers a position below the trim as Kinesis may: with an iterator at the oldest record left
("silent"), or with an InvalidArgumentException ("error")."""

from __future__ import annotations

import pytest

from pyspark_kinesis import metrics, spark_features
from tests.helpers import client, new_stream, put, shard_sequences
from tests.integration.streaming_util import (
    Collector,
    reader,
    run_available_now,
    run_available_now_failure,
    run_once,
)
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


@pytest.mark.parametrize(
    ("mode", "fail_on_data_loss"), [("silent", True), ("error", True), ("silent", False)]
)
def test_a_resume_after_a_record_that_aged_out_is_a_loss(
    spark, kinesis_local, tmp_path, mode, fail_on_data_loss
):
    """The query read records 0-9 and stopped with 10-39 unread; while it was down, 9 (where it
    resumes) and 10-19 aged out. Sequence numbers have gaps, so only 9 coming back proves nothing after
    it is gone: without that check, a restart read 20-39 as if nothing happened."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 40)
    ((sid, records),) = shard_sequences(kin, stream).items()
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.aged.mode = mode
        options = {
            "startingPosition": "TRIM_HORIZON",
            "maxRecordsPerShard": "10",
            "failOnDataLoss": str(fail_on_data_loss).lower(),
        }
        first = Collector()
        run_once(reader(spark, proxy.endpoint, stream, meta, **options), cp, first)
        assert [bytes(r["data"]).decode() for r in first.rows] == [d for _s, d in records[:10]]
        proxy.trim(sid, records[20][0])  # down past retention: 9-19 aged out
        again = Collector()
        df = reader(spark, proxy.endpoint, stream, meta, **options)
        if fail_on_data_loss:
            message = run_available_now_failure(spark, df, cp, again)
            assert "DataLossError" in message and "past retention" in message, message[-2000:]
            assert stream in message and sid in message and records[9][0] in message
            assert "failOnDataLoss" in message
            assert not again.rows
        else:
            queries = run_available_now(spark, df, cp, again)
            assert [bytes(r["data"]).decode() for r in again.rows] == [d for _s, d in records[20:]]
            if spark_features.ADMISSION_CONTROL:  # (PySpark 4.2+: the lag report is in the query's progress)
                # The driver reports the loss from the batch-end record, whichever executor met it.
                lossy = [
                    (figures["batch"], figures["shardsWithDataLoss"])
                    for query in queries
                    for progress in query.recentProgress
                    for figures in metrics.lag(progress).values()
                ]
                assert (1, 1) in lossy and all(n == 0 for batch, n in lossy if batch != 1), lossy


def test_a_resume_at_the_tip_whose_last_record_aged_out_loses_nothing(spark, kinesis_local, tmp_path):
    """The query read everything (at the tip after record 9) and stopped. Record 9 aged out, and 10-14
    came since: 9 is not there, but nothing after it can have aged out (it all arrived after the tip
    was seen, within the retention), so the query goes on, failOnDataLoss=true, with nothing lost."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 10)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    with FaultProxy(kinesis_local.endpoint) as proxy:
        first = Collector()
        run_available_now(
            spark, reader(spark, proxy.endpoint, stream, meta, startingPosition="TRIM_HORIZON"), cp, first
        )
        assert len(first.rows) == 10
        put(kin, stream, 10, 5)
        ((sid, records),) = shard_sequences(kin, stream).items()
        proxy.trim(sid, records[10][0])  # 0-9 aged out; 10-14 are new
        again = Collector()
        run_available_now(
            spark, reader(spark, proxy.endpoint, stream, meta, startingPosition="TRIM_HORIZON"), cp, again
        )
    assert [bytes(r["data"]).decode() for r in again.rows] == [d for _s, d in records[10:]]


@pytest.mark.parametrize("mode", ["silent", "error"])
def test_an_efo_resume_after_a_record_that_aged_out_is_a_loss(spark, kinesis_local, tmp_path, mode):
    """The same under enhanced fan-out: the subscription starts at the record the query resumes after,
    and its first event must bring it back."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 40)
    ((sid, records),) = shard_sequences(kin, stream).items()
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    options = {"startingPosition": "TRIM_HORIZON", "maxRecordsPerShard": "10", "consumerType": "efo"}
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.aged.mode = mode
        first = Collector()
        run_once(reader(spark, proxy.endpoint, stream, meta, **options), cp, first)
        assert [bytes(r["data"]).decode() for r in first.rows] == [d for _s, d in records[:10]]
        proxy.trim(sid, records[20][0])
        again = Collector()
        message = run_available_now_failure(
            spark, reader(spark, proxy.endpoint, stream, meta, **options), cp, again
        )
    assert "DataLossError" in message and "past retention" in message, message[-2000:]
    assert stream in message and sid in message and not again.rows
