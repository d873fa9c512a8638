"""KPL aggregates written by the sink's encoder, read back by aws-kinesis-agg (the reference, a
protobuf parser) and by the source's own de-aggregation; the size accounting is exact."""

from __future__ import annotations

import base64
import doctest
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_kinesis import kpl
from pyspark_kinesis.kpl import Aggregate, deaggregate

keys = st.text(min_size=1, max_size=20)
hash_keys = st.one_of(st.none(), st.integers(min_value=0, max_value=2**128 - 1).map(str))
records = st.lists(st.tuples(keys, hash_keys, st.binary(max_size=300)), min_size=1, max_size=40)


def reference(data: bytes) -> list[tuple[str, bytes]]:
    """aws-kinesis-agg's reading of one Kinesis record (its boto3-format path; it hands payloads back
    in base64, as Lambda events carry them)."""
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    record = {"SequenceNumber": "1", "PartitionKey": "p", "ApproximateArrivalTimestamp": 0, "Data": data}
    users = iter_deaggregate_records([record], data_format="Boto3")
    return [(u["kinesis"]["partitionKey"], base64.b64decode(u["kinesis"]["data"])) for u in users]


@given(records)
def test_what_is_written_reads_back_the_same_everywhere(rows):
    agg = Aggregate(limit=10**7)
    for key, hash_key, data in rows:
        assert agg.add(key, hash_key, data)
    encoded = agg.encode()
    assert deaggregate(encoded) == rows
    assert reference(encoded) == [(k, d) for k, _h, d in rows]
    assert len(encoded) + len(agg.partition_key.encode()) == agg.size
    assert agg.partition_key == rows[0][0]


@given(records, st.integers(min_value=60, max_value=3000))
def test_the_limit_is_never_passed_and_only_a_lone_record_may_pass_it(rows, limit):
    batches: list[Aggregate] = [Aggregate(limit)]
    for key, hash_key, data in rows:
        if not batches[-1].add(key, hash_key, data):
            batches.append(Aggregate(limit))
            assert batches[-1].add(key, hash_key, data)
    read = []
    for agg in batches:
        encoded = agg.encode()
        assert agg.size == len(encoded) + len(agg.partition_key.encode())
        assert agg.size <= limit or agg.count == 1
        read += deaggregate(encoded)
    assert read == rows


def test_the_digest_covers_the_protobuf():
    agg = Aggregate(limit=1000)
    agg.add("k", None, b"payload")
    encoded = agg.encode()
    assert encoded[-16:] == hashlib.md5(encoded[4:-16]).digest()
    assert encoded[:4] == kpl.MAGIC


def test_doctests():
    assert doctest.testmod(kpl).failed == 0


class Collected:
    full = False  # (a buffer that never fills: only `flush` sends)

    def __init__(self) -> None:
        self.entries: list = []
        self.flushes = 0
        self.auto_flush = True

    def take_held(self) -> list:
        return []

    def add(self, entry) -> None:
        self.entries.append(entry)

    def flush(self) -> None:
        self.flushes += 1

    def take_misplaced(self) -> list:
        return []


def four_shards():
    from pyspark_kinesis.model import ShardInfo
    from pyspark_kinesis.sink.packing import ShardRouter

    quarter = 2**126
    shards = [ShardInfo(f"s{n}", None, None, n * quarter, (n + 1) * quarter - 1, False) for n in range(4)]
    closed = ShardInfo("old", None, None, 0, 2**128 - 1, True)
    return ShardRouter([closed, *shards])


