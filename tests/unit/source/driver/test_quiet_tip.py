"""Quiet time is still time: while a stream idles no batch is planned, so the tip a read last found
(`ShardState.tip_ms`, what spares a resume position that aged out while the shard was at its tip) is
renewed by the driver's looks, in the next offset and under metadataPath for a restart, and only along
an unbroken chain (a look after the query was down for longer than the retention proves nothing).

Issue #61 item 1: before, only recorded batch ends renewed it, and the first record after a quiet spell
longer than the retention failed the query with a data loss that did not happen."""

from __future__ import annotations

from pyspark_kinesis.aws.tip_look import TipAnswer
from pyspark_kinesis.model import MIN_RETENTION_MS, Position, ShardRef, unaged
from pyspark_kinesis.source.driver.ledger import QUIET_NOTE_EVERY_MS
from pyspark_kinesis.source.state.batch_log import QUIET_PREFIX, batch_folder
from pyspark_kinesis.source.state.offsets import SourceOffset
from tests.unit.planner_fakes import Harness, arn, one_stream, read

A = arn("a")
HOUR = 3600 * 1000
S0 = ShardRef(A, "s0")


def idle_after_first_batch(h: Harness) -> SourceOffset:
    """Batch 0 read 3 records of each shard, batch 1 nothing more (both shards at the tip after
    sequence number 1003, idle); returns batch 1's offset."""
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    end = Position.after("1003")
    h.run(
        first,
        {
            (A, s): read(Position.trim_horizon(), 3, tip=True, at_ms=h.clock.now, end=end)
            for s in ("s0", "s1")
        },
    )
    second = planner.next_offset(first, None, None)
    assert second.batch == 1
    h.run(second, {(A, s): read(end, 0, tip=True, at_ms=h.clock.now) for s in ("s0", "s1")})
    return second


def quiet_spell(h: Harness, planner, start: SourceOffset, hours: int) -> None:
    """Triggers every 10 minutes for `hours`, each finding nothing new (no batch)."""
    for _trigger in range(hours * 6):
        h.clock.now += 10 * 60 * 1000
        assert planner.next_offset(start, None, None) is start


def test_the_looks_of_an_idle_query_renew_the_tip_in_the_next_offset():
    h = one_stream(idlePollIntervalMs="500")
    first = idle_after_first_batch(h)
    read_at = h.clock.now
    planner = h.planner()
    planner.next_offset(first, None, None)
    quiet_spell(h, planner, first, hours=30)  # longer than the 24 h retention
    h.kinesis.tips = {"s0": TipAnswer(True)}  # the first record after the weekend
    h.clock.now += 10 * 60 * 1000
    second = planner.next_offset(first, None, None)
    assert second.batch == 2 and list(second.tasks().values()) == [[S0]]
    tip = second.state(S0).tip_ms
    assert not unaged(read_at, h.clock.now, MIN_RETENTION_MS)  # what the offset said before: a loss
    assert unaged(tip, h.clock.now, MIN_RETENTION_MS)  # the last look that found nothing
    assert tip == h.clock.now - 10 * 60 * 1000  # the look before this trigger's, which found the record
    assert second.state(ShardRef(A, "s1")).tip_ms == h.clock.now  # (s1 idles on, renewed by this look)


def test_a_restart_after_a_quiet_spell_knows_the_tip_from_the_note_under_metadata_path():
    h = one_stream(idlePollIntervalMs="500")
    first = idle_after_first_batch(h)
    planner = h.planner()
    quiet_spell(h, planner, first, hours=30)
    notes = [k for k in h.store.data if k.startswith(batch_folder(first.token, 1) + "/" + QUIET_PREFIX)]
    assert len(notes) == 1  # the newest only, renewed every QUIET_NOTE_EVERY_MS
    last_look = h.clock.now
    h.clock.now += 5 * 60 * 1000  # the driver is down five minutes, a record arrives meanwhile
    h.kinesis.tips = {"s0": TipAnswer(True)}
    restarted = h.planner()
    second = restarted.next_offset(first, None, None)
    assert second.batch == 2
    assert last_look - second.state(S0).tip_ms <= QUIET_NOTE_EVERY_MS
    assert unaged(second.state(S0).tip_ms, h.clock.now, MIN_RETENTION_MS)


def test_a_look_after_the_query_was_down_longer_than_the_retention_does_not_renew_the_tip():
    """Records that arrived while the query was down may have aged out since: a look finds nothing after
    the position either way, so the chain of renewals is broken and a read must judge the loss (the
    shard is read without a look)."""
    h = one_stream(idlePollIntervalMs="500")
    first = idle_after_first_batch(h)
    read_at = h.clock.now
    h.clock.now += 30 * HOUR  # down, no look at all
    restarted = h.planner()
    looks = len(h.kinesis.looks)
    second = restarted.next_offset(first, None, None)  # (no look: a look could not tell)
    assert second.batch == 2 and len(h.kinesis.looks) == looks
    assert second.state(S0).tip_ms == read_at  # not renewed: the read's loss check decides
    assert not [k for k in h.store.data if QUIET_PREFIX in k]


def test_a_look_at_another_position_than_the_offsets_renews_nothing():
    h = one_stream(idlePollIntervalMs="500")
    first = idle_after_first_batch(h)
    planner = h.planner()
    quiet_spell(h, planner, first, hours=1)
    assert planner.probe.quiet[S0][0] == Position.after("1003")
    from pyspark_kinesis.source.driver import steps

    moved = {A: {sid: s for sid, s in first.streams[A].items()}}
    moved[A]["s0"] = first.streams[A]["s0"].__class__(Position.after("2000"), tip_ms=5)
    renewed = steps.renewed(moved, planner.probe.quiet)
    assert renewed[A]["s0"].tip_ms == 5


def test_a_short_idle_spell_writes_nothing_under_metadata_path():
    """(an idle stream writes nothing for its first hour; then a note an hour, the newest only)"""
    h = one_stream(idlePollIntervalMs="500")
    first = idle_after_first_batch(h)
    planner = h.planner()
    assert planner.next_offset(first, None, None) is first  # (a run's first planning reads batch 1's ends)
    before = set(h.store.data)
    for _trigger in range(50):  # 50 minutes of triggers a minute apart
        h.clock.now += 60_000
        assert planner.next_offset(first, None, None) is first
    assert set(h.store.data) == before
    quiet_spell(h, planner, first, hours=5)
    assert len([k for k in h.store.data if QUIET_PREFIX in k]) == 1
