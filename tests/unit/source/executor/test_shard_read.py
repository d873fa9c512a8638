"""The one shard-read loop against scripted page sources (tests/unit/scripted.py): the rules it owns for
every way of reading (the tip, the shard's end, the replay checks, aged-out starts, failures, what is
kept for the next batch), and a toy third way of reading that needs only its module and one
registration."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from pyspark_kinesis.errors import DataLossError, StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import modes, shard_read
from pyspark_kinesis.source.executor.pages import Fault, FaultKind, Page, ReadContext
from pyspark_kinesis.source.executor.shard_read import CLOSED_EMPTY_READS, ShardRead
from pyspark_kinesis.source.state.offsets import ShardEnd
from tests.unit.scripted import THROTTLED, FakeProxy, ScriptedPages, context, page, records

NOW_MS = int(time.time() * 1000)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    """Backoff pauses of a millisecond at most: the rules, not the waiting, are under test."""
    monkeypatch.setattr(shard_read, "_BACKOFF_MAX_S", 0.001)


def read(script, start=None, *, expect=None, fail=True, tip_ms=0, **ctx):
    start = Position.trim_horizon() if start is None else start
    source = script if isinstance(script, ScriptedPages) else ScriptedPages(list(script))
    run = ShardRead(
        source, context(until=None if expect is None else expect.reached, **ctx), start, expect, fail, tip_ms
    )
    cols, end = run.run()
    return cols, end, source


def seqs(cols) -> list[str]:
    return cols.to_arrow().column("sequenceNumber").to_pylist()


# -- the tip, the end, the limits ----------------------------------------------------------------
def test_a_partial_page_at_the_tip_ends_the_read_at_the_tip():
    cols, end, source = read([page([1, 2, 3], behind_ms=0)])
    assert seqs(cols) == ["1", "2", "3"] and end.at_tip and end.reached == Position.after("3")
    assert source.kept == [Position.after("3")] and source.closed  # ended between pages: kept


def test_a_full_page_at_behind_zero_is_not_the_tip():
    """A full page means more is waiting, whatever a lagging or simplified MillisBehindLatest says."""
    cols, end, _source = read([page([1, 2], behind_ms=0, full=True), page([3], behind_ms=0)])
    assert seqs(cols) == ["1", "2", "3"] and end.at_tip


def test_a_page_behind_the_tip_reads_on():
    cols, end, _source = read([page([1], behind_ms=5000), page([2], behind_ms=0)])
    assert seqs(cols) == ["1", "2"] and end.millis_behind == 0


def test_a_closed_shard_reads_through_empty_pages_to_its_end():
    """Some servers answer empty pages at the tip before the one that ends a closed shard."""
    script = [page([1], behind_ms=100)] + [page([], behind_ms=0)] * (CLOSED_EMPTY_READS - 1)
    script.append(page([], ended=True, children=("c1", "c2")))
    cols, end, source = read(script, closed=True)
    assert seqs(cols) == ["1"] and end.reached.is_end and end.children == ("c1", "c2") and not end.at_tip
    assert source.kept == []  # a shard read to its end keeps nothing


def test_a_closed_shard_with_records_at_the_tip_is_not_at_the_tip():
    cols, end, _source = read([page([1], behind_ms=0)], closed=True)
    assert seqs(cols) == ["1"] and not end.at_tip and not end.reached.is_end


def test_a_closed_shard_whose_end_never_comes_is_not_at_the_tip():
    """An AvailableNow run takes a shard at the tip as drained: a closed shard taken so before its end
    is confirmed would leave its children unread for the run."""
    _cols, end, _source = read([page([], behind_ms=0)] * (CLOSED_EMPTY_READS + 2), closed=True, seconds=0.3)
    assert not end.at_tip and not end.reached.is_end


# A server that never ends a closed shard (moto: an empty page and a next iterator, for ever) left an
# AvailableNow query reading its closed parents batch after batch, their children never read (issue #61
# item 8). The listing's EndingSequenceNumber bounds the shard's records: past it, the shard has ended.
ENDLESS = [page([], behind_ms=0)] * (CLOSED_EMPTY_READS + 2)


def test_a_closed_shard_read_past_its_listed_last_sequence_number_has_ended():
    cols, end, _source = read([page([7, 8], behind_ms=0), *ENDLESS], closed=True, last_seq="8", first_seq="7")
    assert seqs(cols) == ["7", "8"] and end.reached.is_end and not end.at_tip
    resumed = read(ENDLESS, Position.after("8"), closed=True, last_seq="8", first_seq="7", tip_ms=NOW_MS)
    assert resumed[1].reached.is_end


def test_a_closed_shard_whose_start_aged_out_is_at_its_end_when_the_start_was_past_its_last_record():
    """Found by the simulation: the start (after the shard's last record) aged out, the read went on from
    the oldest record left (TRIM_HORIZON), which says nothing of how far the shard was read, and the
    closed shard was read again in every batch, never ended."""
    source = ScriptedPages(list(ENDLESS), open_faults=[Fault(FaultKind.GONE)])
    _cols, end, _source = read(
        source, Position.after("8"), closed=True, last_seq="8", first_seq="7", tip_ms=NOW_MS, seconds=0.3
    )
    assert end.reached.is_end


def test_an_empty_closed_shard_has_ended_at_its_first_tip():
    """(moto moves a split parent's records into its children: its range is empty, 0 to 0)"""
    _cols, end, _source = read(ENDLESS, closed=True, last_seq="0", first_seq="0")
    assert end.reached.is_end


def test_a_replay_to_a_closed_shards_end_meets_it_past_the_listed_last_sequence_number():
    expect = ShardEnd(Position.trim_horizon(), Position.shard_end(), records=2, first=("7", 0))
    cols, end, _source = read(
        [page([7, 8], behind_ms=0), *ENDLESS], expect=expect, last_seq="8", first_seq="7"
    )
    assert seqs(cols) == ["7", "8"] and end.reached.is_end


@pytest.mark.parametrize(
    "first_seq, last_seq, start",
    [
        ("7", "9", Position.after("8")),  # not past it yet: record 9 may come
        (
            "49600000000000000000000000000000000000000000000000000001",
            "9223372036854775807",
            Position.after("8"),
        ),
        ("7", "8", Position.inside("8", 0)),  # (inside an aggregate: its rest may come)
    ],
    ids=["before-the-end", "an-end-below-the-start-is-not-known", "inside-the-last-record"],
)
def test_a_listed_end_the_read_has_not_passed_or_cannot_trust_ends_nothing(first_seq, last_seq, start):
    """kinesis-local reports Long.MaxValue, below its own sequence numbers: not an end to trust."""
    _cols, end, _source = read(
        ENDLESS, start, closed=True, last_seq=last_seq, first_seq=first_seq, seconds=0.3, tip_ms=NOW_MS
    )
    assert not end.reached.is_end and not end.at_tip


def test_the_record_limit_cuts_a_page_and_keeps_nothing():
    cols, end, source = read([page(range(1, 11), behind_ms=0)], max_records=4)
    assert seqs(cols) == ["1", "2", "3", "4"] and end.reached == Position.after("4") and not end.at_tip
    assert source.kept == []  # stopped inside a page: the continuation is past the batch's end
    assert source.limits_asked == [4]


def test_a_source_that_takes_back_the_rest_of_a_page_keeps_a_read_cut_inside_it():
    """Fan-out's agent puts the rest of the last event back (`keeps_partial`): a read cut by the
    record limit keeps its subscription at its end, and the shard's next batch continues it. (Were it
    not kept, the next batch would subscribe anew and wait out the service's 5 s: under a budget shorter
    than that the shard never got a record again; found by the chaos suite with KPL aggregates.)"""
    source = ScriptedPages([page(range(1, 11), behind_ms=0)], keeps_partial=True)
    cols, end, source = read(source, max_records=4)
    assert seqs(cols) == ["1", "2", "3", "4"] and source.kept == [Position.after("4")] == [end.reached]


def test_a_read_that_starts_inside_an_aggregate_continues_what_the_last_one_kept():
    """A start inside a partly taken aggregate asks for the kept continuation where the source gives
    the rest of a page back, and only there."""
    start = Position.inside("7", 2)
    for keeps_partial in (True, False):
        source = ScriptedPages([page([7, 8], behind_ms=0)], keeps_partial=keeps_partial)
        read(source, start)
        assert source.opens[0][2] is keeps_partial  # reuse asked for


def test_a_read_far_behind_keeps_no_continuation():
    """Over an hour behind, the next batch must verify its start (records may age out meanwhile)."""
    _cols, _end, source = read([page([1], behind_ms=2 * 3600 * 1000)], seconds=0.2)
    assert source.kept == []


def test_an_open_that_used_up_the_budget_still_reads_its_first_page():
    """A fan-out read that must subscribe anew waits out the service's 5 s spacing inside `open`, longer
    than a batch's budget: were that the end of the read, a shard subscribed anew in every batch (its
    task retried after each read) would never get a record (found by the chaos suite)."""
    source = ScriptedPages([page([1, 2], behind_ms=0), page([3], behind_ms=0)], open_s=0.3)
    cols, end, _source = read(source, seconds=0.1)
    assert seqs(cols) == ["1", "2"] and end.reached == Position.after("2")  # one page, then the budget rules
    assert len(source.opens) == 1


# -- failures ------------------------------------------------------------------------------------
def test_an_expired_continuation_is_opened_again_where_the_read_got_to():
    script = [page([1, 2], behind_ms=100), Fault(FaultKind.REOPEN), page([2, 3], behind_ms=0)]
    cols, end, source = read(script)
    assert [(p, v) for p, v, _r in source.opens] == [
        (Position.trim_horizon(), False),
        (Position.after("2"), True),
    ]
    assert seqs(cols) == ["1", "2", "3"] and end.reached == Position.after(
        "3"
    )  # the verified page's 2 dropped


def test_throttling_past_the_budget_ends_the_read_where_it_got_to():
    script = [page([1], behind_ms=100)] + [Fault(FaultKind.RETRY, THROTTLED)] * 50
    cols, end, _source = read(script, seconds=0.5)
    assert seqs(cols) == ["1"] and end.reached == Position.after("1") and not end.at_tip


def test_a_replay_that_keeps_failing_fails_the_task():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("3"), records=3, first=("1", 0))
    script = [Fault(FaultKind.RETRY, THROTTLED)] * 40
    with pytest.raises(
        StreamAccessError, match="must be read again to its recorded end, but 31 calls in a row"
    ):
        read(script, expect=recorded)


def test_a_start_ahead_of_the_service_clock_is_at_the_tip():
    source = ScriptedPages([], open_faults=[Fault(FaultKind.AHEAD)])
    cols, end, _source = read(source, Position.at_timestamp(NOW_MS))
    assert len(cols) == 0 and end.at_tip and end.reached == Position.at_timestamp(NOW_MS)


# -- replays -------------------------------------------------------------------------------------
def test_a_replay_starts_at_its_first_record_and_stops_at_its_recorded_end():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("3"), records=3, first=("1", 0))
    cols, end, source = read([page([1, 2, 3, 4, 5], behind_ms=0)], expect=recorded)
    assert seqs(cols) == ["1", "2", "3"] and end.reached == Position.after("3")
    assert source.opens[0][0] == Position.inside("1", -1)  # at the first record, not TRIM_HORIZON


