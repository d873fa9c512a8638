"""The next offset's steps that are functions of values (src/pyspark_kinesis/source/driver/steps.py):
the assignments land on exactly the shards they name, with their budgets and the closed flag; the
recorded ends give the next states and the holder hints."""

from __future__ import annotations

from pyspark_kinesis.model import Position, ShardRef
from pyspark_kinesis.source.driver.batch_shape import ShardAssignment
from pyspark_kinesis.source.driver.steps import advanced, assigned, holders_of
from pyspark_kinesis.source.state.offsets import NO_TASK, ShardEnd, ShardState, SourceOffset

A, B = "arn:aws:kinesis:us-east-1:1:stream/a", "arn:aws:kinesis:us-east-1:1:stream/b"
AT = Position.after("10")


def test_assignments_set_task_budgets_and_closed_on_their_shards_only():
    streams = {A: {"s0": ShardState(AT), "s1": ShardState(AT)}, B: {"s0": ShardState(AT, closed=True)}}
    out = assigned(
        streams,
        {ShardRef(A, "s1"): ShardAssignment(2, 40, 4000), (B, "s0"): ShardAssignment(0)},
        closed=lambda ref: ref == (A, "s1"),
    )
    assert out[A]["s0"] == ShardState(AT)  # not assigned: not read
    assert out[A]["s1"] == ShardState(AT, task=2, max_records=40, max_bytes=4000, closed=True)
    assert out[B]["s0"] == ShardState(AT, task=0, closed=True)  # closed before stays closed
    assert streams[A]["s1"] == ShardState(AT)  # the input is left as it was


def test_ends_advance_the_states_and_name_the_holders():
    offset = SourceOffset("tok", 3, {A: {"s0": ShardState(AT, task=1), "s1": ShardState(AT, task=0)}})
    ends = {ShardRef(A, "s0"): ShardEnd(AT, Position.after("20"), records=3, read_at_ms=900, holder="h:1@2")}
    out = advanced(offset, ends)
    assert out[A]["s0"].position == Position.after("20") and out[A]["s0"].task == NO_TASK
    assert out[A]["s1"] == ShardState(AT)  # no end recorded: where it was, its task reset
    assert holders_of(ends) == {(A, "s0"): "h:1@2"}
