"""Batches whose tasks do not all run, and replays whose records aged out: against a real local Kinesis
and a real SparkSession (exactly-once-design.md, invariants 7 and 8)."""

from __future__ import annotations

import time

import pytest

from tests.helpers import client, new_stream, put
from tests.integration.streaming_util import reader, run_once, wait_for
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def shard_records(kin, stream: str) -> dict[str, list[str]]:
    """Every record of every shard, in sequence order, read with plain boto3."""
    out = {}
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        sid = shard["ShardId"]
        iterator = kin.get_shard_iterator(StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON")[
            "ShardIterator"
        ]
        records: list[str] = []
        for _ in range(20):
            response = kin.get_records(ShardIterator=iterator, Limit=10_000)
            records += [r["Data"].decode() for r in response["Records"]]
            iterator = response.get("NextShardIterator")
            if not response["Records"] or iterator is None:
                break
        out[sid] = records
    return out


def use_part(how: str, df, spark) -> None:
    """What a foreachBatch does with the first batch instead of reading all of it."""
    if how == "take":
        df.take(1)
    elif how == "show":
        df.show(1)
    elif how == "limit":
        df.limit(1).collect()
    elif how == "one-partition":
        spark.sparkContext.runJob(df.rdd, lambda rows: [sum(1 for _ in rows)], partitions=[0])
    # "skip": return without touching the DataFrame


@pytest.mark.parametrize("how", ["take", "show", "limit", "one-partition", "skip"])
def test_a_batch_whose_tasks_did_not_all_run_leaves_the_query_alive_and_loses_nothing(
    spark, kinesis_local, tmp_path, how
):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 200, keys=16)
    by_shard = shard_records(kin, stream)
    assert all(len(records) > 20 for records in by_shard.values())
    delivered: dict[int, list] = {}

    def handler(df, batch_id: int) -> None:
        if batch_id == 0:
            use_part(how, df, spark)  # task 1 (the second shard) never runs
        else:
            delivered[batch_id] = df.collect()

    df = reader(
        spark,
        kinesis_local.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        maxRecordsPerBatch="40",
    )
    query = (
        df.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    first, second = sorted(by_shard)
    try:
        # Everything of the shard whose task never ran arrives, in later batches.
        def arrived(sid):
            return [
                bytes(r["data"]).decode()
                for b in sorted(delivered)
                for r in delivered[b]
                if r["shardId"] == sid
            ]

        wait_for(
            lambda: arrived(second) == by_shard[second] and arrived(first)[-1:] == by_shard[first][-1:],
            120,
            "every shard read to its end",
            query,
        )
        time.sleep(1.5)  # a duplicate would show up in the next batches
    finally:
        query.stop()
    assert query.exception() is None
    got_first, got_second = arrived(first), arrived(second)
    assert got_second == by_shard[second], "the shard of the task that never ran lost or repeated records"
    # The task that ran in batch 0 consumed a prefix of its shard (its rows belong to batch 0, whatever
    # the foreachBatch did with them); the rest arrives exactly once, in order.
    skipped = len(by_shard[first]) - len(got_first)
    assert got_first == by_shard[first][skipped:]
    if how in ("skip",):
        assert skipped == 0, "a batch nobody read must not consume records"
    else:
        assert 1 <= skipped <= 20


def test_a_query_restarted_after_a_batch_nobody_read_goes_on(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 60, keys=16)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    df = reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON")
    run_once(df, cp, lambda df, batch: None)
    rows: list = []
    again = reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON")
    query = (
        again.writeStream.foreachBatch(lambda df, batch: rows.extend(df.collect()))
        .option("checkpointLocation", cp)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(bytes(r["data"]).decode() for r in rows) == sorted(expected)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_replay_whose_first_records_aged_out_fails_loudly_or_counts_the_loss(
    spark, kinesis_local, tmp_path, fail_on_data_loss
):
    """A TRIM_HORIZON start moves as data ages out: the batch is read twice (two actions on one
    DataFrame: the second is a replay of the recorded batch), the first 10 records aging out between."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 50)
    ((sid, records),) = shard_records(kin, stream).items()
    tenth = kin.get_records(
        ShardIterator=kin.get_shard_iterator(
            StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"],
        Limit=11,
    )["Records"][10]["SequenceNumber"]
    outcome: dict = {}
    with FaultProxy(kinesis_local.endpoint) as proxy:

        def handler(df, batch_id: int) -> None:
            outcome["first"] = df.collect()
            proxy.trim(sid, tenth)  # records 0-9 are past retention now
            try:
                outcome["again"] = df.collect()
            except Exception as exc:  # the replay's task failed
                outcome["error"] = str(exc)

        df = reader(
            spark,
            proxy.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",
            failOnDataLoss=str(fail_on_data_loss).lower(),
        )
        run_once(df, str(tmp_path / "cp"), handler)
    assert len(outcome["first"]) == 50
    if fail_on_data_loss:
        assert "DataLossError" in outcome.get("error", ""), outcome.get("again")
        assert sid in outcome["error"] and stream in outcome["error"] and "failOnDataLoss" in outcome["error"]
    else:
        assert [bytes(r["data"]).decode() for r in outcome["again"]] == records[10:]
