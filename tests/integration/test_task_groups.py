"""Shards grouped onto few tasks (targetTasks / maxShardsPerTask) under a backlog: every shard of a task
makes progress in every batch it is planned in, against a real local Kinesis and a real SparkSession."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import client, new_stream
from tests.integration.streaming_util import Collector, reader, run_once
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

SHARDS = 24  # more than a task's 16 fetch threads
PER_SHARD = 40  # more than 2 s of reads at 2 records a call, 5 calls a second


def fill_every_shard(kin, stream: str, per_shard: int) -> list[str]:
    shards = kin.list_shards(StreamName=stream)["Shards"]
    for shard in shards:
        keys = shard["HashKeyRange"]
        middle = str((int(keys["StartingHashKey"]) + int(keys["EndingHashKey"])) // 2)
        records = [
            {"Data": f"{shard['ShardId']}-{n}".encode(), "PartitionKey": "k", "ExplicitHashKey": middle}
            for n in range(per_shard)
        ]
        assert kin.put_records(StreamName=stream, Records=records).get("FailedRecordCount", 0) == 0
    return [s["ShardId"] for s in shards]


def test_every_shard_of_a_big_task_progresses_in_every_batch_under_backlog(spark, kinesis_local, tmp_path):
    """24 shards on one task, each with more records than the batch's time lets it read (responses
    capped at 2 records, 5 calls a second, and kinesis-local says how far behind each response is, so
    no shard reaches its tip): with 16 fetch threads, shards 17-24 used to start after the time was
    spent and read nothing, batch after batch."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=SHARDS)
    shard_ids = fill_every_shard(kin, stream, PER_SHARD)
    sink = Collector()
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.max_limit = 2
        df = reader(
            spark,
            proxy.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",
            maxShardsPerTask=str(SHARDS),
            targetTasks="1",
            maxFetchTimeMs="3000",
        )
        for _ in range(2):  # two batches, each with every shard still backlogged
            run_once(df, str(tmp_path / "cp"), sink)
    assert len(sink.batches) == 2
    for batch_id, rows in sink.batches:
        per_shard = Counter(r["shardId"] for r in rows)
        starved = sorted(set(shard_ids) - set(per_shard))
        assert not starved, f"batch {batch_id}: shards {starved} read nothing"
        assert all(n < PER_SHARD for n in per_shard.values()), "a backlog was drained: the test shows nothing"
