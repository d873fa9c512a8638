"""The one shard-read loop pinned at its bounds (src/pyspark_kinesis/source/executor/shard_read.py): how
many records each page may hold, the backoff's schedule and its one log line per streak, a replay that
keeps failing, a start already at its end, which opens may reuse a kept continuation, which faults keep
the source open, the far-behind bound on keeping, and the stuck-read bound. Page sources are scripted
(tests/unit/scripted.py); test_shard_read.py has the loop's rules."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import shard_read
from pyspark_kinesis.source.executor.pages import Fault, FaultKind
from pyspark_kinesis.source.executor.shard_read import (
    CACHE_MAX_BEHIND_MS,
    MAX_GET_RECORDS,
    ReadStuckError,
    ShardRead,
)
from pyspark_kinesis.source.state.offsets import ShardEnd
from tests.unit.scripted import SHARD, THROTTLED, ScriptedPages, context, page

WHERE = "Kinesis stream 'orders' (arn:aws:kinesis:eu-west-1:123456789012:stream/orders), shard " + SHARD


class Pauses:
    """random.uniform and time.sleep replaced: the backoff's bounds recorded, no waiting."""

    def __init__(self, monkeypatch) -> None:
        self.bounds: list[tuple[float, float]] = []
        self.slept: list[float] = []
        monkeypatch.setattr(
            shard_read.random, "uniform", lambda low, high: self.bounds.append((low, high)) or high
        )
        # (time.sleep is the time module's: the scripted source's own zero-length sleeps are left out,
        # and so are other threads' sleeps, which wait as before: a thread an earlier test left
        # polling would otherwise spin through the fake and fill the record)
        me, real = threading.get_ident(), time.sleep

        def sleep(seconds: float) -> None:
            if threading.get_ident() != me:
                real(seconds)
            elif seconds:
                self.slept.append(seconds)

        monkeypatch.setattr(shard_read.time, "sleep", sleep)


def run(script, start=None, *, expect=None, fail=True, source=None, **ctx):
    start = Position.trim_horizon() if start is None else start
    source = source or ScriptedPages(list(script))
    read = ShardRead(
        source, context(until=None if expect is None else expect.reached, **ctx), start, expect, fail
    )
    cols, end = read.run()
    return cols, end, source


# -- how many records a page may hold ------------------------------------------------------------


def test_a_first_attempt_asks_for_what_is_left_of_its_record_budget():
    _cols, _end, source = run([page([1, 2], behind_ms=500), page([3], behind_ms=0)], max_records=5)
    assert source.limits_asked == [5, 3]


def test_a_full_budget_still_asks_for_one_record():
    _cols, _end, source = run([page([1], behind_ms=500, full=True), page([2], behind_ms=0)], max_records=1)
    assert source.limits_asked == [1, 1]  # (the second page's record is over the budget: the read stops)


def test_a_verified_resume_asks_for_one_more_the_record_it_resumed_after():
    _cols, end, source = run([page([7, 8], behind_ms=0)], Position.after("7"), max_records=5)
    assert source.limits_asked == [6] and end.records == 1


def test_an_unverified_resume_and_an_at_start_ask_for_the_budget_alone():
    kept = ScriptedPages([page([8], behind_ms=0)], fresh=False)  # a kept continuation: no anchor check
    run([], Position.after("7"), source=kept, max_records=5)
    at = ScriptedPages([page([7], behind_ms=0)])
    run([], Position.at_sequence("7"), source=at, max_records=5)
    assert (kept.limits_asked, at.limits_asked) == ([5], [5])


def test_a_replay_and_an_unbounded_read_ask_for_the_service_maximum():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("2"), records=2, first=("1", 0))
    _cols, _end, replay = run([page([1, 2], behind_ms=0)], expect=recorded, max_records=5)
    _cols, _end, unbounded = run([page([1], behind_ms=0)], max_records=-1)
    assert replay.limits_asked == [MAX_GET_RECORDS] and unbounded.limits_asked == [MAX_GET_RECORDS]


