"""A model of Spark's micro-batch protocol as the supported lines drive a Python streaming source.

MicroBatchExecution, reduced to what a source sees: the offset log and the commit log (durable at
once, or every few batches with asynchronous progress tracking, where Spark commits to the source only
the offset of the last batch made durable before a newer durable one, as
AsyncProgressTrackingMicroBatchExecution does; stateful queries and AvailableNow are refused there);
a restart that runs the last logged
batch again when it was not committed (on PySpark 4.0/4.1 after `partitions(X, X)`, Spark's
`setLatestSeenOffset`); for each batch `latestOffset` (with its start and read limit from 4.2, none
before), the offset logged, the previous batch's offset committed to the source (also when this
batch's offset did not move: a stateful query's no-data batch, or a batch only another source had
data for), `partitions`, the tasks, the commit log. Tasks run on executors (each keeps its worker's
iterator cache and pacers, lost with it), fail and are retried (spark.task.maxFailures = 4, an
executor lost not counted), run twice (speculation), or not at all (a foreachBatch that uses part of
its DataFrame). The driver dies at chosen points and loses what was not durable.

Every decision is `chance(seed, ...)` of its point (query run, batch, task, attempt), so the same
point decides the same way in a shrunk schedule.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pyspark_kinesis import spark_features
from pyspark_kinesis.source.executor import iterator_cache, pacing
from pyspark_kinesis.source.executor.modes import polling
from pyspark_kinesis.source.state.layout import batch_folder, task_name

from .clock import chance
from .oracle import uid_of
from .store import SimCrash

if TYPE_CHECKING:
    from .run import World

MAX_FAILURES = 4  # spark.task.maxFailures
MAX_ATTEMPTS = 10  # attempts of a task at most (executors lost are not failures, but not for ever)


class DriverCrash(BaseException):
    """The driver process dies at this point."""


class QueryFailed(Exception):
    """A task failed MAX_FAILURES times (or the driver raised): the query stops with `cause`."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


@dataclass
class Checkpoint:
    """The query's checkpoint: offset log and commit log as the running driver knows them, and which
    entries reached storage. With asynchronous progress tracking only every few batches' offsets are
    written (and those batches' commits): the logs on storage have gaps, and a restart re-runs the last
    offset written, as one batch from the one written before it, when its commit was not written."""

    offsets: dict[int, str] = field(default_factory=dict)
    commits: set[int] = field(default_factory=set)
    durable_offsets: set[int] = field(default_factory=set)
    durable_commits: set[int] = field(default_factory=set)

    def log(self, batch: int, offset: str, durable: bool) -> None:
        self.offsets[batch] = offset
        if durable:
            self.durable_offsets.add(batch)

    def commit(self, batch: int, durable: bool) -> None:
        self.commits.add(batch)
        if durable:
            self.durable_commits.add(batch)

    def before(self, batch: int) -> int | None:
        """The batch logged last before `batch` (the logs may have gaps)."""
        if batch - 1 in self.offsets:  # (the common case, without a walk over every batch logged)
            return batch - 1
        return max((b for b in self.offsets if b < batch), default=None)

    def crash(self) -> set[int]:
        """What a restart finds: what reached storage. Returns the batches that run again: the last one
        written if its commit was not, and every one run after it (Spark plans them again)."""
        ran = set(self.commits)
        self.offsets = {b: o for b, o in self.offsets.items() if b in self.durable_offsets}
        self.commits = {b for b in self.commits if b in self.durable_commits and b in self.offsets}
        last = max(self.offsets, default=-1)
        return {b for b in ran if b > last} | ({last} if last >= 0 and last not in self.commits else set())


