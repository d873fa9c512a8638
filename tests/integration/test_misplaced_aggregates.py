"""A KPL producer's stale shard map after a split: an aggregate put into the parent's half-range sibling
holds user records of keys the other shard now owns, and the KPL re-sends those to the right shard. Read
as the KCL reads, every user record comes out exactly once: streaming (polling), a drained one-run
batch and a batch read alike (the dropped count in the lag report: tests/unit/source/driver/test_lag.py). The aggregate is built with
aws-kinesis-agg and each key's shard computed here as the KCL computes it (MD5 of the partition key)."""

from __future__ import annotations

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from tests.helpers import client, kcl_hash, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]
HALF = 2**127


def stream_with_a_misplaced_aggregate(endpoint: str) -> tuple[str, list[bytes]]:
    """Two shards (lower and upper half of the keys). One aggregate of 12 user records, half of whose keys
    belong to the upper shard, put into the lower one; the upper-half ones put again, as the KPL
    re-sends them, into the upper shard. Returns the stream and every user record's payload once."""
    kin = client(endpoint)
    stream = new_stream(kin, shards=2)
    low = [k for k in (f"key-{i}" for i in range(200)) if kcl_hash(k) < HALF][:6]
    high = [k for k in (f"key-{i}" for i in range(200)) if kcl_hash(k) >= HALF][:6]
    aggregator = RecordAggregator()
    for key in low + high:
        aggregator.add_user_record(key, f"user-{key}".encode())
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    kin.put_record(StreamName=stream, Data=blob, PartitionKey=low[0], ExplicitHashKey="0")
    resent = RecordAggregator()
    for key in high:
        resent.add_user_record(key, f"user-{key}".encode())
    _pk, _ehk, again = resent.clear_and_get().get_contents()
    kin.put_record(StreamName=stream, Data=again, PartitionKey=high[0], ExplicitHashKey=str(2**128 - 1))
    return stream, sorted(f"user-{k}".encode() for k in low + high)


@pytest.mark.parametrize("how", ["stream", "drain", "batch"])
def test_each_user_record_once_after_a_stale_shard_map(spark, kinesalite, tmp_path, how):
    stream, expected = stream_with_a_misplaced_aggregate(kinesalite.endpoint)
    options = {"startingPosition": "TRIM_HORIZON"}
    if how == "batch":
        df = (
            spark.read.format("kinesis")
            .options(streamName=stream, region="us-east-1", endpointUrl=kinesalite.endpoint)
            .load()
        )
        assert sorted(bytes(r["data"]) for r in df.collect()) == expected
        return
    if how == "drain":
        options["drainInOneBatch"] = "true"
    df = reader(spark, kinesalite.endpoint, stream, str(tmp_path / "m"), **options)
    sink = Collector()
    if how == "drain":
        query = (
            df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "c"))
            .trigger(once=True)
            .start()
        )
        query.awaitTermination(180)
    else:
        run_available_now(spark, df, str(tmp_path / "c"), sink)
    assert sorted(bytes(r["data"]) for r in sink.rows) == expected
