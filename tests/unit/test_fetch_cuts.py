"""The bulk path that cuts plain responses to a batch's limits must take exactly what the record-by-
record path takes (it is an optimisation, not a second semantics)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from pyspark_kinesis.aws.get_records import Records, decode
from pyspark_kinesis.fetching import ShardLimits, _ShardRead
from pyspark_kinesis.positions import Position

PROXY = SimpleNamespace(name="orders", spec=SimpleNamespace(key="arn:aws:kinesis:us-east-1:1:stream/orders"))


def records(rng: random.Random, count: int) -> Records:
    return Records(
        seqs=[str(1000 + 7 * i) for i in range(count)],
        keys=[f"k{i % 5}" for i in range(count)],
        data=[bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(count)],
        arrivals=[1_700_000_000.0 + i * 0.01 for i in range(count)],
    )


def cut(path: str, batch: list[Records], limits: ShardLimits) -> tuple:
    read = _ShardRead(PROXY, "shardId-0", Position.trim_horizon(), limits, None)
    for response in batch:
        if path == "plain":
            read._take_plain(response)
        else:
            read._take_each(response, Position.trim_horizon())
        if read.stop:
            break
    return read.cols.seqs, read.n_bytes, read.stop, read.reached_cutoff, read.resume


def test_bulk_and_per_record_paths_cut_alike():
    rng = random.Random(7)
    for _case in range(300):
        batch = [records(rng, rng.randrange(0, 40)) for _ in range(rng.randrange(1, 4))]
        limits = ShardLimits(
            max_records=rng.choice([-1, 1, 5, 30, 100]),
            max_bytes=rng.choice([-1, 1, 500, 3000, 100_000]),
            cutoff_ms=rng.choice([None, 1_700_000_000_050, 1_700_000_000_300]),
        )
        assert cut("plain", batch, limits) == cut("each", batch, limits), limits


def test_decode_reads_a_get_records_body_and_refuses_a_truncated_one():
    body = (
        b'{"Records":[{"SequenceNumber":"49","ApproximateArrivalTimestamp":1.7e9,"Data":"aGk=",'
        b'"PartitionKey":"k"}],"NextShardIterator":"it","MillisBehindLatest":0}'
    )
    out = decode(body)
    assert out["Records"].data == [b"hi"] and out["Records"].seqs == ["49"]
    assert out["NextShardIterator"] == "it" and out["MillisBehindLatest"] == 0
    assert decode(body[: len(body) // 2]) == {}  # a cut-off body is no answer (asked again)
    assert "NextShardIterator" not in decode(b'{"Records":[],"NextShardIterator":null}')  # closed shard