class Executor:
    """One executor's Python workers, as far as a read keeps anything between batches."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.lose()

    def lose(self) -> None:
        self.iterators = iterator_cache.IteratorCache()
        self.pacer = pacing.Pacer()
        self.iterator_pacer = pacing.Pacer(pacing.ITERATOR_SPACING_S)

    @contextmanager
    def running(self) -> Iterator[None]:
        saved = (polling.ITERATORS, polling.PACER, polling.ITERATOR_PACER)
        polling.ITERATORS, polling.PACER, polling.ITERATOR_PACER = (
            self.iterators,
            self.pacer,
            self.iterator_pacer,
        )
        try:
            yield
        finally:
            polling.ITERATORS, polling.PACER, polling.ITERATOR_PACER = saved


class SparkQuery:
    """One run of the query's driver (a restart makes a new one over the same checkpoint)."""

    def __init__(
        self, world: World, options: dict[str, str], checkpoint: Checkpoint, generation: int
    ) -> None:
        self.world, self.options, self.cp, self.generation = world, options, checkpoint, generation
        setup = world.schedule.setup
        self.seed = setup.seed
        self.line = setup.spark_line if spark_features.ADMISSION_CONTROL else "4.0"
        self.reader: Any = None
        self.crash_at: str | None = None  # the phase of the next batch at which the driver dies
        self.batches_run = 0

    # -- the driver ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Make the reader (Spark asks the source for it at the query's start) and run the last logged
        batch again if it was not committed."""
        self.reader = self.world.new_reader(self.options)
        cp = self.cp
        if not cp.offsets:
            return
        last = max(cp.offsets)
        if self.line == "4.0":
            self.reader.partitions(json.loads(cp.offsets[last]), json.loads(cp.offsets[last]))
        if last not in cp.commits:
            self._run_batch(last, self._start_of(last), cp.offsets[last])
            self._commit(last)

    def _start_of(self, batch: int) -> str:
        before = self.cp.before(batch)
        return self.cp.offsets[before] if before is not None else json.dumps(self.reader.initialOffset())

    def prepare_available_now(self) -> None:
        self.reader.prepareForTriggerAvailableNow()

    def trigger(self) -> bool:
        """One trigger: plan the next batch, run it if there is one. True when a batch ran."""
        cp = self.cp
        batch = max(cp.offsets) + 1 if cp.offsets else 0
        start = self._start_of(batch)
        if self.line == "4.0":
            end = self.reader.latestOffset()
        else:
            end = self.reader.latestOffset(json.loads(start), self.reader.getDefaultReadLimit())
        end_text = json.dumps(end)
        moved = json.loads(end_text) != json.loads(start)
        no_data = (
            not moved
            and self.world.schedule.setup.stateful
            and batch > 0
            and chance(self.seed, "no-data", self.generation, batch, self.world.clock.now_ms // 60_000) < 0.2
        )
        if not moved and not no_data:
            return False
        durable = self._durable(batch)
        cp.log(batch, end_text if moved else start, durable)
        if not self.world.schedule.setup.async_progress:
            if batch > 0:
                self.reader.commit(json.loads(cp.offsets[batch - 1]))
        elif durable:  # (the offset of the last batch written before this one)
            before = max((b for b in cp.durable_offsets if b < batch), default=None)
            if before is not None:
                self.reader.commit(json.loads(cp.offsets[before]))
        self._maybe_crash("after_log")
        self._run_batch(batch, start, cp.offsets[batch])
        self._maybe_crash("before_commit")
        self._commit(batch)
        self.batches_run += 1
        return True

    def _durable(self, batch: int) -> bool:
        setup = self.world.schedule.setup
        return not setup.async_progress or batch % setup.async_every == 0

    def _maybe_crash(self, phase: str) -> None:
        if self.crash_at == phase:
            self.crash_at = None
            raise DriverCrash(phase)

    def _commit(self, batch: int) -> None:
        rows = self._rows.pop(batch, [])
        self.cp.commit(batch, self._durable(batch))
        self.world.oracle.commit(batch, rows, self.world.clock.now_ms)

    _rows: dict[int, list[int]]

    def _run_batch(self, batch: int, start: str, end: str) -> None:
        if not hasattr(self, "_rows"):
            self._rows = {}
        parts = self.reader.partitions(json.loads(start), json.loads(end))
        # (partial: the foreachBatch runs only some tasks, the same ones in every attempt of the batch)
        partial = chance(self.seed, "partial", batch) < self.world.schedule.setup.partial_rate
        ran = [i for i in range(len(parts)) if not partial or chance(self.seed, "partial", batch, i) < 0.5]
        rows: list[int] = []
        for count, index in enumerate(ran):
            if self.crash_at == "mid_tasks" and count == len(ran) // 2:
                self._maybe_crash("mid_tasks")
            rows += self._run_task(batch, index, parts[index])
        self._rows[batch] = rows

    # -- the tasks -------------------------------------------------------------------------------------
    def _run_task(self, batch: int, index: int, part: Any) -> list[int]:
        setup, world = self.world.schedule.setup, self.world
        failures, last = 0, None
        for attempt in range(MAX_ATTEMPTS):
            point = (self.generation, batch, index, attempt)
            executor = world.executors[int(chance(self.seed, "place", *point) * len(world.executors))]
            fate = chance(self.seed, "fate", *point)
            crash = "read" if fate < setup.retry_rate / 2 else "written" if fate < setup.retry_rate else None
            try:
                uids = self._attempt(part, executor, crash)
            except SimCrash:
                executor.lose()  # (the executor died: Spark runs the task elsewhere)
                continue
            except Exception as exc:  # the task's own failure: Spark retries it
                failures, last = failures + 1, exc
                if failures == MAX_FAILURES:
                    raise QueryFailed(exc) from exc
                continue
            world.oracle.task((batch, index, "rows"), uids, world.clock.now_ms)
            if chance(self.seed, "speculate", *point) < setup.speculation_rate and len(world.executors) > 1:
                other = world.executors[(executor.index + 1) % len(world.executors)]
                try:
                    copy = self._attempt(part, other, None)
                except SimCrash:
                    other.lose()
                else:
                    world.oracle.task((batch, index, "rows"), copy, world.clock.now_ms)
            return uids
        raise QueryFailed(
            last or RuntimeError(f"task {index} of batch {batch}: {MAX_ATTEMPTS} attempts lost")
        )

    def _attempt(self, part: Any, executor: Executor, crash: str | None) -> list[int]:
        """One task attempt on `executor`: the reader and partition as Spark ships them (pickled), the
        read, and its rows; `crash` kills the executor in the middle of the read ("read") or right after
        the task's batch end is recorded, before any row leaves ("written")."""
        reader, partition = pickle.loads(pickle.dumps((self.reader, part)))
        world = self.world
        plan = partition.plan
        if crash == "read":
            world.model.crash_at_call = (
                world.model.calls
                + 1
                + int(chance(self.seed, "crash", plan.batch, plan.task, world.model.calls) * 8)
            )
        elif crash == "written":
            name = f"{batch_folder(plan.token, plan.batch)}/{task_name(plan.task)}"
            world.store.crash_after = lambda key: key == name
        try:
            with executor.running():
                batches: list[pa.RecordBatch] = list(reader.read(partition))
        finally:
            world.model.crash_at_call = 0
            world.store.crash_after = None
        return [uid_of(data) for batch in batches for data in batch.column("data").to_pylist()]
