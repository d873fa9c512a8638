"""The sink's `aggregate` mode: rows packed into KPL aggregated records, one stream of aggregates per
shard, before they reach the producer.

Kinesis bills and throttles per record (1,000 records/s per shard) as well as per byte, so small rows
cost far more calls and quota than their bytes. As the KPL does, rows are grouped by the shard their
hash key falls in (the explicit hash key, else the MD5 of the partition key, against the hash ranges
ListShards gives) and packed up to the record size limit; the aggregated record is put with its first
row's partition key and hash key, so it lands in that shard. A reader that de-aggregates (this
project's source, the KCL, aws-kinesis-agg) gets the rows back with their own partition keys.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from ..kpl import Aggregate
from ..model import ShardInfo
from .producing import Entry


def hash_of(key: str, hash_key: str | None) -> int:
    """Where Kinesis puts a record: its explicit hash key, else the MD5 of its partition key."""
    if hash_key is not None:
        return int(hash_key)
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest(), "big")


class ShardRouter:
    """Hash key -> the open shard whose range holds it."""

    def __init__(self, shards: list[ShardInfo]) -> None:
        open_shards = sorted((s for s in shards if not s.closed), key=lambda s: s.start_hash)
        if not open_shards:
            raise ValueError("the stream lists no open shard")
        self.starts = [s.start_hash for s in open_shards]
        self.ids = [s.shard_id for s in open_shards]

    def shard_for(self, hash_value: int) -> str:
        return self.ids[max(0, bisect.bisect_right(self.starts, hash_value) - 1)]


class Sink(Protocol):
    def add(self, entry: Entry) -> None: ...

    def flush(self) -> None: ...


class Aggregator:
    """Sits in front of the producer: `add` packs, `flush` sends what is packed and flushes."""

    def __init__(self, producer: Sink, limit: int, router_for: Callable[[str], ShardRouter]) -> None:
        self.producer = producer
        self.limit = limit
        self.router_for = router_for
        self._routers: dict[str, ShardRouter] = {}
        self._open: dict[
            tuple[str, str], tuple[Aggregate, Entry]
        ] = {}  # (stream, shard) -> aggregate, first row
        self.user_records = 0
        self.aggregates = 0

    def add(self, entry: Entry) -> None:
        router = self._routers.get(entry.stream)
        if router is None:
            router = self._routers[entry.stream] = self.router_for(entry.stream)
        slot = (entry.stream, router.shard_for(hash_of(entry.key, entry.hash_key)))
        current = self._open.get(slot)
        if current is not None and not current[0].add(entry.key, entry.hash_key, entry.data):
            self._emit(slot)
            current = None
        if current is None:
            agg = Aggregate(self.limit)
            agg.add(entry.key, entry.hash_key, entry.data)
            self._open[slot] = (agg, entry)
        self.user_records += 1

    def _emit(self, slot: tuple[str, str]) -> None:
        agg, first = self._open.pop(slot)
        self.aggregates += 1
        order = f"\0shard {slot[1]}"  # preserveOrder: a shard's records, aggregated or not, stay in order
        if agg.count == 1:  # nothing to gain: the row goes as it is, readable by any consumer
            self.producer.add(replace(first, order=order))
            return
        hash_key = str(hash_of(first.key, first.hash_key))
        self.producer.add(Entry(first.stream, agg.encode(), agg.partition_key, hash_key, first.row, order))

    def flush(self) -> None:
        for slot in list(self._open):
            self._emit(slot)
        self.producer.flush()
