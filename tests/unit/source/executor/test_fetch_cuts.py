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

PROXY = SimpleNamespace(
    name="orders", spec=SimpleNamespace(resolved_arn="arn:aws:kinesis:us-east-1:1:stream/orders")
)


def records(rng: random.Random, count: int) -> Records:
    return Records.from_lists(
        seqs=[str(1000 + 7 * i) for i in range(count)],
        keys=[f"k{i % 5}" for i in range(count)],
        data=[bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(count)],
        arrivals=[1_700_000_000.0 + i * 0.01 for i in range(count)],
    )


def cut(path: str, batch: list[Records], limits: ShardLimits) -> tuple:
    read = BatchCut(PROXY.name, PROXY.spec.resolved_arn, "shardId-0", Position.trim_horizon(), limits, None)
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
        PROXY.name, PROXY.spec.resolved_arn, "shardId-0", Position.trim_horizon(), ShardLimits(1000, -1), None
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
            PROXY.name,
            PROXY.spec.resolved_arn,
            "shardId-0",
            Position.trim_horizon(),
            ShardLimits(-1, -1),
            None,
        )
        caplog.clear()
        read.take(response, Position.trim_horizon())
        assert read.cols.payloads().to_pylist() == [data], what  # never dropped
        assert "corrupt KPL aggregate" in caplog.text and "1001" in caplog.text, what
        strict = ShardLimits(-1, -1, fail_on_corrupt_aggregate=True)
        read = BatchCut(
            PROXY.name, PROXY.spec.resolved_arn, "shardId-0", Position.trim_horizon(), strict, None
        )
        with pytest.raises(CorruptRecordError, match="onCorruptAggregate=passThrough"):
            read.take(response, Position.trim_horizon())


def test_a_valid_aggregate_is_not_reported():
    aggregator = RecordAggregator()
    aggregator.add_user_record("u", b"fine")
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    response = Records.from_lists(seqs=["5"], keys=["k"], data=[blob], arrivals=[1_700_000_000.0])
    strict = ShardLimits(-1, -1, fail_on_corrupt_aggregate=True)
    read = BatchCut(PROXY.name, PROXY.spec.resolved_arn, "shardId-0", Position.trim_horizon(), strict, None)
    read.take(response, Position.trim_horizon())
    assert read.cols.payloads().to_pylist() == [b"fine"]


# -- replay bounds, cutoffs and columns, exactly (written against mutation testing) --------------------


def _page() -> Records:
    """Records 100 (plain), 200 (a KPL aggregate of three), 300 and 400 (plain)."""
    aggregator = RecordAggregator()
    for payload in (b"a0", b"a1", b"a2"):
        aggregator.add_user_record("agg-key", payload)
    blob = aggregator.clear_and_get().get_contents()[2]
    return Records.from_lists(
        seqs=["100", "200", "300", "400"],
        keys=["k100", "k200", "k300", "k400"],
        data=[b"r100", blob, b"r300", b"r400"],
        arrivals=[1_700_000_000.0, 1_700_000_001.0, 1_700_000_002.0, 1_700_000_003.0],
    )


def _plain_page() -> Records:
    return Records.from_lists(
        seqs=["100", "200", "300", "400"],
        keys=["k100", "k200", "k300", "k400"],
        data=[b"r100", b"r200", b"r300", b"r400"],
        arrivals=[1_700_000_000.0, 1_700_000_001.0, 1_700_000_002.0, 1_700_000_003.0],
    )


def _replay(page: Records, until: Position) -> BatchCut:
    read = BatchCut(
        "orders", "arn:orders", "shardId-000000000007", Position.trim_horizon(), ShardLimits(-1, -1), until
    )
    read.take(page, Position.trim_horizon())
    return read


@pytest.mark.parametrize(
    ("until", "payloads", "done"),
    [
        (Position.inside("200", 1), [b"r100", b"a0", b"a1"], True),  # reached exactly
        (Position.after("200"), [b"r100", b"a0", b"a1", b"a2"], True),
        (Position.after("150"), [b"r100"], True),  # a gap: the next record is beyond
        (Position.shard_end(), [b"r100", b"a0", b"a1", b"a2", b"r300", b"r400"], False),  # read to the end
    ],
)
def test_a_replay_stops_at_its_recorded_end(until, payloads, done):
    read = _replay(_page(), until)
    assert read.cols.payloads().to_pylist() == payloads
    assert (read.done_until, read.stop) == (done, done)


def test_a_replay_of_plain_records_stops_at_its_end_too():
    read = _replay(_plain_page(), Position.after("200"))
    assert read.cols.payloads().to_pylist() == [b"r100", b"r200"] and read.done_until


