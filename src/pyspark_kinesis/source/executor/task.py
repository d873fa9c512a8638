"""A task's bounded read: each shard read within the batch's limits (a fair share of the time each,
up to `MAX_THREADS` at once), its rows held in memory until the task's batch end is recorded. The
exactly-once protocol around it is `protocol`'s; a drained batch's task reads in chunks spilled to
disk instead (`drain`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from ...aws.process_tuning import prepare_worker_process
from ...aws.services import StreamProxy, proxy_for
from ...errors import CheckpointMismatchError
from ...model import ShardRef
from ..options import SourceConfig
from ..state.offsets import BackfillPlan, ShardEnd, ShardPlan, TaskPlan
from .columns import Columns
from .cutting import ShardLimits
from .drain import read_drained
from .pages import ReadContext
from .protocol import MAX_THREADS, exactly_once
from .shard_read import ReadStuckError, ShardRead, fetch_shard

# botocore's attempts per Kinesis call on executors: the read loop retries on within the time budget
FETCH_ATTEMPTS = 3

MAX_BACKFILL_CHUNKS = 1_000_000  # a backfill's chunks per shard at most (each bounded in records and time)


def _fetch_all(
    config: SourceConfig, plan: TaskPlan, expect: Mapping[ShardRef, ShardEnd] | None
) -> dict[ShardRef, tuple[Columns, ShardEnd]]:
    """Read every shard of the task, up to MAX_THREADS at a time. A first attempt (`expect` None)
    gives each shard a fair share of maxFetchTimeMs, measured from when its read starts: with more
    shards than threads, later shards would otherwise start after the time was spent and read
    nothing, batch after batch. A replay reads each shard to its recorded end."""
    proxies = _proxies(config, plan)
    waves = math.ceil(len(plan.shards) / MAX_THREADS)
    share_s = config.max_fetch_time_ms / 1000.0 / max(1, waves)

    def one(piece: ShardPlan) -> tuple[Columns, ShardEnd]:
        limits = ShardLimits(
            max_records=min(piece.max_records, config.max_records_per_shard)
            if piece.max_records > 0
            else config.max_records_per_shard,
            max_bytes=min(piece.max_bytes, config.max_bytes_per_shard)
            if piece.max_bytes > 0
            else config.max_bytes_per_shard,
            cutoff_ms=plan.cutoff_ms,
            deadline=time.monotonic() + share_s,
            bytes_per_second=config.shard_read_bytes_per_second,
            closed=piece.closed,
            fail_on_corrupt_aggregate=config.fail_on_corrupt_aggregate,
            push_wait_s=config.idle_poll_interval_ms / 1000.0,
            hash_range=piece.hash_range,
            last_seq=piece.last_seq,
            first_seq=piece.first_seq,
        )
        recorded = None if expect is None else expect[piece.ref]
        context = ReadContext(
            proxies[piece.stream],
            piece.shard_id,
            limits,
            None if recorded is None else recorded.reached,
            plan.batch,
            batch_key=f"{plan.token}#{plan.batch}",
            holder=piece.holder,
            relay_key=plan.relay_key,
        )
        read = ShardRead(
            config.consumer_type, context, piece.start, recorded, config.fail_on_data_loss, piece.tip_ms
        )
        return read.run()

    if len(plan.shards) == 1:
        piece = plan.shards[0]
        return {piece.ref: one(piece)}
    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(plan.shards))) as pool:
        results = list(pool.map(one, plan.shards))
    return {p.ref: result for p, result in zip(plan.shards, results, strict=True)}


def _proxies(config: SourceConfig, plan: TaskPlan) -> dict[str, StreamProxy]:
    """The Kinesis API of each stream the task reads."""
    proxies: dict[str, StreamProxy] = {}
    for piece in plan.shards:
        spec = config.stream(piece.stream)
        if spec is None:
            raise CheckpointMismatchError(
                f"Batch {plan.batch} reads stream {piece.stream}, which the options no longer name."
            )
        if piece.stream not in proxies:
            proxies[piece.stream] = proxy_for(spec, agent="reader", max_attempts=FETCH_ATTEMPTS)
    return proxies


def read_task(config: SourceConfig, plan: TaskPlan) -> Iterator[pa.RecordBatch]:
    """Run one task of a batch under the protocol above and yield its rows."""
    prepare_worker_process()
    if plan.drain:  # drainInOneBatch: the same protocol, each shard read in chunks spilled to disk
        for batch in read_drained(config, plan, _proxies(config, plan)):
            yield _rows(batch, config)
        return
    results: dict[ShardRef, tuple[Columns, ShardEnd]] = {}

    def read(part: TaskPlan, expect: Mapping[ShardRef, ShardEnd] | None) -> dict[ShardRef, ShardEnd]:
        fetched = _fetch_all(config, part, expect)
        results.update(fetched)
        return {ref: end for ref, (_cols, end) in fetched.items()}

    exactly_once(config, plan, read)
    for piece in plan.shards:
        cols, _end = results[piece.ref]
        for batch in cols.to_batches():
            yield _rows(batch, config)


def _rows(batch: pa.RecordBatch, config: SourceConfig) -> pa.RecordBatch:
    """A batch as the source declares its rows: with the value format's columns (`formats`)."""
    from ..value_columns import with_values

    return with_values(batch, config)


def read_backfill(config: SourceConfig, piece: BackfillPlan) -> Iterator[pa.RecordBatch]:
    """One shard of a batch read, from its start to its cutoff (or its end, or its tip), in chunks each
    bounded by the per-shard limits and maxFetchTimeMs."""
    prepare_worker_process()
    spec = config.stream(piece.stream)
    assert spec is not None, "a batch read's streams come from its own options"
    proxy = proxy_for(spec, agent="reader", max_attempts=FETCH_ATTEMPTS)
    position = piece.start
    for _chunk in range(MAX_BACKFILL_CHUNKS):  # every chunk is itself bounded in records and time
        limits = ShardLimits(
            config.max_records_per_shard,
            config.max_bytes_per_shard,
            piece.cutoff_ms,
            deadline=time.monotonic() + config.max_fetch_time_ms / 1000.0,
            bytes_per_second=config.shard_read_bytes_per_second,
            closed=piece.closed,
            fail_on_corrupt_aggregate=config.fail_on_corrupt_aggregate,
            end_at=piece.end_at,
            hash_range=piece.hash_range,
            last_seq=piece.last_seq,
            first_seq=piece.first_seq,
        )
        cols, end = fetch_shard(proxy, piece.shard_id, position, limits, None, config.fail_on_data_loss)
        for batch in cols.to_batches():
            yield _rows(batch, config)
        if end.reached.is_end or end.reached_cutoff or end.at_tip:
            return
        position = end.reached
    raise ReadStuckError(
        f"shard {piece.shard_id}: the backfill read {MAX_BACKFILL_CHUNKS} chunks without ending"
    )
