"""The bulk path that cuts plain responses to a batch's limits must take exactly what the record-by-
record path takes (it is an optimisation, not a second semantics)."""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.aws.get_records import Records, decode
from pyspark_kinesis.errors import CorruptRecordError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.cutting import BatchCut, ShardLimits

PROXY = SimpleNamespace(name="orders", spec=SimpleNamespace(key="arn:aws:kinesis:us-east-1:1:stream/orders"))


def records(rng: random.Random, count: int) -> Records:
    return Records.from_lists(
        seqs=[str(1000 + 7 * i) for i in range(count)],
        keys=[f"k{i % 5}" for i in range(count)],
        data=[bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(count)],
        arrivals=[1_700_000_000.0 + i * 0.01 for i in range(count)],
    )


def cut(path: str, batch: list[Records], limits: ShardLimits) -> tuple:
    read = BatchCut(PROXY.name, PROXY.spec.key, "shardId-0", Position.trim_horizon(), limits, None)
    for response in batch:
        if path == "plain":
            read.take(response, Position.trim_horizon())  # no aggregates here: the bulk path
        else:
            read._take_each(response, Position.trim_horizon())
        if read.stop:
            break
    payloads = read.cols.payloads().to_pylist()
    seqs = read.cols.to_arrow().column("sequenceNumber").to_pylist()
    return seqs, payloads, read.n_bytes, read.stop, read.reached_cutoff, read.resume


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


def test_payloads_keep_row_order_when_bulk_and_aggregated_responses_mix():
    aggregator = RecordAggregator()
    for i in range(3):
        aggregator.add_user_record(f"u{i}", f"user-{i}".encode())
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()

    def response(first_seq: int, payloads: list[bytes]) -> Records:
        n = len(payloads)
        return Records.from_lists(
            seqs=[str(first_seq + i) for i in range(n)],
            keys=["k"] * n,
            data=payloads,
            arrivals=[1_700_000_000.0] * n,
        )

    read = BatchCut(
        PROXY.name, PROXY.spec.key, "shardId-0", Position.trim_horizon(), ShardLimits(1000, -1), None
    )
    for batch in (
        response(100, [b"a", b"b"]),
        response(200, [b"c", blob]),
        response(300, [b"d"]),
        response(400, [blob, b"e"]),
    ):
        read.take(batch, Position.trim_horizon())
    users = [b"user-0", b"user-1", b"user-2"]
    expected = [b"a", b"b", b"c", *users, b"d", *users, b"e"]
    table = read.cols.to_arrow()
    assert table.column("data").to_pylist() == expected
    assert table.column("subSequenceNumber").to_pylist() == [0, 0, 0, 0, 1, 2, 0, 0, 1, 2, 0]
    assert table.column("sequenceNumber").to_pylist()[-1] == "401"


def test_decode_reads_a_get_records_body_and_refuses_a_truncated_one():
    body = (
        b'{"Records":[{"SequenceNumber":"49","ApproximateArrivalTimestamp":1.7e9,"Data":"aGk=",'
        b'"PartitionKey":"k"}],"NextShardIterator":"it","MillisBehindLatest":0}'
    )
    out = decode(body)
    seqs, _keys, data, _arrivals = out["Records"].lists()
    assert data == [b"hi"] and seqs == ["49"]
    assert out["NextShardIterator"] == "it" and out["MillisBehindLatest"] == 0
    assert decode(body[: len(body) // 2]) == {}  # a cut-off body is no answer (asked again)
    assert "NextShardIterator" not in decode(b'{"Records":[],"NextShardIterator":null}')  # closed shard


def corrupt_aggregates() -> dict[str, bytes]:
    aggregator = RecordAggregator()
    for i in range(3):
        aggregator.add_user_record(f"u{i}", f"user-{i}".encode())
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    return {
        "bad checksum": blob[:-1] + bytes([blob[-1] ^ 1]),
        "truncated": blob[: len(blob) // 2],
        "bad protobuf": blob[:4] + b"\xff" * 20 + hashlib.md5(b"\xff" * 20).digest(),
    }


def test_corrupt_aggregates_pass_through_as_one_record_with_a_warning_or_fail_the_batch(caplog):
    for what, data in corrupt_aggregates().items():
        response = Records.from_lists(seqs=["1001"], keys=["k"], data=[data], arrivals=[1_700_000_000.0])
        read = BatchCut(
            PROXY.name, PROXY.spec.key, "shardId-0", Position.trim_horizon(), ShardLimits(-1, -1), None
        )
        caplog.clear()
        read.take(response, Position.trim_horizon())
        assert read.cols.payloads().to_pylist() == [data], what  # never dropped
        assert "corrupt KPL aggregate" in caplog.text and "1001" in caplog.text, what
        strict = ShardLimits(-1, -1, fail_on_corrupt_aggregate=True)
        read = BatchCut(PROXY.name, PROXY.spec.key, "shardId-0", Position.trim_horizon(), strict, None)
        with pytest.raises(CorruptRecordError, match="onCorruptAggregate=passThrough"):
            read.take(response, Position.trim_horizon())


def test_a_valid_aggregate_is_not_reported():
    aggregator = RecordAggregator()
    aggregator.add_user_record("u", b"fine")
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    response = Records.from_lists(seqs=["5"], keys=["k"], data=[blob], arrivals=[1_700_000_000.0])
    strict = ShardLimits(-1, -1, fail_on_corrupt_aggregate=True)
    read = BatchCut(PROXY.name, PROXY.spec.key, "shardId-0", Position.trim_horizon(), strict, None)
    read.take(response, Position.trim_horizon())
    assert read.cols.payloads().to_pylist() == [b"fine"]