def test_rows_are_packed_per_shard_and_each_aggregate_lands_where_its_rows_belong():
    from pyspark_kinesis.sink.packing import Aggregator, hash_of
    from pyspark_kinesis.sink.producing import Entry

    router = four_shards()
    out = Collected()
    agg = Aggregator(out, 1000, lambda stream, every: router)
    rows = [Entry("s", f"payload-{n}".encode() * 3, f"key-{n % 37}", None, n) for n in range(400)]
    for row in rows:
        agg.add(row)
    agg.flush()
    assert out.flushes == 1 and agg.user_records == 400
    back = []
    for entry in out.entries:
        users = deaggregate(entry.data) or [(entry.partition_key, entry.hash_key, entry.data)]
        shard = router.shard_for(
            int(entry.hash_key) if entry.hash_key else hash_of(entry.partition_key, None)
        )
        assert {router.shard_for(hash_of(k, h)) for k, h, _d in users} == {shard}  # one shard per aggregate
        assert entry.size <= 1000
        back += [(k, d) for k, _h, d in users]
    assert sorted(back) == sorted((r.partition_key, r.data) for r in rows)
    assert len(out.entries) < 400 // 10  # packed, not one call entry per row
    # Per key, order is kept: rows of a key go to one shard, and each shard's aggregates are emitted in order.
    per_key: dict[str, list[bytes]] = {}
    for k, d in back:
        per_key.setdefault(k, []).append(d)
    for key, payloads in per_key.items():
        assert payloads == [r.data for r in rows if r.partition_key == key]


def test_a_lone_row_goes_as_it_is_and_explicit_hash_keys_route():
    from pyspark_kinesis.sink.packing import Aggregator
    from pyspark_kinesis.sink.producing import Entry

    out = Collected()
    agg = Aggregator(out, 1000, lambda stream, every: four_shards())
    agg.add(Entry("s", b"only", "k", str(3 * 2**126 + 5), 0))
    agg.flush()
    assert out.entries[0].data == b"only" and out.entries[0].hash_key == str(3 * 2**126 + 5)


# -- exact entries (written against mutation testing: the tests above check content, not these fields) -


def test_an_aggregate_entry_carries_its_first_rows_stream_key_hash_row_and_shard_order():
    from pyspark_kinesis.sink.packing import Aggregator, hash_of
    from pyspark_kinesis.sink.producing import Entry

    out = Collected()
    streams: list[str] = []

    def router_for(stream: str, every: bool):
        streams.append(stream)
        return four_shards()

    agg = Aggregator(out, 10_000, router_for)
    explicit = str(2**126 + 7)  # shard s1
    agg.add(Entry("orders", b"a", "k-a", explicit, 3))
    agg.add(Entry("orders", b"b", "k-b", str(2**126 + 9), 4))
    agg.add(Entry("orders", b"c", "k-c", None, 5))  # routed by the MD5 of its key
    agg.add(Entry("audit", b"d", "k-d", explicit, 6))
    agg.flush()
    assert streams == ["orders", "audit"]  # one router per stream, asked once
    assert agg.aggregates == len(out.entries) and agg.user_records == 4
    by_rows = {entry.row: entry for entry in out.entries}
    first = by_rows[3]
    assert (first.stream, first.partition_key, first.hash_key, first.order) == (
        "orders",
        "k-a",
        explicit,
        "\0shard s1",
    )
    assert deaggregate(first.data) == [("k-a", explicit, b"a"), ("k-b", str(2**126 + 9), b"b")]
    lone = by_rows[5]  # alone in its shard: sent as it is, still ordered by its shard
    shard = four_shards().shard_for(hash_of("k-c", None))
    assert (lone.stream, lone.data, lone.partition_key, lone.hash_key, lone.order) == (
        "orders",
        b"c",
        "k-c",
        None,
        f"\0shard {shard}",
    )
    assert by_rows[6].stream == "audit" and by_rows[6].data == b"d" and by_rows[6].order == "\0shard s1"


def test_an_aggregate_without_explicit_keys_lands_by_its_first_keys_md5():
    from pyspark_kinesis.sink.packing import Aggregator, hash_of
    from pyspark_kinesis.sink.producing import Entry

    out = Collected()
    agg = Aggregator(out, 10_000, lambda stream, every: four_shards())
    router = four_shards()
    keys = [k for k in (f"key-{n}" for n in range(50)) if router.shard_for(hash_of(k, None)) == "s2"][:3]
    for row, key in enumerate(keys):
        agg.add(Entry("s", key.encode(), key, None, row))
    agg.flush()
    [entry] = out.entries
    assert entry.partition_key == keys[0] and entry.hash_key == str(hash_of(keys[0], None)) and entry.row == 0
    assert hash_of(keys[0], None) == int.from_bytes(hashlib.md5(keys[0].encode()).digest(), "big")