def test_a_replay_whose_first_record_differs_fails_even_with_the_same_count():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("4"), records=3, first=("1", 0))
    with pytest.raises(DataLossError, match="from sequence number 2"):
        read([page([2, 3, 4], behind_ms=0)], expect=recorded)


def test_a_replay_with_fewer_records_fails_even_from_the_same_first_record():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("9"), records=4, first=("1", 0))
    with pytest.raises(DataLossError, match="3 records from sequence number 1"):
        read([page([1, 5, 9], behind_ms=0)], expect=recorded)


def test_a_replay_loss_is_a_warning_with_fail_on_data_loss_false():
    recorded = ShardEnd(Position.trim_horizon(), Position.after("9"), records=4, first=("1", 0))
    cols, end, _source = read([page([1, 5, 9], behind_ms=0)], expect=recorded, fail=False)
    assert seqs(cols) == ["1", "5", "9"] and end.reached == Position.after("9")
    # (noted beside the record for the driver, which reports it: see test_replay_losses.py)
    assert end.losses == (
        "batch 7 must be read again exactly as first read (4 records from sequence number 1, TRIM_HORIZON up "
        "to after sequence number 9), but the stream now gives 3 records from sequence number 1: about 1 "
        "records are past retention (or the stream was deleted and re-created)",
    )