def test_the_per_record_path_fills_every_column():
    read = _replay(_page(), Position.after("200"))
    rows = read.cols.to_arrow().to_pylist()
    assert [(r["partitionKey"], r["sequenceNumber"], r["subSequenceNumber"]) for r in rows] == [
        ("k100", "100", 0),
        ("agg-key", "200", 0),
        ("agg-key", "200", 1),
        ("agg-key", "200", 2),
    ]
    assert {(r["streamName"], r["shardId"], r["streamArn"]) for r in rows} == {
        ("orders", "shardId-000000000007", "arn:orders")
    }
    assert [r["approximateArrivalTimestamp"].timestamp() for r in rows] == [1_700_000_000.0] + [
        1_700_000_001.0
    ] * 3
    assert read.n_bytes == len(b"r100") + 3 * 2


def test_a_page_whose_first_record_is_past_the_cutoff_gives_nothing():
    read = BatchCut(
        "orders",
        "arn",
        "shardId-0",
        Position.trim_horizon(),
        ShardLimits(-1, -1, cutoff_ms=1_699_999_999_000),
        None,
    )
    read.take(_plain_page(), Position.trim_horizon())
    assert len(read.cols) == 0 and read.reached_cutoff and read.stop


def test_a_byte_limit_met_exactly_takes_the_last_record():
    limits = ShardLimits(max_records=-1, max_bytes=len(b"r100") + 3 * 2)  # r100 and the aggregate, exactly
    read = BatchCut("orders", "arn", "shardId-0", Position.trim_horizon(), limits, None)
    read.take(_page(), Position.trim_horizon())
    assert read.cols.payloads().to_pylist() == [b"r100", b"a0", b"a1", b"a2"] and read.stop


def test_what_a_corrupt_aggregate_says(caplog):
    [(what, data)] = list(corrupt_aggregates().items())[:1]
    response = Records.from_lists(seqs=["1001"], keys=["k"], data=[data], arrivals=[1_700_000_000.0])
    read = BatchCut(
        "orders", "arn", "shardId-000000000002", Position.trim_horizon(), ShardLimits(-1, -1), None
    )
    read.take(response, Position.trim_horizon())
    where = "Kinesis stream 'orders', shard shardId-000000000002, sequence number 1001"
    assert caplog.messages == [
        f"{where}: corrupt KPL aggregate (bad checksum, truncated or malformed): passed through as one record"
    ], what
    strict = ShardLimits(-1, -1, fail_on_corrupt_aggregate=True)
    read = BatchCut("orders", "arn", "shardId-000000000002", Position.trim_horizon(), strict, None)
    with pytest.raises(CorruptRecordError) as caught:
        read.take(response, Position.trim_horizon())
    assert str(caught.value) == (
        f"{where}: the record starts like a KPL aggregate but is corrupt (bad checksum, truncated or "
        "malformed). Set onCorruptAggregate=passThrough to read such records as plain records."
    )


def test_a_batch_read_that_meets_its_ending_position_on_a_pages_last_record_is_done_at_once():
    limits = ShardLimits(-1, -1, end_at=Position.after("400"))
    read = BatchCut("orders", "arn", "shardId-0", Position.trim_horizon(), limits, None)
    read.take(_plain_page(), Position.trim_horizon())
    assert read.cols.payloads().to_pylist() == [b"r100", b"r200", b"r300", b"r400"]
    assert read.reached_cutoff and read.stop  # (no further call for a page that can only be past it)


def test_a_read_resumed_inside_a_record_drops_what_was_consumed_also_when_the_record_is_plain():
    page = Records.from_lists(
        seqs=["200", "300"], keys=["k200", "k300"], data=[b"r200", b"r300"], arrivals=[1.0, 2.0]
    )
    read = BatchCut("orders", "arn", "shardId-0", Position.inside("200", 0), ShardLimits(-1, -1), None)
    read.take(page, Position.inside("200", 0))
    assert read.cols.payloads().to_pylist() == [b"r300"]


def test_a_records_place_is_its_explicit_hash_key_else_the_md5_of_its_key_and_a_range_holds_its_bounds():
    from pyspark_kinesis.model import effective_hash_key
    from pyspark_kinesis.source.executor.cutting import misplaced

    assert effective_hash_key("a", None) == int(hashlib.md5(b"a").hexdigest(), 16)
    assert effective_hash_key("a", "") == effective_hash_key("a", None)
    assert effective_hash_key("a", "42") == 42
    assert effective_hash_key("a", "12x") is None  # (not a number: nothing to place it by)
    assert not misplaced("a", "12x", (0, 1))
    assert [misplaced("a", str(where), (10, 20)) for where in (9, 10, 20, 21)] == [True, False, False, True]
    assert not misplaced("a", "5", None)
