"""What one shard read records as its end (src/pyspark_kinesis/source/executor/shard_read.py `_end`), field
by field, and the words of its warning about KPL user records outside the shard's hash key range; and
what `fetch_shard` (the backfill's and the tests' polling read) tells its read. Pages are scripted."""

from __future__ import annotations

import logging
from dataclasses import replace

from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import shard_read
from pyspark_kinesis.source.executor.pages import Page
from pyspark_kinesis.source.executor.shard_read import ShardRead, fetch_shard
from pyspark_kinesis.source.state.offsets import ShardEnd
from tests.unit.scripted import SHARD, SPEC, FakeProxy, ReadRecorder, ScriptedPages, context, page

HIGH_KEY = str(2**127 + 5)  # an explicit hash key in the upper half of the key space


def _aggregate_page(behind_ms: int = 0) -> Page:
    """One aggregate of three user records, the middle one's hash key in the upper half."""
    aggregator = RecordAggregator()
    aggregator.add_user_record("a", b"one", str(1))
    aggregator.add_user_record("b", b"two", HIGH_KEY)
    aggregator.add_user_record("c", b"three", str(2))
    pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    records = Records.from_lists(["100"], [pk], [blob], [1.0])
    return Page(records, behind_ms=behind_ms)


class Holding(ScriptedPages):
    """Keeps its continuation "elsewhere": `keep` names a holder."""

    def keep(self, position: Position) -> str:
        super().keep(position)
        return "10.0.0.9:4000@7"


def test_the_end_records_counts_bytes_the_holder_when_and_the_dropped_records(monkeypatch, caplog):
    monkeypatch.setattr(shard_read.time, "time", lambda: 1_700_000_123.4567)
    ctx = context()
    ctx = replace(ctx, limits=replace(ctx.limits, hash_range=(0, 2**127 - 1)))
    source = Holding([_aggregate_page(), page()])
    with caplog.at_level(logging.WARNING, logger=shard_read.__name__):
        _cols, end = ShardRead(source, ctx, Position.trim_horizon()).run()
    assert (end.records, end.misplaced, end.first) == (2, 1, ("100", 0))
    assert end.bytes == len(b"one") + len(b"three")
    assert end.holder == "10.0.0.9:4000@7"
    assert end.read_at_ms == 1_700_000_123_456
    assert [r.getMessage() for r in caplog.records if r.name == shard_read.__name__] == [
        f"Kinesis stream 'orders', shard {SHARD}: 1 user records of KPL aggregates lie outside the shard's "
        "hash key range and were dropped, as the KCL drops them (a KPL producer's stale shard map puts them "
        "there after a reshard, and it re-sends them to the shard that holds their keys)"
    ]


def test_a_read_without_a_holder_records_none(monkeypatch):
    _cols, end = ShardRead(
        ScriptedPages([page([1, 2], behind_ms=0)]), context(), Position.trim_horizon()
    ).run()
    assert end.holder == "" and end.records == 2 and end.bytes == 2


def test_fetch_shard_reads_by_polling_and_tells_the_read_its_batch_and_recorded_end(monkeypatch):
    reads = ReadRecorder(monkeypatch, [shard_read], lambda _context, _start: (None, None))
    proxy, limits = FakeProxy(SPEC), context().limits
    expect = ShardEnd(Position.trim_horizon(), Position.after("9"), records=3)
    fetch_shard(proxy, SHARD, Position.trim_horizon(), limits)
    fetch_shard(proxy, SHARD, Position.after("2"), limits, expect, False, batch=4, tip_ms=77)
    first, second = reads.calls
    assert first["source"] == "polling" and first["start"] == Position.trim_horizon()
    assert (first["expect"], first["fail"], first["tip_ms"]) == (None, True, 0)  # (the defaults)
    context_of = first["context"]
    assert (context_of.proxy, context_of.shard, context_of.limits) == (proxy, SHARD, limits)
    assert (context_of.until, context_of.batch) == (None, -1)
    assert (second["start"], second["expect"], second["fail"], second["tip_ms"]) == (
        Position.after("2"),
        expect,
        False,
        77,
    )
    assert (second["context"].until, second["context"].batch) == (Position.after("9"), 4)