def test_the_router_takes_open_shards_by_range_start_and_refuses_a_stream_without_any():
    import pytest

    from pyspark_kinesis.model import ShardInfo
    from pyspark_kinesis.sink.packing import ShardRouter

    router = four_shards()
    quarter = 2**126
    assert [router.shard_for(h) for h in (0, quarter - 1, quarter, 2 * quarter, 4 * quarter - 1)] == [
        "s0",
        "s0",
        "s1",
        "s2",
        "s3",
    ]
    with pytest.raises(ValueError, match=r"^the stream lists no open shard$"):
        ShardRouter([ShardInfo("old", None, None, 0, 2**128 - 1, True)])


def test_an_aggregate_that_lands_in_another_shard_has_its_misplaced_user_records_sent_again(monkeypatch):
    """A task's shard map is stale (one shard; the stream was split in two meanwhile). Every aggregate
    lands in the child holding its first row; the KCL drops the user records of an aggregate outside
    the landed shard's range. Read back as the KCL reads (aws-kinesis-agg opens the aggregates, the
    effective hash key computed here as the KCL computes it), every row arrives exactly once."""
    import hashlib

    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    from pyspark_kinesis.model import ShardInfo
    from pyspark_kinesis.sink import producing
    from pyspark_kinesis.sink.options import parse_sink_options
    from pyspark_kinesis.sink.packing import Aggregator, ShardRouter
    from pyspark_kinesis.sink.producing import Entry, Producer

    top, mid = 2**128 - 1, 2**127
    stale = [ShardInfo("parent", None, None, 0, top, False)]
    split = [
        ShardInfo("parent", None, None, 0, top, True),
        ShardInfo("low", "parent", None, 0, mid - 1, False),
        ShardInfo("high", "parent", None, mid, top, False),
    ]
    ranges = {"low": (0, mid - 1), "high": (mid, top)}
    landed: dict[str, list[dict]] = {"low": [], "high": []}

    def kcl_hash(key: str, explicit: str | None) -> int:
        return int(explicit) if explicit else int.from_bytes(hashlib.md5(key.encode()).digest(), "big")

    def put(settings, stream, records):  # the service: a record lands in the shard holding its hash key
        results = []
        for record in records:
            shard = "low" if kcl_hash(record["PartitionKey"], record.get("ExplicitHashKey")) < mid else "high"
            landed[shard].append(record)
            results.append({"ShardId": shard, "SequenceNumber": str(len(landed[shard]))})
        return results

    monkeypatch.setattr(producing, "put_records", put)
    maps = iter([stale, split, split])
    listings: list[bool] = []

    def router_for(stream: str, every: bool) -> ShardRouter:
        listings.append(every)
        return ShardRouter(next(maps))

    config = parse_sink_options({"streamName": "orders", "region": "us-east-1"})
    producer = Producer(config)
    aggregator = Aggregator(producer, 50_000, router_for)
    rows = {f"key-{n}": f"row-{n}".encode() for n in range(300)}
    for n, (key, data) in enumerate(rows.items()):
        aggregator.add(Entry("orders", data, key, None, n))
    aggregator.flush()
    producer.close()

    kept: list[tuple[str, bytes]] = []
    for shard, records in landed.items():
        low, high = ranges[shard]
        boto3_records = [
            {"SequenceNumber": str(i), "PartitionKey": r["PartitionKey"], "Data": r["Data"],
             "ApproximateArrivalTimestamp": 0, "ExplicitHashKey": r.get("ExplicitHashKey")}
            for i, r in enumerate(records)
        ]  # fmt: skip
        for user in iter_deaggregate_records(boto3_records, data_format="Boto3"):
            key = user["kinesis"]["partitionKey"]
            explicit = user["kinesis"].get("explicitHashKey")
            if low <= kcl_hash(key, explicit) <= high:  # the KCL's rule: others are dropped
                kept.append((key, base64.b64decode(user["kinesis"]["data"])))
    assert sorted(kept) == sorted(rows.items()), "rows lost or doubled for a KCL reader"
    assert listings == [False, True] and aggregator.resent > 0
    assert aggregator.user_records == len(rows)