# -- a start that aged out -----------------------------------------------------------------------
def test_a_verified_resume_drops_the_record_it_resumed_after():
    cols, end, source = read([page([7, 8, 9], behind_ms=0)], Position.after("7"))
    assert source.opens == [(Position.after("7"), True, True)]  # reuse asked, verify on a fresh open
    assert seqs(cols) == ["8", "9"] and end.at_tip


def test_a_verified_resume_that_saw_nothing_yet_keeps_no_continuation():
    """Opened at S to check it (verify), a read that ends before S came back has lost nothing (a settled
    page only says no push came in time) and must not keep the continuation as "after S": the next
    batch would take S again from it, unchecked (duplicates the chaos suite found under fan-out on two
    executors, where a read settles before its fresh subscription's first push)."""
    cols, end, source = read([page([], behind_ms=500, settled=True)], Position.after("7"))
    assert len(cols) == 0 and end.reached == Position.after("7")
    assert source.kept == []


def test_a_resume_whose_record_aged_out_is_a_loss():
    with pytest.raises(DataLossError, match="sequence number 7, where the read resumes, is past retention"):
        read([page([12, 13], behind_ms=0)], Position.after("7"))


def test_a_resume_whose_record_aged_out_with_nothing_after_it_is_a_loss():
    with pytest.raises(DataLossError, match="no record is left after it"):
        read([page([], behind_ms=0)], Position.after("7"))


