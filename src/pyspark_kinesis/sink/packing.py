"""The sink's `aggregate` mode: rows packed into KPL aggregated records, one stream of aggregates per
shard, before they reach the producer.

Kinesis bills and throttles per record (1,000 records/s per shard) as well as per byte, so small rows
cost far more calls and quota than their bytes. As the KPL does, rows are grouped by the shard their
hash key falls in (the explicit hash key, else the MD5 of the partition key, against the hash ranges
ListShards gives) and packed up to the record size limit; the aggregated record is put with its first
row's partition key and hash key, so it lands in that shard. A reader that de-aggregates (this
project's source, the KCL, aws-kinesis-agg) gets the rows back with their own partition keys.

After a reshard the shard map a task listed is stale: an aggregate lands in the shard that now holds
its first row, and the KCL (and this project's source) drop, on read, every user record of it whose
hash key lies outside that shard's range. So, as the KPL does, every PutRecords result's ShardId is
checked: an aggregate that landed in another shard than it was packed for makes the task list the
shards again and re-send the user records the landed shard does not hold, packed for their shards.

Two things keep that repair from doing harm (issue #61 items 4 and 5):
- Per-key order. The re-sent user records must reach readers before the later records of their keys:
  the producer holds back what follows a misplaced aggregate in its order (`producing`), and those
  entries are packed again after the re-sent records, with the fresh map.
- Memory. The repair happens after every flush of the producer's buffer, not once at the task's end:
  what is held for it is part of that buffer, and rows added after it are packed with the fresh map.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from ..errors import SinkWriteError
from ..kpl import Aggregate
from ..model import ShardInfo, effective_hash_key
from .producing import Entry

log = logging.getLogger(__name__)
# Shard-map refreshes one flush may take while aggregates keep landing in other shards (a reshard
# at most moves a map on once or twice during a flush; more means the map cannot be trusted).
MISPLACED_ROUNDS = 5


def hash_of(partition_key: str, hash_key: str | None) -> int:
    """Where Kinesis puts a record (`model.effective_hash_key`); the sink refused rows whose explicit
    hash key is no such number before they get here (`producing.invalid_reason`)."""
    where = effective_hash_key(partition_key, hash_key)
    if where is None:
        raise ValueError(f"explicit hash key {hash_key!r} is not a number below 2^128")
    return where


class ShardRouter:
    """Hash key -> the open shard whose range holds it."""

    def __init__(self, shards: list[ShardInfo]) -> None:
        self.ranges = {s.shard_id: (s.start_hash, s.end_hash) for s in shards}
        open_shards = sorted((s for s in shards if not s.closed), key=lambda s: s.start_hash)
        if not open_shards:
            raise ValueError("the stream lists no open shard")
        self.starts = [s.start_hash for s in open_shards]
        self.ids = [s.shard_id for s in open_shards]

    def shard_for(self, hash_value: int) -> str:
        return self.ids[max(0, bisect.bisect_right(self.starts, hash_value) - 1)]


class Sink(Protocol):
    auto_flush: bool

    @property
    def full(self) -> bool: ...

    def add(self, entry: Entry) -> None: ...

    def flush(self) -> None: ...

    def take_misplaced(self) -> list[tuple[Entry, str]]: ...

    def take_held(self) -> list[Entry]: ...


class Aggregator:
    """Sits in front of the producer: `add` packs, `flush` sends what is packed and flushes."""

    def __init__(self, producer: Sink, limit: int, router_for: Callable[[str, bool], ShardRouter]) -> None:
        """`router_for(stream, every)`: the stream's shard map from a listing of its open shards, or
        with `every` of all its shards (closed ones too: where an aggregate landed may close again)."""
        self.producer = producer
        producer.auto_flush = False  # (the aggregator flushes: each flush is followed by its repair)
        self.limit = limit
        self.router_for = router_for
        self._routers: dict[str, ShardRouter] = {}
        # (stream, shard) -> aggregate, its first row, its user records
        self._open: dict[tuple[str, str], tuple[Aggregate, Entry, list[tuple[str, str | None, bytes]]]] = {}
        self.user_records = 0
        self.aggregates = 0
        self.resent = 0  # user records re-sent because their aggregate landed in another shard
        self.repacked = 0  # entries held back behind a misplaced aggregate and packed again
        self._sending = False

    def add(self, entry: Entry) -> None:
        router = self._routers.get(entry.stream)
        if router is None:
            router = self._routers[entry.stream] = self.router_for(entry.stream, False)
        slot = (entry.stream, router.shard_for(hash_of(entry.partition_key, entry.hash_key)))
        member = (entry.partition_key, entry.hash_key, entry.data)
        current = self._open.get(slot)
        if current is not None and not current[0].add(*member):
            self._emit(slot)
            current = None
        if current is None:
            agg = Aggregate(self.limit)
            agg.add(*member)
            self._open[slot] = (agg, entry, [member])
        else:
            current[2].append(member)
        self.user_records += 1
        if self.producer.full and not self._sending:
            self._send(final=False)

    def _emit(self, slot: tuple[str, str]) -> None:
        agg, first, members = self._open.pop(slot)
        self.aggregates += 1
        order = f"\0shard {slot[1]}"  # preserveOrder: a shard's records, aggregated or not, stay in order
        if agg.count == 1:  # nothing to gain: the row goes as it is, readable by any consumer
            self.producer.add(replace(first, order=order))
            return
        hash_key = str(hash_of(first.partition_key, first.hash_key))
        self.producer.add(
            Entry(
                first.stream,
                agg.encode(),
                agg.partition_key,
                hash_key,
                first.row,
                order,
                shard=slot[1],
                members=tuple(members),
            )
        )

    def flush(self) -> None:
        """Send what is packed, and mend what landed where it does not belong (see `_send`)."""
        self._send(final=True)

    def _send(self, *, final: bool) -> None:
        """Flush the producer (at the end, with every open aggregate first); then re-send the user
        records of aggregates that landed where they do not belong and pack again what was held back
        behind them, both with a fresh shard map, until nothing lands elsewhere (a bounded number of
        rounds). Called whenever the producer's buffer is full, not only at the task's end: the repair
        must come before later rows of the same keys, and hold no more than one buffer."""
        self._sending = True
        try:
            for round_ in range(MISPLACED_ROUNDS):
                if final or round_ > 0:
                    for slot in list(self._open):
                        self._emit(slot)
                self.producer.flush()
                misplaced, held = self.producer.take_misplaced(), self.producer.take_held()
                if not misplaced and not held:
                    return
                self._resend(misplaced, held)
        finally:
            self._sending = False
        raise SinkWriteError(
            f"aggregates kept landing in other shards than they were packed for after {MISPLACED_ROUNDS} "
            "refreshes of the shard map (a stream being resharded over and over?). Their user records outside "
            "those shards would be dropped by KCL readers: the task fails and Spark retries it. Set "
            "aggregate=false while resharding."
        )

    def _resend(self, misplaced: list[tuple[Entry, str]], held: list[Entry] | None = None) -> None:
        """With a fresh map of the streams concerned: the user records of misplaced aggregates that the
        landed shard does not hold, then (after them, for per-key order) everything that was held back
        behind them, then the aggregates still open, all packed again."""
        held = held or []
        streams = {entry.stream for entry, _landed in misplaced} | {entry.stream for entry in held}
        for stream in streams:
            self._routers[stream] = self.router_for(stream, True)
        # Aggregates still open were packed with the stale map too, and hold rows added after everything
        # sent or held: they go last, packed again like the rest.
        stale = [self._open.pop(slot) for slot in list(self._open) if slot[0] in streams]
        for entry, landed in misplaced:
            span = self._routers[entry.stream].ranges.get(landed)
            outside = [
                m for m in entry.members if span is None or not span[0] <= hash_of(m[0], m[1]) <= span[1]
            ]
            log.info(
                "an aggregate of %d user records for shard %s of '%s' landed in %s (the shard map changed): "
                "%d of them re-sent to their shards",
                len(entry.members),
                entry.shard,
                entry.stream,
                landed,
                len(outside),
            )
            self._again(entry, outside)
            self.resent += len(outside)
        for entry in held:
            self._again(entry, list(entry.members) or [(entry.partition_key, entry.hash_key, entry.data)])
            self.repacked += 1
        for _agg, first, members in stale:
            self._again(first, members)

    def _again(self, entry: Entry, members: list[tuple[str, str | None, bytes]]) -> None:
        for partition_key, hash_key, data in members:
            self.add(Entry(entry.stream, data, partition_key, hash_key, entry.row))
            self.user_records -= 1  # (counted once, when first added)