def test_a_misplaced_aggregate_is_said_and_only_its_records_outside_the_landed_shard_go_again(caplog):
    """The landed shard's range decides: user records inside it stay (the KCL keeps them), those outside
    are packed again with a map of every shard; a shard the map does not know keeps none."""
    import logging

    from pyspark_kinesis.sink import packing
    from pyspark_kinesis.sink.packing import Aggregator, hash_of
    from pyspark_kinesis.sink.producing import Entry

    router = four_shards()
    keys = [f"key-{n}" for n in range(200)]
    low = [k for k in keys if hash_of(k, None) < 2**126][:3]  # in s0's range
    high = [k for k in keys if hash_of(k, None) >= 2**127][:2]  # in s2/s3's
    members = tuple((k, None, k.encode()) for k in low + high)
    entry = Entry("orders", b"agg", low[0], None, 7, shard="s9", members=members)
    out = Collected()
    listed: list[bool] = []
    agg = Aggregator(out, 1000, lambda stream, every: listed.append(every) or router)
    with caplog.at_level(logging.INFO, logger=packing.__name__):
        agg._resend([(entry, "s0")])
    assert listed == [True] and agg.resent == 2
    assert caplog.messages == [
        "an aggregate of 5 user records for shard s9 of 'orders' landed in s0 (the shard map changed): 2 of them "
        "re-sent to their shards"
    ]
    agg.flush()
    sent = [
        (k, d) for e in out.entries for k, _h, d in deaggregate(e.data) or [(e.partition_key, None, e.data)]
    ]
    assert sorted(sent) == sorted((k, k.encode()) for k in high)
    assert all(e.row == 7 for e in out.entries) and agg.user_records == 0  # counted when first added
    agg._resend([(entry, "unknown")])
    assert agg.resent == 2 + 5


def test_the_landed_shards_bounds_hold_records_and_a_re_sent_one_keeps_its_explicit_hash_key():
    from pyspark_kinesis.sink.packing import Aggregator
    from pyspark_kinesis.sink.producing import Entry

    router = four_shards()
    low, high = router.ranges["s1"]  # (the shard the aggregate landed in)
    members = (
        ("a", str(low), b"at the low bound"),
        ("b", str(high), b"at the high bound"),
        ("c", str(high + 1), b"just above"),
        ("d", str(low - 1), b"just below"),
    )
    entry = Entry("orders", b"agg", "a", None, 7, shard="s9", members=members)
    out = Collected()
    asked: list[tuple[str, bool]] = []
    agg = Aggregator(out, 1000, lambda stream, every: asked.append((stream, every)) or router)
    agg._resend([(entry, "s1")])
    agg.flush()
    assert asked == [("orders", True)] and agg.resent == 2
    sent = {(e.partition_key, e.hash_key, e.data) for e in out.entries}
    assert sent == {("c", str(high + 1), b"just above"), ("d", str(low - 1), b"just below")}


def test_aggregates_that_keep_landing_elsewhere_fail_the_task_after_a_few_rounds():
    from pyspark_kinesis.errors import SinkWriteError
    from pyspark_kinesis.sink import packing
    from pyspark_kinesis.sink.packing import Aggregator
    from pyspark_kinesis.sink.producing import Entry

    class Misplacing(Collected):
        def take_misplaced(self) -> list:
            return [(self.entries[-1], "s1")]

    router = four_shards()
    out = Misplacing()
    listed: list[bool] = []
    agg = Aggregator(out, 1000, lambda stream, every: listed.append(every) or router)
    agg.add(Entry("orders", b"x", "k", None, 0))
    with pytest.raises(SinkWriteError) as failed:
        agg.flush()
    assert out.flushes == packing.MISPLACED_ROUNDS and listed == [False] + [True] * packing.MISPLACED_ROUNDS
    assert str(failed.value) == (
        f"aggregates kept landing in other shards than they were packed for after {packing.MISPLACED_ROUNDS} "
        "refreshes of the shard map (a stream being resharded over and over?). Their user records outside "
        "those shards would be dropped by KCL readers: the task fails and Spark retries it. Set "
        "aggregate=false while resharding."
    )
