"""The oracle's rule for a possible loss at a start that aged out (`Oracle.start_aged_out`): a claim
the read cannot avoid passes, one a look could have avoided is a false loss."""

from __future__ import annotations

import pytest

from .oracle import Oracle, Violation

H = 3_600_000
RETENTION = 48 * H
ARN, SHARD = "arn:aws:kinesis:us-east-1:000000000000:stream/s", "shardId-000000000000"
MAYBE = "after sequence number 7, where the read resumes, is past retention, and records after it may be too"


def _oracle(s_arrival: int, s_committed: int, y_arrival: int) -> Oracle:
    """A shard with S (delivered, its batch committed at `s_committed`) and Y after it (not delivered)."""
    oracle = Oracle(0, look_gap_ms=2 * H)
    oracle.expect(1, ARN, SHARD, "k", s_arrival, RETENTION)
    oracle.expect(2, ARN, SHARD, "k", y_arrival, RETENTION)
    oracle.commit(0, [1], s_committed)
    return oracle


def test_a_possible_loss_where_the_query_reached_s_after_y_came_stands():
    oracle = _oracle(s_arrival=0, s_committed=47 * H, y_arrival=30 * H)  # (behind: Y came before S was read)
    oracle.loss_reported(ARN, SHARD, MAYBE, 48 * H + 1, RETENTION)
    assert oracle.losses


def test_a_possible_loss_where_a_look_saw_the_tip_at_s_within_the_retention_is_false():
    oracle = _oracle(s_arrival=0, s_committed=H, y_arrival=30 * H)  # (quiet at S from 1 h to 30 h)
    with pytest.raises(Violation, match="false-loss"):
        oracle.loss_reported(ARN, SHARD, MAYBE, 48 * H + 1, RETENTION)


def test_a_certain_loss_where_nothing_aged_out_is_false_whatever_the_start():
    oracle = _oracle(s_arrival=0, s_committed=47 * H, y_arrival=30 * H)
    with pytest.raises(Violation, match="false-loss"):
        oracle.loss_reported(ARN, SHARD, "records 8 to 9 are past retention", 48 * H + 1, RETENTION)


def test_a_possible_loss_before_the_start_aged_out_is_false():
    oracle = _oracle(s_arrival=0, s_committed=47 * H, y_arrival=30 * H)
    with pytest.raises(Violation, match="false-loss"):
        oracle.loss_reported(ARN, SHARD, MAYBE, 47 * H, RETENTION)
