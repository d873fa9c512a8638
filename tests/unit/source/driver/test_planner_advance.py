"""The planner's step from one batch's recorded ends to the next batch's shard states
(src/pyspark_kinesis/source/driver/planner.py `Planner.advance`), pinned field by field: the position, the
idle flag, the poll time, when the shard was last at the tip, the budgets and task reset, the holder
hint remembered, and a shard no task read left where it was."""

from __future__ import annotations

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state.offsets import NO_TASK, ShardEnd, ShardState, SourceOffset
from tests.unit.planner_fakes import arn, one_stream

A = arn("a")
AT = Position.after("10")


def advance(state: ShardState, end: ShardEnd | None) -> tuple[ShardState, dict]:
    planner = one_stream().planner()
    offset = SourceOffset("tok", 3, {A: {"s0": state}})
    out = planner.advance(offset, {} if end is None else {(A, "s0"): end})
    return out[A]["s0"], planner.holders


STATE = ShardState(
    AT, parents=("p",), task=2, max_records=40, max_bytes=4000, idle=False, polled_ms=5, tip_ms=77
)


def test_a_read_shard_moves_to_its_end_with_budgets_and_task_reset():
    state, holders = advance(
        STATE, ShardEnd(AT, Position.after("20"), records=3, read_at_ms=900, holder="h:1@2")
    )
    assert state == ShardState(
        Position.after("20"),
        parents=("p",),
        task=NO_TASK,
        max_records=-1,
        max_bytes=-1,
        idle=False,
        polled_ms=900,
        tip_ms=0,
    )
    assert holders == {(A, "s0"): "h:1@2"}


def test_a_read_at_the_tip_with_nothing_new_is_idle_and_at_the_tip_now():
    state, _ = advance(STATE, ShardEnd(AT, AT, records=0, at_tip=True, read_at_ms=900))
    assert (state.idle, state.tip_ms, state.position) == (True, 900, AT)


def test_records_at_the_tip_are_not_idle():
    state, _ = advance(STATE, ShardEnd(AT, Position.after("20"), records=2, at_tip=True, read_at_ms=900))
    assert (state.idle, state.tip_ms) == (False, 900)


def test_nothing_read_and_not_at_the_tip_is_not_idle_and_keeps_its_tip_time():
    state, _ = advance(STATE, ShardEnd(AT, AT, records=0, at_tip=False, read_at_ms=900))
    assert (state.idle, state.tip_ms) == (False, 77)


def test_a_read_that_moved_without_reaching_the_tip_forgets_the_tip_time():
    state, _ = advance(STATE, ShardEnd(AT, Position.after("11"), records=1, at_tip=False, read_at_ms=900))
    assert state.tip_ms == 0


def test_a_poll_time_is_never_zero():
    state, _ = advance(STATE, ShardEnd(AT, AT, records=0, read_at_ms=0))
    assert state.polled_ms == 1


def test_a_shard_no_task_read_stays_where_it_was_with_budgets_reset():
    state, holders = advance(STATE, None)
    assert state == ShardState(
        AT, parents=("p",), task=NO_TASK, max_records=-1, max_bytes=-1, polled_ms=5, tip_ms=77
    )
    assert holders == {}
