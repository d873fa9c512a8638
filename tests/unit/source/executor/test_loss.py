"""The data-loss policy of one shard read pinned (src/pyspark_kinesis/source/executor/loss.py): the
"unaged" rule at its bounds, what an unknown tip means, and the exact words of every loss, since an
operator acts on them (the shard, the batch, the range, how many records, what to set). The clock is the
module's own, replaced."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from pyspark_kinesis.errors import DataLossError
from pyspark_kinesis.model import MIN_RETENTION_MS, RETENTION_MARGIN_MS, Position
from pyspark_kinesis.source.executor import loss
from pyspark_kinesis.source.executor.loss import LossPolicy
from pyspark_kinesis.source.state.offsets import ShardEnd

WHERE = "Kinesis stream 'orders', shard shardId-000000000001"
NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000
WINDOW_MS = MIN_RETENTION_MS - RETENTION_MARGIN_MS  # how long after a moment nothing can have aged out


@pytest.fixture
def clock(monkeypatch):
    """The module's clock at `now[0]` ms (NOW_MS unless a test moves it)."""
    now = [NOW_MS]
    monkeypatch.setattr(loss, "time", SimpleNamespace(time=lambda: now[0] / 1000))
    return now


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == loss.__name__ and r.levelno == logging.WARNING
    ]


def _infos(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == loss.__name__ and r.levelno == logging.INFO]


def test_unaged_holds_strictly_inside_the_retention_less_its_margin(clock):
    policy = LossPolicy(WHERE, 3, True, None)  # (no retention known: Kinesis' 24 hours)
    assert policy.retention_ms == MIN_RETENTION_MS
    assert policy.unaged(NOW_MS - WINDOW_MS + 1)
    assert not policy.unaged(NOW_MS - WINDOW_MS)  # (at the bound: may have aged out)
    assert not policy.unaged(NOW_MS - MIN_RETENTION_MS + 1)  # (inside the retention, not its margin)
    longer = LossPolicy(WHERE, 3, True, 48 * HOUR_MS)
    assert longer.unaged(NOW_MS - 40 * HOUR_MS) and not policy.unaged(NOW_MS - 40 * HOUR_MS)


def test_a_moment_of_0_means_nothing_is_known_even_near_the_epoch(clock):
    clock[0] = HOUR_MS  # (so that 0 and 1 both lie inside the retention, were they moments)
    policy = LossPolicy(WHERE, 3, True, None)
    assert not policy.unaged(0)
    assert policy.unaged(1)
    assert policy.tip_ms == 0  # (by default the tip is not known...)
    with pytest.raises(DataLossError):  # (...so a start past retention is a loss)
        policy.aged_out("the shard's start is past retention")


def test_a_loss_under_failOnDataLoss_names_the_shard_batch_and_option(clock, caplog):
    with pytest.raises(DataLossError) as raised:
        LossPolicy(WHERE, 7, True, None).loss("records 5 to 9 aged out")
    assert str(raised.value) == (
        f"{WHERE}, batch 7: records 5 to 9 aged out, so records may have been lost (how many, if any, a read "
        "cannot tell). Set failOnDataLoss=false to accept the loss and go on."
    )
    policy = LossPolicy(WHERE, 7, False, None)
    with caplog.at_level(logging.INFO, logger=loss.__name__):
        policy.loss("records 5 to 9 aged out")
    assert _warnings(caplog) == [
        f"{WHERE}, batch 7: records 5 to 9 aged out; failOnDataLoss=false: going on without them"
    ]
    assert policy.losses == ["records 5 to 9 aged out"]


def test_a_start_past_retention_is_said_as_a_possible_loss_not_a_certain_one(clock):
    """Kinesis sequence numbers have gaps: after a trimmed start a read cannot tell whether anything came
    between it and the oldest record left (found by the simulation, seed 100211: a query 46 h behind on a
    48 h stream said "those records are lost" where none had come). It still fails the query."""
    with pytest.raises(DataLossError) as raised:
        LossPolicy(WHERE, 7, True, None).aged_out(
            "sequence number 42, where the read resumes, is past retention"
        )
    assert str(raised.value) == (
        f"{WHERE}, batch 7: sequence number 42, where the read resumes, is past retention, so records may "
        "have been lost (how many, if any, a read cannot tell). Set failOnDataLoss=false to accept the loss "
        "and go on."
    )
    with pytest.raises(DataLossError, match="may have been lost"):
        LossPolicy(WHERE, 7, True, 48 * HOUR_MS).check_start(Position.at_timestamp(NOW_MS - 50 * HOUR_MS))


def test_a_start_past_retention_is_no_loss_when_the_tip_was_seen_since(clock, caplog):
    seen = NOW_MS - 900_000  # (15 minutes ago)
    policy = LossPolicy(WHERE, 2, True, None, tip_ms=seen)
    with caplog.at_level(logging.INFO, logger=loss.__name__):
        policy.aged_out("after sequence number 42 is gone: TrimmedDataAccessException")
    assert _infos(caplog) == [
        f"{WHERE}, batch 2: after sequence number 42 is gone; the shard was at the tip there 900 s ago, so "
        "nothing after it can have aged out"
    ]
    assert policy.losses == []
    stale = LossPolicy(WHERE, 2, False, None, tip_ms=NOW_MS - WINDOW_MS)
    stale.aged_out("after sequence number 42 is gone: TrimmedDataAccessException")
    assert stale.losses == ["after sequence number 42 is gone: TrimmedDataAccessException"]