# -- backing off -------------------------------------------------------------------------------------


def test_the_backoff_doubles_from_its_base_to_its_cap_and_logs_once_per_streak(monkeypatch, caplog):
    pauses = Pauses(monkeypatch)
    throttled = Fault(FaultKind.RETRY, THROTTLED)
    script = [throttled] * 7 + [page([1], behind_ms=500), throttled, page([2], behind_ms=0)]
    with caplog.at_level(logging.INFO, logger=shard_read.__name__):
        run(script, seconds=60)
    assert pauses.bounds == [(0, b) for b in (0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 0.2)]
    lines = [r.getMessage() for r in caplog.records if "backing off" in r.getMessage()]
    assert lines == [f"{WHERE}, batch 7: retry: {THROTTLED}; backing off and trying again"] * 2


def test_a_first_attempts_pause_never_outlasts_its_budget(monkeypatch):
    pauses = Pauses(monkeypatch)
    monkeypatch.setattr(
        shard_read.random, "uniform", lambda low, high: pauses.bounds.append((low, high)) or 4.0
    )
    run([Fault(FaultKind.RETRY, THROTTLED), page([1], behind_ms=0)], seconds=1.0)
    assert len(pauses.slept) == 1 and 0.5 < pauses.slept[0] <= 1.0


def test_a_replays_pause_is_not_cut_to_a_budget(monkeypatch):
    pauses = Pauses(monkeypatch)
    recorded = ShardEnd(Position.trim_horizon(), Position.after("1"), records=1, first=("1", 0))
    run([Fault(FaultKind.RETRY, THROTTLED), page([1], behind_ms=0)], expect=recorded, seconds=0.0)
    assert pauses.slept == [0.2]


def test_a_replay_fails_after_thirty_failed_steps_in_a_row_naming_the_cause(monkeypatch):
    Pauses(monkeypatch)
    recorded = ShardEnd(Position.trim_horizon(), Position.after("1"), records=1, first=("1", 0))
    script = [Fault(FaultKind.RETRY, THROTTLED)] * 30 + [page([1], behind_ms=0)]
    run(list(script), expect=recorded)  # thirty in a row: still going
    with pytest.raises(StreamAccessError) as info:
        run([Fault(FaultKind.RETRY, THROTTLED)] * 31 + [page([1], behind_ms=0)], expect=recorded)
    assert str(info.value) == (
        f"{WHERE}: batch 7 must be read again to its recorded end, but 31 calls in a row failed ({THROTTLED}). "
        "Check the stream's throughput and the network; the query can be restarted from its checkpoint."
    )
    assert info.value.__cause__ is THROTTLED


def test_a_replays_failure_without_a_cause_names_the_fault(monkeypatch):
    Pauses(monkeypatch)
    recorded = ShardEnd(Position.trim_horizon(), Position.after("1"), records=1, first=("1", 0))
    with pytest.raises(StreamAccessError, match=r"31 calls in a row failed \(retry\)\. "):
        run([Fault(FaultKind.RETRY)] * 31, expect=recorded)


def test_a_page_ends_a_streak_of_failures(monkeypatch):
    Pauses(monkeypatch)
    recorded = ShardEnd(Position.trim_horizon(), Position.after("2"), records=2, first=("1", 0))
    streak = [Fault(FaultKind.RETRY, THROTTLED)] * 20
    cols, _end, _source = run(
        [*streak, page([1], behind_ms=500), *streak, page([2], behind_ms=0)], expect=recorded
    )
    assert len(cols) == 2


# -- where a read starts and ends -----------------------------------------------------------------


def test_a_start_at_the_shards_end_reads_nothing_and_opens_nothing():
    cols, end, source = run([page([1])], Position.shard_end())
    assert (len(cols), end, source.opens) == (
        0,
        ShardEnd(start=Position.shard_end(), reached=Position.shard_end()),
        [],
    )


