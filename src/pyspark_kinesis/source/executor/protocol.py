"""A task's exactly-once protocol on the executor, whatever keeps its rows until they leave (memory
in `task`, spills on disk in `drain`).

1. If a record of this (batch, task) exists, this is a replay: read each shard exactly to its
   recorded end.
2. Otherwise read within the batch's limits, then try to write the record (atomic, first writer wins).
3. If another attempt (a retry, or a speculative copy) won the race, adopt its ends: shards whose end
   differs are read again up to the winner's end.
Rows leave the task only after its record is durable, so every attempt emits the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from ...model import ShardRef
from ..options import SourceConfig
from ..state.batch_log import BatchEndLog
from ..state.offsets import ShardEnd, TaskEnd, TaskPlan

MAX_THREADS = 16  # shards of one task read at once


def same_read(a: ShardEnd, b: ShardEnd) -> bool:
    """Two reads of a shard that emit the same rows: the same end, first record and count."""
    return a.reached == b.reached and a.first == b.first and a.records == b.records


ReadShards = Callable[[TaskPlan, Mapping[ShardRef, ShardEnd] | None], dict[ShardRef, ShardEnd]]


def exactly_once(config: SourceConfig, plan: TaskPlan, read: ReadShards) -> None:
    """The protocol above, whatever keeps the rows until they leave: `read(plan, expect)` reads the
    plan's shards (a first attempt when `expect` is None, else each to its recorded end), keeps their
    rows aside (a shard read again replaces its rows) and returns where each shard ended."""
    log = BatchEndLog.open(config.metadata_path or "", config.metadata_storage_options)
    starts = {piece.ref: piece.start for piece in plan.shards}
    record = log.read(plan.token, plan.batch, plan.task)
    if record is not None:
        log.check(record, starts)
        _note_losses(log, plan, read(plan, record.shards))
        return
    mine = TaskEnd(plan.token, plan.batch, plan.task, shards=read(plan, None), dropped=plan.dropped)
    winner = log.write(mine)
    if winner is not mine:
        # Another attempt (a retry, a speculative copy, or the driver closing a task it took for
        # one that never ran) recorded first: emit exactly what it recorded. Shards this attempt
        # read differently are read again to the winner's end, with the winner's first record and
        # count checked (data may have aged out between the two attempts).
        log.check(winner, starts)
        again = {p.ref for p in plan.shards if not same_read(winner.shards[p.ref], mine.shards[p.ref])}
        if again:
            ends = read(replace(plan, shards=tuple(p for p in plan.shards if p.ref in again)), winner.shards)
            _note_losses(log, plan, ends)


def _note_losses(log: BatchEndLog, plan: TaskPlan, ends: Mapping[ShardRef, ShardEnd]) -> None:
    """What a replay went on without (failOnDataLoss=false), beside the record it replayed: the record
    describes the first attempt and stands, and the driver reports only what the log holds."""
    lost = {ref: end.losses for ref, end in ends.items() if end.losses}
    if lost:
        log.note_losses(plan.token, plan.batch, plan.task, lost)
