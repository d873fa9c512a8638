"""The steps of `Planner.next_offset` that are functions of values: from one batch's recorded ends to
the next batch's shard states, and from the batch shape's assignments to the states the offset holds.

Why apart from the planner: these decide what the offset says, so they are pinned by unit tests on
plain values (no listing, no log, no clock), and a replanned batch derives the same states from the
same recorded ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from ...model import Position, ShardRef
from ..state.offsets import NO_TASK, ShardEnd, ShardState, SourceOffset
from .batch_shape import ShardAssignment

Streams = dict[str, dict[str, ShardState]]


def advanced(offset: SourceOffset, ends: Mapping[ShardRef, ShardEnd]) -> Streams:
    """Shard states after batch `offset.batch`: new positions, idle flags, poll times; budgets and task
    reset. A shard no task read (no end recorded) stays where it was."""
    streams: Streams = {}
    for arn, shards in offset.streams.items():
        states = streams[arn] = {}
        for sid, state in shards.items():
            end = ends.get(ShardRef(arn, sid))
            base = replace(state, task=NO_TASK, max_records=-1, max_bytes=-1)
            if end is None:
                states[sid] = base
                continue
            idle = end.records == 0 and end.at_tip
            # When the shard was last seen at the tip at its new position: now, or as before if the
            # read did not move (see `ShardState.tip_ms`).
            tip = end.read_at_ms if end.at_tip else state.tip_ms if end.reached == state.position else 0
            states[sid] = replace(
                base, position=end.reached, idle=idle, polled_ms=max(end.read_at_ms, 1), tip_ms=tip
            )
    return streams


def renewed(streams: Streams, quiet: Mapping[ShardRef, tuple[Position, int]]) -> Streams:
    """The states with the tip renewed where a look found nothing after a shard's position later than a
    read last found it at the tip there (`tip_probe.TipProbe.quiet`): an idle shard plans no batch, so
    without this the offset's `tip_ms` would be as old as the last batch that read the shard."""
    out = streams
    for (arn, sid), (position, at_ms) in quiet.items():
        state = streams.get(arn, {}).get(sid)
        if state is None or state.position != position or at_ms <= state.tip_ms:
            continue
        if out is streams:
            out = {key: dict(states) for key, states in streams.items()}
        out[arn][sid] = replace(state, tip_ms=at_ms)
    return out


def holders_of(ends: Mapping[ShardRef, ShardEnd]) -> dict[ShardRef, str]:
    """Where each shard's last read kept its continuation (`ShardEnd.holder`): a hint for the next
    batch's tasks (`task_plans.plan_tasks`)."""
    return {ref: end.holder for ref, end in ends.items()}


def assigned(
    streams: Streams, assignments: Mapping[ShardRef, ShardAssignment], closed: Callable[[ShardRef], bool]
) -> Streams:
    """The states with each assigned shard's task and budgets; a shard the listing shows closed is
    marked so (its read ends at the shard's end). Shards without an assignment are not read."""
    out = {arn: dict(states) for arn, states in streams.items()}
    for (arn, sid), slot in assignments.items():
        state = out[arn][sid]
        out[arn][sid] = replace(
            state,
            task=slot.task,
            max_records=slot.max_records,
            max_bytes=slot.max_bytes,
            closed=state.closed or closed(ShardRef(arn, sid)),
        )
    return out
