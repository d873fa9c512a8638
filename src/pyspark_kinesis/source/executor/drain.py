"""`drainInOneBatch`: one batch reads every shard of a task to the run's cutoff, with memory bounded.

Why: Spark runs `trigger(once=True)`, and on PySpark 4.0/4.1 `trigger(availableNow=True)` for a Python
source (no SupportsTriggerAvailableNow there), as a single batch. A batch bounded by the per-shard
limits would leave the rest of a backlog to later runs; a batch without bounds would hold the whole
backlog in memory, because a task emits its rows only once its batch-end record is durable (see
`task`), so that every attempt emits the same rows.

How: each shard is read in chunks, each bounded as one shard's read in an ordinary batch is
(maxRecordsPerShard, maxBytesPerShard, maxFetchTimeMs), until the shard reaches the cutoff, its tip
or its end. Every chunk's rows go to a file on the executor's local disk (Spark's local directory) as
Arrow IPC, and its end into the shard's `ShardEnd.chunks`. The task's record is written as always
(first writer wins, the ends summed over the chunks); then the rows are streamed from the files. A
replay reads the recorded chunks one by one, each to its own recorded end with its own first-record
and count checks, so a replay is as exact as an ordinary batch's and as bounded in memory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pyarrow as pa

from ...aws.services import StreamProxy
from ...model import Position, ShardRef
from ..options import SourceConfig
from ..state.offsets import ShardEnd, ShardPlan, TaskPlan
from .columns import Columns
from .cutting import ShardLimits
from .pages import PageSource, ReadContext
from .protocol import MAX_THREADS, exactly_once
from .shard_read import ReadStuckError, ShardRead

MAX_CHUNKS = 1_000_000  # chunks per shard at most (each bounded in records, bytes and time)


def _local_dir() -> str | None:
    """Spark's local directory for this executor (it tells its Python workers), else the system's."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d and os.path.isdir(d)]
    return dirs[0] if dirs else None


class Spill:
    """One shard's rows of a drained batch, as an Arrow IPC stream in a file of the local directory,
    removed when closed."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._sink: pa.NativeFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.rows = 0

    def add(self, cols: Columns) -> None:
        for batch in cols.to_batches():
            if self._writer is None:
                handle, self.path = tempfile.mkstemp(
                    prefix="kinesis-drain-", suffix=".arrows", dir=_local_dir()
                )
                os.close(handle)
                self._sink = pa.OSFile(self.path, "wb")
                self._writer = pa.ipc.new_stream(self._sink, batch.schema)
            self._writer.write_batch(batch)
            self.rows += batch.num_rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows in the order they were read, a chunk's batch at a time (memory-mapped)."""
        if self._writer is None or self.path is None:
            return
        self._finish()
        with pa.memory_map(self.path) as source:
            yield from pa.ipc.open_stream(source)

    def _finish(self) -> None:
        if self._writer is not None and self._sink is not None and not self._sink.closed:
            self._writer.close()
            self._sink.close()

    def close(self) -> None:
        self._finish()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = None


def end_of_chunks(chunks: list[ShardEnd]) -> ShardEnd:
    """The shard's end over its chunks: where the last one stopped and why, from the first one's
    start, the counts and losses added up, the first record the first one that has one read."""
    last = chunks[-1]
    return replace(
        last,
        start=chunks[0].start,
        records=sum(c.records for c in chunks),
        bytes=sum(c.bytes for c in chunks),
        misplaced=sum(c.misplaced for c in chunks),
        first=next((c.first for c in chunks if c.first is not None), None),
        chunks=tuple(chunks),
        losses=tuple(text for c in chunks for text in c.losses),
    )


def done(end: ShardEnd) -> bool:
    """A chunk after which the shard has nothing more for this batch."""
    return end.reached.is_end or end.reached_cutoff or end.at_tip