def test_a_resume_at_a_recent_tip_whose_record_aged_out_loses_nothing():
    cols, end, _source = read([page([12, 13], behind_ms=0)], Position.after("7"), tip_ms=NOW_MS - 60_000)
    assert seqs(cols) == ["12", "13"] and end.at_tip


def test_a_tip_older_than_the_retention_proves_nothing():
    days_ago = NOW_MS - 3 * 24 * 3600 * 1000
    with pytest.raises(DataLossError):
        read([page([12], behind_ms=0)], Position.after("7"), tip_ms=days_ago)


def test_a_position_the_service_refuses_goes_on_from_the_oldest_record_after_the_tip_rule():
    source = ScriptedPages([page([12, 13], behind_ms=0)], open_faults=[Fault(FaultKind.GONE)])
    cols, end, source = read(source, Position.after("7"), tip_ms=NOW_MS - 60_000)
    assert source.oldest == 1 and seqs(cols) == ["12", "13"] and end.reached == Position.after("13")
    with pytest.raises(
        DataLossError, match="up to the oldest one left, may be too, so records may have been lost"
    ):
        read(ScriptedPages([page([12])], open_faults=[Fault(FaultKind.GONE)]), Position.after("7"))


def test_a_shard_gone_entirely_counts_as_read_to_its_end_without_loss_at_a_recent_tip():
    source = ScriptedPages([], exists=False, open_faults=[Fault(FaultKind.GONE)])
    _cols, end, _source = read(source, Position.after("7"), tip_ms=NOW_MS - 60_000)
    assert end.reached.is_end


@pytest.mark.parametrize("answer", ["an error", "an iterator at the oldest record"])
def test_a_verified_start_that_aged_out_on_a_quiet_shard_ends_where_it_started_and_replays(answer):
    """The two ways a service answers a trimmed start record the same end: the start itself, with no
    record taken. A replay of that batch then reads nothing and loses nothing (an end of TRIM_HORIZON
    made every replay a data loss until a new record arrived)."""
    faults = [Fault(FaultKind.GONE)] if answer == "an error" else []
    source = ScriptedPages([page([], behind_ms=0)], open_faults=faults)
    _cols, end, _source = read(source, Position.after("7"), fail=False)
    assert end.reached == Position.after("7") and end.records == 0 and end.at_tip
    assert len(end.losses) == 1  # the aged-out start is reported once, either way
    cols, replayed, _source = read(
        ScriptedPages([page([], behind_ms=0)], open_faults=list(faults)), Position.after("7"), expect=end
    )
    assert len(cols) == 0 and replayed.reached == end.reached and replayed.losses == ()


