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
from dataclasses import dataclass, replace

import orjson
import pyarrow as pa

from ..aws.kinesis import KinesisProxy
from ..errors import CheckpointMismatchError
from ..model import Position, ShardRef
from . import faults
from .columns import Columns
from .fetching import FETCH_ATTEMPTS, ShardLimits, fetch_shard
from .offsets import ShardEnd, TaskEnd
from .options import SourceConfig
from .planning import task_key
from .store import open_store

MAX_THREADS = 16


@dataclass(frozen=True)
class ShardSlice:
    stream: str  # the stream's ARN
    shard_id: str
    start: Position
    max_records: int
    max_bytes: int
    closed: bool = False  # known to be closed: read on through empty responses to its end

    @property
    def ref(self) -> ShardRef:
        return (self.stream, self.shard_id)


@dataclass(frozen=True)
class TaskPlan:
    """Everything one Spark task needs; pickled into the InputPartition."""

    token: str
    batch: int
    task: int
    shards: tuple[ShardSlice, ...]
    cutoff_ms: int | None


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


def _check_record(record: TaskEnd, plan: TaskPlan, config: SourceConfig) -> None:
    for piece in plan.shards:
        end = record.shards.get(piece.ref)
        if end is None or end.start != piece.start:
            raise CheckpointMismatchError(
                f"The batch-end record of batch {plan.batch}, task {plan.task} under metadataPath "
                f"'{config.metadata_path}' does not match the checkpoint (shard {piece.shard_id} of "
                f"{piece.stream}). metadataPath must belong to this query's checkpoint only."
            )


def read_task(config: SourceConfig, plan: TaskPlan) -> Iterator[pa.RecordBatch]:
    store = open_store(config.metadata_path or "")
    key = task_key(plan.token, plan.batch, plan.task)
    raw = store.get(key)
    if raw is not None:
        record = TaskEnd.from_json(orjson.loads(raw))
        _check_record(record, plan, config)
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
        if not store.put_if_absent(key, orjson.dumps(mine.to_json())):
            winner = TaskEnd.from_json(orjson.loads(store.get(key) or b"{}"))
            _check_record(winner, plan, config)
            differs = {p.ref for p in plan.shards if winner.shards[p.ref].end != mine.shards[p.ref].end}
            if differs:
                redo = replace(plan, shards=tuple(p for p in plan.shards if p.ref in differs))
                results.update(_fetch_all(config, redo, {ref: winner.shards[ref].end for ref in differs}))
        faults.maybe_fail("after-record")
    for piece in plan.shards:
        cols, _end = results[piece.ref]
        if len(cols):
            yield cols.to_arrow()