def test_a_replay_recorded_as_reading_nothing_opens_nothing():
    recorded = ShardEnd(Position.after("4"), Position.after("4"))
    cols, end, source = run([page([5])], Position.after("4"), expect=recorded)
    assert (len(cols), end.start, end.reached, source.opens) == (
        0,
        Position.after("4"),
        Position.after("4"),
        [],
    )


def test_a_first_attempt_ending_where_it_starts_still_reads():
    """A first attempt has no recorded end: only a replay's `until` equal to its start means nothing to read."""
    cols, _end, source = run([page([4, 5], behind_ms=0)], Position.after("4"))
    assert len(cols) == 1 and len(source.opens) == 1


def test_only_the_first_open_at_the_start_may_reuse_a_kept_continuation():
    script = [Fault(FaultKind.REOPEN), page([1], behind_ms=0)]
    _cols, _end, source = run(script)
    assert [reuse for _p, _v, reuse in source.opens] == [True, False]


def test_a_replay_and_a_start_inside_an_aggregate_never_reuse():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("1"), records=1, first=("1", 0))
    _c, _e, replay = run([page([1], behind_ms=0)], expect=recorded)
    _c, _e, inside = run([page([1], behind_ms=0)], Position.inside("1", 0))
    assert replay.opens[0][2] is False and inside.opens[0][2] is False


def test_a_timestamp_or_oldest_record_start_is_checked_against_retention_on_a_first_attempt_only(monkeypatch):
    checked = []
    monkeypatch.setattr(shard_read.LossPolicy, "check_start", lambda self, start: checked.append(start))
    start = Position.at_timestamp(int(time.time() * 1000) - 1000)
    run([page([1], behind_ms=0)], start)
    run([page([1], behind_ms=0)], Position.trim_horizon())
    assert checked == [start, Position.trim_horizon()]


# -- which faults keep the source open ------------------------------------------------------------------


def test_a_retried_page_keeps_the_source_open_and_a_broken_one_opens_again(monkeypatch):
    Pauses(monkeypatch)
    _c, _e, retried = run([Fault(FaultKind.RETRY, THROTTLED), page([1], behind_ms=0)])
    _c, _e, broken = run([Fault(FaultKind.BROKEN, ConnectionError("cut")), page([1], behind_ms=0)])
    assert (len(retried.opens), len(broken.opens)) == (1, 2)


def test_a_failed_open_is_tried_again(monkeypatch):
    Pauses(monkeypatch)
    source = ScriptedPages([page([1], behind_ms=0)], open_faults=[Fault(FaultKind.RETRY, THROTTLED)])
    cols, _end, _source = run([], source=source)
    assert len(cols) == 1 and len(source.opens) == 2


# -- keeping, and the bounds ---------------------------------------------------------------------------


@pytest.mark.parametrize(("behind", "kept"), [(CACHE_MAX_BEHIND_MS - 1, True), (CACHE_MAX_BEHIND_MS, False)])
def test_a_read_keeps_its_continuation_only_below_an_hour_behind(behind, kept):
    _c, _e, source = run([page([1], behind_ms=behind)], max_records=1)
    assert bool(source.kept) is kept


def test_a_read_with_no_page_reports_nothing_known():
    _cols, end, _source = run([], seconds=0.05)
    assert (end.millis_behind, end.holder, end.at_tip, end.children) == (-1, "", False, ())


def test_a_read_that_never_ends_is_stopped_at_its_step_bound(monkeypatch):
    monkeypatch.setattr(shard_read, "MAX_STEPS", 3)
    recorded = ShardEnd(Position.trim_horizon(), Position.after("9"), records=9, first=("1", 0))
    source = ScriptedPages([page([1], behind_ms=500), page([2], behind_ms=500), page([3], behind_ms=500)])
    with pytest.raises(ReadStuckError) as info:
        run([], expect=recorded, source=source)
    assert str(info.value) == f"{WHERE}: the read did not end within 3 steps"