class Drain:
    """One task's shards read in chunks into spills (a first attempt), or to their recorded chunks
    (a replay, or an attempt that lost the race to record)."""

    def __init__(
        self,
        config: SourceConfig,
        plan: TaskPlan,
        proxies: Mapping[str, StreamProxy],
        pages: Callable[[ReadContext], PageSource] | None = None,
    ) -> None:
        """`pages`: makes each read's page source (tests); by default the read mode of consumerType."""
        self.config, self.plan, self.proxies, self.pages = config, plan, proxies, pages

    def _limits(self, piece: ShardPlan) -> ShardLimits:
        config = self.config
        return ShardLimits(
            max_records=config.max_records_per_shard,
            max_bytes=config.max_bytes_per_shard,
            cutoff_ms=self.plan.cutoff_ms,
            deadline=time.monotonic() + config.max_fetch_time_ms / 1000.0,
            bytes_per_second=config.shard_read_bytes_per_second,
            closed=piece.closed,
            fail_on_corrupt_aggregate=config.fail_on_corrupt_aggregate,
            push_wait_s=config.idle_poll_interval_ms / 1000.0,
            hash_range=piece.hash_range,
            last_seq=piece.last_seq,
            first_seq=piece.first_seq,
        )

    def _read(
        self, piece: ShardPlan, position: Position, recorded: ShardEnd | None, holder: str, tip_ms: int
    ) -> tuple[Columns, ShardEnd]:
        context = ReadContext(
            self.proxies[piece.stream],
            piece.shard_id,
            self._limits(piece),
            None if recorded is None else recorded.reached,
            self.plan.batch,
            batch_key=f"{self.plan.token}#{self.plan.batch}",
            holder=holder,
            relay_key=self.plan.relay_key,
        )
        source = self.config.consumer_type if self.pages is None else self.pages(context)
        read = ShardRead(source, context, position, recorded, self.config.fail_on_data_loss, tip_ms)
        return read.run()

    def first_attempt(self, piece: ShardPlan, spill: Spill) -> ShardEnd:
        chunks: list[ShardEnd] = []
        position, holder, tip_ms = piece.start, piece.holder, piece.tip_ms
        for _chunk in range(MAX_CHUNKS):
            cols, end = self._read(piece, position, None, holder, tip_ms)
            spill.add(cols)
            chunks.append(end)
            if done(end):
                return end_of_chunks(chunks)
            position, holder, tip_ms = end.reached, end.holder, 0
        raise ReadStuckError(
            f"shard {piece.shard_id}: drainInOneBatch read {MAX_CHUNKS} chunks without ending"
        )

    def replay(self, piece: ShardPlan, recorded: ShardEnd, spill: Spill) -> ShardEnd:
        """Each recorded chunk read again to its own end (a record without chunks: as one read). Returns
        the recorded end with what this replay went on without (failOnDataLoss=false) as its losses:
        the record's own losses are the first attempt's, reported already."""
        lost: list[str] = []
        for chunk in recorded.chunks or (recorded,):
            cols, end = self._read(piece, chunk.start, chunk, "", 0)
            spill.add(cols)
            lost += end.losses
        return replace(recorded, losses=tuple(lost))

    def run(
        self, expect: Mapping[ShardRef, ShardEnd] | None, spills: dict[ShardRef, Spill]
    ) -> dict[ShardRef, ShardEnd]:
        """Read every shard of the plan (a first attempt when `expect` is None, else to its recorded
        ends), each into a new spill in `spills` (one it replaces is closed)."""

        def one(piece: ShardPlan) -> ShardEnd:
            old = spills.pop(piece.ref, None)
            if old is not None:
                old.close()
            spill = spills[piece.ref] = Spill()
            if expect is None:
                return self.first_attempt(piece, spill)
            return self.replay(piece, expect[piece.ref], spill)

        if len(self.plan.shards) == 1:
            return {self.plan.shards[0].ref: one(self.plan.shards[0])}
        with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(self.plan.shards))) as pool:
            ends = list(pool.map(one, self.plan.shards))
        return {p.ref: end for p, end in zip(self.plan.shards, ends, strict=True)}


def read_drained(
    config: SourceConfig,
    plan: TaskPlan,
    proxies: Mapping[str, StreamProxy],
    pages: Callable[[ReadContext], PageSource] | None = None,
) -> Iterator[pa.RecordBatch]:
    """A drained batch's task under the protocol of `protocol` (record first, rows after), its rows
    streamed from the spills. Rows as Arrow batches of the source's columns, before value decoding."""
    spills: dict[ShardRef, Spill] = {}
    try:
        exactly_once(
            config, plan, lambda part, expect: Drain(config, part, proxies, pages).run(expect, spills)
        )
        for piece in plan.shards:
            yield from spills[piece.ref].batches()
    finally:
        for spill in list(spills.values()):
            spill.close()
