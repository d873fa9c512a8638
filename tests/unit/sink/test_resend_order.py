"""The aggregated sink's repair of aggregates a stale shard map put into the wrong shard (issue #61 items
4 and 5), with the real aggregator and producer against a stand-in service that places each record by
its effective hash key and a reader that reads each shard in order as the KCL does (de-aggregates, drops
the user records outside the shard's range):

- per-key order: before, the user records of a misplaced aggregate were re-sent after the whole flush,
  after later records of their keys from the same stale slot: a reader saw k's records as 2, 3, 1;
- memory: before, misplaced aggregates were held (with their user records) until the task's last flush,
  and the map was refreshed only there, so every later aggregate was packed stale and re-sent too.
"""

from __future__ import annotations

import random

import pytest

from pyspark_kinesis.kpl import Aggregate, deaggregate
from pyspark_kinesis.model import ShardInfo, effective_hash_key
from pyspark_kinesis.sink import producing
from pyspark_kinesis.sink.options import parse_sink_options
from pyspark_kinesis.sink.packing import Aggregator, ShardRouter
from pyspark_kinesis.sink.producing import Entry, Producer

TOP, MID = 2**128 - 1, 2**127
STALE = [ShardInfo("parent", None, None, 0, TOP, False)]
SPLIT = [
    ShardInfo("parent", None, None, 0, TOP, True),
    ShardInfo("low", "parent", None, 0, MID - 1, False),
    ShardInfo("high", "parent", None, MID, TOP, False),
]
RANGES = {"low": (0, MID - 1), "high": (MID, TOP)}


class Service:
    """PutRecords as Kinesis answers it after the split: each record lands in the shard holding its
    effective hash key; `shards` keeps each shard's records in arrival order."""

    def __init__(self) -> None:
        self.shards: dict[str, list[dict]] = {"low": [], "high": []}
        self.calls = 0
        self.user_records = 0

    def put(self, settings, stream, records):
        self.calls += 1
        results = []
        for record in records:
            where = effective_hash_key(record["PartitionKey"], record.get("ExplicitHashKey"))
            shard = "low" if where is not None and where < MID else "high"
            self.shards[shard].append(record)
            self.user_records += len(deaggregate(record["Data"]) or [None])
            results.append({"ShardId": shard, "SequenceNumber": str(len(self.shards[shard]))})
        return results

    def read_as_the_kcl(self) -> dict[str, list[bytes]]:
        """Each key's payloads as a reader of every shard in order sees them (misplaced ones dropped)."""
        per_key: dict[str, list[bytes]] = {}
        for shard, records in self.shards.items():
            low, high = RANGES[shard]
            for record in records:
                users = deaggregate(record["Data"]) or [
                    (record["PartitionKey"], record.get("ExplicitHashKey"), record["Data"])
                ]
                for key, explicit, data in users:
                    where = effective_hash_key(key, explicit)
                    if where is not None and low <= where <= high:
                        per_key.setdefault(key, []).append(data)
        return per_key


def keys_in(half: str, count: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        key = f"key-{rng.randrange(10**9)}"
        if (effective_hash_key(key, None) < MID) == (half == "low"):
            out.append(key)
    return out


def write(rows: list[Entry], service: Service, monkeypatch, buffer_records: int, limit: int, **options):
    monkeypatch.setattr(producing, "put_records", service.put)
    listings: list[bool] = []
    maps = iter([STALE] + [SPLIT] * 100)

    def router_for(stream: str, every: bool) -> ShardRouter:
        listings.append(every)
        return ShardRouter(next(maps))

    config = parse_sink_options({"streamName": "orders", "region": "us-east-1", **options})
    producer = Producer(config, buffer_records=buffer_records)
    aggregator = Aggregator(producer, limit, router_for)
    try:
        for row in rows:
            aggregator.add(row)
        aggregator.flush()
    finally:
        producer.close()
    return aggregator, listings


@pytest.mark.parametrize("seed", range(8))
def test_every_key_is_read_in_put_order_after_a_stale_map_sends_aggregates_to_the_wrong_shard(
    seed, monkeypatch
):
    rng = random.Random(seed)
    keys = keys_in("low", 6, rng) + keys_in("high", 6, rng)
    rows = [Entry("orders", f"{n:04d}".encode() * 4, rng.choice(keys), None, n) for n in range(400)]
    service = Service()
    write(
        rows,
        service,
        monkeypatch,
        buffer_records=20_000,
        limit=400,
        preserveOrder="true",
        maxConcurrentRequests="2",
    )
    expected: dict[str, list[bytes]] = {}
    for row in rows:
        expected.setdefault(row.partition_key, []).append(row.data)
    assert service.read_as_the_kcl() == expected


def test_the_example_of_the_issue_k2_k3_before_k1(monkeypatch):
    """Aggregates of three rows packed for the one stale shard: [h1, k1, h2] lands in `high` (its first
    row's), so k1 is misplaced and re-sent; [k2, h3, k3] lands in `low`. k1 must still be read first."""
    rng = random.Random(7)
    (k,) = keys_in("low", 1, rng)
    h = keys_in("high", 3, rng)
    rows = [
        Entry("orders", data, key, None, n)
        for n, (key, data) in enumerate(
            [(h[0], b"h1"), (k, b"k1"), (h[1], b"h2"), (k, b"k2"), (h[2], b"h3"), (k, b"k3")]
        )
    ]
    three = Aggregate(10**6)
    for row in rows[:3]:
        three.add(row.partition_key, None, row.data)
    service = Service()
    aggregator, _listings = write(
        rows, service, monkeypatch, buffer_records=20_000, limit=three.size, preserveOrder="true"
    )
    assert aggregator.resent == 1  # (k1: its aggregate landed in `high`)
    assert service.read_as_the_kcl()[k] == [b"k1", b"k2", b"k3"]


def test_the_repair_follows_every_flush_of_the_buffer_and_holds_no_more_than_it(monkeypatch):
    """200 rows a buffer: the first flush finds the map stale, lists the stream again and mends; every
    later aggregate is packed with the fresh map, so what is put is the rows and at most one buffer's
    worth again, not every aggregate a second time."""
    rng = random.Random(3)
    keys = keys_in("low", 20, rng) + keys_in("high", 20, rng)
    rows = [Entry("orders", f"{n:06d}".encode() + bytes(34), rng.choice(keys), None, n) for n in range(5000)]
    service = Service()
    aggregator, listings = write(
        rows, service, monkeypatch, buffer_records=10, limit=2000, preserveOrder="true"
    )
    assert listings == [False, True]  # listed anew at the first repair, not at the task's end only
    # (the buffer counts aggregates: 10 of up to ~40 rows each)
    assert aggregator.resent + aggregator.repacked * 40 <= 10 * 40
    assert service.user_records <= len(rows) + 10 * 40
    expected: dict[str, list[bytes]] = {}
    for row in rows:
        expected.setdefault(row.partition_key, []).append(row.data)
    assert service.read_as_the_kcl() == expected  # (every row once, each key in order)