def test_a_start_at_a_timestamp_older_than_the_retention_is_a_loss():
    days_ago = NOW_MS - 3 * 24 * 3600 * 1000
    with pytest.raises(DataLossError, match="longer ago than the stream's retention"):
        read([page([1], behind_ms=0)], Position.at_timestamp(days_ago))
    cols, end, _source = read([page([1], behind_ms=0)], Position.at_timestamp(days_ago), fail=False)
    assert seqs(cols) == ["1"]
    # (kept for the batch-end record, from which the driver reports it whichever executor read it)
    assert len(end.losses) == 1 and "longer ago than the stream's retention" in end.losses[0]


def test_each_loss_a_first_read_goes_on_past_is_in_its_end_and_none_without_one():
    source = ScriptedPages([page([12, 13], behind_ms=0)], open_faults=[Fault(FaultKind.GONE)])
    _cols, end, _source = read(source, Position.after("7"), fail=False)
    assert end.losses == (
        "after sequence number 7, where the read resumes, is past retention, and records after it, up to the "
        "oldest one left, may be too",
    )
    _cols, end, _source = read(
        [page([7, 8, 9], behind_ms=0)], Position.after("7"), fail=False
    )  # 7: the anchor
    assert end.losses == ()


# -- a third way of reading ----------------------------------------------------------------------
@dataclass
class ToyPages:
    """A toy way of reading: every shard holds records 1..6 and hands them out two at a time."""

    context: ReadContext
    at: int = 0
    log: list[str] = field(default_factory=list)
    keeps_partial: bool = False

    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        self.at = int(position.seq) if position.seq else 0
        if verify:
            self.at -= 1  # "after S" from S itself
        return True

    def open_oldest(self) -> bool:
        self.at = 0
        return True

    def next_page(self, limit: int) -> Page:
        batch = [n for n in range(self.at + 1, min(self.at + 3, 7))][:limit]
        self.at += len(batch)
        return Page(records(batch), behind_ms=0 if self.at >= 6 else 1000, full=len(batch) == limit)

    def keep(self, position: Position) -> str:
        self.log.append(f"keep {position.describe()}")
        return ""

    def close(self) -> None:
        self.log.append("close")


def test_a_third_way_of_reading_is_one_class_and_one_entry(monkeypatch):
    monkeypatch.setitem(modes.MODES, "toy", ToyPages)
    cols, end = ShardRead("toy", context(max_records=5), Position.trim_horizon()).run()
    assert seqs(cols) == ["1", "2", "3", "4", "5"] and end.reached == Position.after("5")
    cols, end = ShardRead("toy", context(), end.reached).run()  # the next batch: verified resume after 5
    assert seqs(cols) == ["6"] and end.at_tip


def test_an_unknown_way_of_reading_is_named():
    with pytest.raises(ValueError, match="no way of reading is registered as 'carrier-pigeon'"):
        ShardRead("carrier-pigeon", context(proxy=FakeProxy()), Position.trim_horizon())


def test_consumer_types_the_option_accepts_are_the_ways_of_reading():
    """consumerType's choices (declared with the option, read by the planner) and the executor's ways
    of reading are one list: a way without a choice is unreachable, a choice without a way fails reads."""
    from pyspark_kinesis.source.options import known_options

    assert set(known_options()["consumerType"].choices or ()) == set(modes.MODES)


def test_a_position_gone_between_two_calls_of_a_read_is_a_possible_loss():
    """A read that took records and then met its position gone cannot tell either whether anything came
    between it and the oldest record left: the message says records may have been lost."""
    script = [page([8, 9], behind_ms=5_000), Fault(FaultKind.GONE), page([12], behind_ms=0)]
    with pytest.raises(DataLossError, match="may be too, so records may have been lost"):
        read(ScriptedPages(script), Position.after("7"))
