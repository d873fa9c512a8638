"""A task's exactly-once protocol on the executor.

1. If a record of this (batch, task) exists, this is a replay: read each shard exactly to its
   recorded end.
2. Otherwise read within the batch's limits, then try to write the record (atomic, first writer wins).
3. If another attempt (a retry, or a speculative copy) won the race, adopt its ends: shards whose end
   differs are read again up to the winner's end.
Rows leave the task only after its record is durable, so every attempt emits the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pyarrow as pa

from ..aws.kinesis import KinesisProxy
from ..errors import CheckpointMismatchError
from ..model import Position, ShardRef
from . import faults
from .batch_log import BatchEndLog
from .columns import Columns
from .fetching import FETCH_ATTEMPTS, ShardLimits, fetch_shard
from .offsets import BackfillSlice, ShardEnd, ShardSlice, TaskEnd, TaskPlan
from .options import SourceConfig

MAX_THREADS = 16


def _fetch_all(
    config: SourceConfig, plan: TaskPlan, until: dict[ShardRef, Position] | None
) -> dict[ShardRef, tuple[Columns, ShardEnd]]:
    proxies: dict[str, KinesisProxy] = {}
    for piece in plan.shards:
        spec = config.stream(piece.stream)
        if spec is None:
            raise CheckpointMismatchError(
                f"Batch {plan.batch} reads stream {piece.stream}, which the options no longer name."
            )
        proxies.setdefault(piece.stream, KinesisProxy(spec, agent="reader", max_attempts=FETCH_ATTEMPTS))
    deadline = time.monotonic() + config.max_fetch_time_ms / 1000.0

    def one(piece: ShardSlice) -> tuple[Columns, ShardEnd]:
        limits = ShardLimits(
            max_records=min(piece.max_records, config.max_records_per_shard)
            if piece.max_records > 0
            else config.max_records_per_shard,
            max_bytes=min(piece.max_bytes, config.max_bytes_per_shard)
            if piece.max_bytes > 0
            else config.max_bytes_per_shard,
            cutoff_ms=plan.cutoff_ms,
            deadline=deadline,
            bytes_per_second=config.shard_read_bytes_per_second,
            closed=piece.closed,
        )
        target = None if until is None else until[piece.ref]
        return fetch_shard(
            proxies[piece.stream], piece.shard_id, piece.start, limits, target, config.fail_on_data_loss
        )

    if len(plan.shards) == 1:
        piece = plan.shards[0]
        return {piece.ref: one(piece)}
    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(plan.shards))) as pool:
        results = list(pool.map(one, plan.shards))
    return {p.ref: result for p, result in zip(plan.shards, results, strict=True)}


def read_task(config: SourceConfig, plan: TaskPlan) -> Iterator[pa.RecordBatch]:
    """Run one task of a batch under the protocol above and yield its rows."""
    log = BatchEndLog.open(config.metadata_path or "")
    starts = {piece.ref: piece.start for piece in plan.shards}
    record = log.read(plan.token, plan.batch, plan.task)
    if record is not None:
        log.check(record, starts)
        results = _fetch_all(config, plan, {ref: end.end for ref, end in record.shards.items()})
    else:
        results = _fetch_all(config, plan, None)
        mine = TaskEnd(
            token=plan.token,
            batch=plan.batch,
            task=plan.task,
            shards={ref: end for ref, (_cols, end) in results.items()},
        )
        faults.maybe_fail("before-record")
        winner = log.write(mine)
        if winner is not mine:
            log.check(winner, starts)
            differs = {p.ref for p in plan.shards if winner.shards[p.ref].end != mine.shards[p.ref].end}
            if differs:
                redo = replace(plan, shards=tuple(p for p in plan.shards if p.ref in differs))
                results.update(_fetch_all(config, redo, {ref: winner.shards[ref].end for ref in differs}))
        faults.maybe_fail("after-record")
    for piece in plan.shards:
        cols, _end = results[piece.ref]
        if len(cols):
            yield cols.to_arrow()


def read_backfill(config: SourceConfig, piece: BackfillSlice) -> Iterator[pa.RecordBatch]:
    """One shard of a batch read, from its start to its cutoff (or its end, or its tip), in chunks each
    bounded by the per-shard limits and maxFetchTimeMs."""
    spec = config.stream(piece.stream)
    assert spec is not None, "a batch read's streams come from its own options"
    proxy = KinesisProxy(spec, agent="reader", max_attempts=FETCH_ATTEMPTS)
    position = piece.start
    for _chunk in range(1_000_000):  # bounded; every chunk is itself bounded in records and time
        limits = ShardLimits(
            config.max_records_per_shard,
            config.max_bytes_per_shard,
            piece.cutoff_ms,
            deadline=time.monotonic() + config.max_fetch_time_ms / 1000.0,
            bytes_per_second=config.shard_read_bytes_per_second,
            closed=piece.closed,
        )
        cols, end = fetch_shard(proxy, piece.shard_id, position, limits)
        if len(cols):
            yield cols.to_arrow()
        if end.end.is_end or end.reached_cutoff or end.at_tip:
            return
        position = end.end