def test_a_timestamp_start_older_than_the_retention_is_a_loss_of_unknown_size(clock):
    policy = LossPolicy(WHERE, 4, False, 48 * HOUR_MS)
    policy.check_start(Position.trim_horizon())  # (no timestamp: nothing to say)
    policy.check_start(Position.at_timestamp(NOW_MS - 40 * HOUR_MS))  # (inside the retention)
    assert policy.losses == []
    policy.check_start(Position.at_timestamp(NOW_MS - 50 * HOUR_MS))
    assert policy.losses == [
        f"the read starts at AT_TIMESTAMP {NOW_MS - 50 * HOUR_MS} ms, longer ago than the stream's retention "
        "(48 h): an unknown number of records from then up to the oldest one left may be past retention"
    ]
    seen = LossPolicy(WHERE, 4, True, 48 * HOUR_MS, tip_ms=NOW_MS - HOUR_MS)
    seen.check_start(Position.at_timestamp(NOW_MS - 50 * HOUR_MS))  # (the tip was seen since: no loss)


def test_an_oldest_record_start_is_a_loss_when_the_shard_was_at_its_tip_there_longer_ago_than_the_retention(
    clock,
):
    """Found by the simulation: a shard read to its tip with nothing in it keeps TRIM_HORIZON as its
    position; records that came while the query was stopped for days and aged out were lost without a
    word (no sequence number to resume after, nothing to find missing)."""
    fresh = LossPolicy(WHERE, 4, False, 24 * HOUR_MS)
    fresh.check_start(Position.trim_horizon())  # (a start the options asked for: no tip, nothing to say)
    recent = LossPolicy(WHERE, 4, False, 24 * HOUR_MS, tip_ms=NOW_MS - 20 * HOUR_MS)
    recent.check_start(Position.trim_horizon())
    assert fresh.losses == recent.losses == []
    stale = LossPolicy(WHERE, 4, False, 24 * HOUR_MS, tip_ms=NOW_MS - 30 * HOUR_MS)
    stale.check_start(Position.trim_horizon())
    assert stale.losses == [
        "the read starts at the shard's oldest record, and the shard was last known at its tip there 30 h "
        "ago, longer than the stream's retention (24 h): an unknown number of records that arrived since may "
        "be past retention"
    ]
    with pytest.raises(DataLossError, match="last known at its tip there 30 h ago"):
        LossPolicy(WHERE, 4, True, 24 * HOUR_MS, tip_ms=NOW_MS - 30 * HOUR_MS).check_start(
            Position.trim_horizon()
        )


def _end(records: int, first: tuple[str, int] | None) -> ShardEnd:
    return ShardEnd(Position.trim_horizon(), Position.after("90"), records=records, first=first)


def test_a_replay_that_reproduces_the_first_attempt_passes(clock):
    policy = LossPolicy(WHERE, 5, True, None)
    start = Position.trim_horizon()
    policy.check_reproduced(_end(3, ("10", 0)), start, True, 3, ("10", 0))
    policy.check_reproduced(_end(3, None), start, True, 3, ("11", 0))  # (first record not recorded)
    policy.check_reproduced(_end(0, ("10", 0)), start, True, 0, None)  # (nothing was read)


def test_a_replay_from_another_first_record_or_short_or_unfinished_is_a_loss(clock, caplog):
    start = Position.trim_horizon()
    with pytest.raises(DataLossError) as raised:
        LossPolicy(WHERE, 5, True, None).check_reproduced(_end(1, ("10", 0)), start, True, 1, ("12", 0))
    assert str(raised.value) == (
        f"{WHERE}: batch 5 must be read again exactly as first read (1 records from sequence number 10, "
        "TRIM_HORIZON up to after sequence number 90), but the stream now gives 1 records from sequence "
        "number 12: about 0 records are past retention (or the stream was deleted and re-created). The "
        "batch cannot be replayed exactly. Set failOnDataLoss=false to accept the loss and go on with the "
        "records that are left."
    )
    policy = LossPolicy(WHERE, 5, False, None)
    with caplog.at_level(logging.INFO, logger=loss.__name__):
        policy.check_reproduced(_end(4, None), start, False, 0, None)
        policy.check_reproduced(_end(2, ("10", 0)), start, True, 5, ("10", 0))
    first = (
        "batch 5 must be read again exactly as first read (4 records, TRIM_HORIZON up to after sequence "
        "number 90), but the stream now gives no record and does not reach that end: about 4 records are "
        "past retention (or the stream was deleted and re-created)"
    )
    second = (
        "batch 5 must be read again exactly as first read (2 records from sequence number 10, TRIM_HORIZON "
        "up to after sequence number 90), but the stream now gives 5 records from sequence number 10: about "
        "0 records are past retention (or the stream was deleted and re-created)"
    )
    assert policy.losses == [first, second]
    assert _warnings(caplog) == [
        f"{WHERE}: {first}; failOnDataLoss=false: going on without them",
        f"{WHERE}: {second}; failOnDataLoss=false: going on without them",
    ]
