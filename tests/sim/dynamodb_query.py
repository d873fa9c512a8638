"""The query side of the DynamoDB Streams simulations: Spark's micro-batch protocol reduced to its
offset and commit logs (`Query`), a job that restarts a failed query (`restarted`, `surviving`), and
the world they run in (`make_world`: the simulated clock, the stream model, the metadata store)."""

from __future__ import annotations

import functools
import json
import logging
import pickle
import random
from collections.abc import Callable

from pyspark_kinesis import spark_features
from pyspark_kinesis.aws import client as aws_client
from pyspark_kinesis.aws import dynamodb_streams, gc_freeze
from pyspark_kinesis.aws.services import proxy_for
from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.source import readers
from pyspark_kinesis.source.driver.planner import Planner
from pyspark_kinesis.source.executor import iterator_cache, pacing
from pyspark_kinesis.source.executor import task as task_module
from pyspark_kinesis.source.executor.modes import polling
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state import batch_log as batch_log_module
from pyspark_kinesis.source.state import store as store_module
from pyspark_kinesis.source.state.batch_log import BatchEndLog

from .clock import SimClock, chance, patch_process
from .dynamodb import DynamoStreamModel, ExecutorLost
from .store import SimStore

METADATA = "sim://metadata"
HOUR_MS, MINUTE_MS = 3_600_000, 60_000
KEYS = [f"item-{n}" for n in range(40)]
OPTIONS = {  # (a table's stream, from its oldest change, on the model: its endpoint is never reached)
    "service": "dynamodb",
    "streamName": "orders",
    "region": "us-east-1",
    "endpointUrl": "http://127.0.0.1:9",
    "metadataPath": METADATA,
    "startingPosition": "TRIM_HORIZON",
}


class QueryFailed(Exception):
    """A task failed spark.task.maxFailures times: Spark fails the query, and its job restarts it."""


class Query:
    """Spark's side, reduced: the offset log, the commit log, a restart that runs the last logged batch
    again when it was not committed, a replayed batch's rows replacing its first attempt's."""

    def __init__(
        self,
        options: dict[str, str],
        seed: int = 7,
        generation: int = 0,
        model: DynamoStreamModel | None = None,
    ) -> None:
        self.options, self.seed, self.generation, self.model = options, seed, generation, model
        self.kill_rate = self.copy_rate = 0.0
        self.done = {"killed after its record": 0, "copies": 0, "failed": 0}
        self.offsets: dict[int, str] = {}
        self.commits: set[int] = set()
        self.rows: dict[int, list[tuple[str, int]]] = {}
        self.reader = None

    def start(self) -> None:
        reader = readers.stream_reader(lambda: parse_options(self.options, streaming=True))
        refused = getattr(reader, "error", None)
        if type(refused) is StreamAccessError and "LimitExceeded" in str(refused):
            raise QueryFailed(f"the query's start was throttled: {refused}")  # (the job tries again)
        assert isinstance(reader, readers.KinesisStreamReader), refused or reader
        reader._planner = Planner(
            reader.config, BatchEndLog.open(METADATA), functools.partial(proxy_for, agent="planner")
        )
        self.reader = reader
        if self.offsets:
            last = max(self.offsets)
            if not spark_features.ADMISSION_CONTROL:
                reader.partitions(json.loads(self.offsets[last]), json.loads(self.offsets[last]))
            if last not in self.commits:
                self._run(last)
                self.commits.add(last)

    def _start_of(self, batch: int) -> str:
        return self.offsets[batch - 1] if batch else json.dumps(self.reader.initialOffset())

    def trigger(self, commit: bool = True) -> bool:
        batch = max(self.offsets) + 1 if self.offsets else 0
        start = self._start_of(batch)
        if spark_features.ADMISSION_CONTROL:
            end = self.reader.latestOffset(json.loads(start), self.reader.getDefaultReadLimit())
        else:
            end = self.reader.latestOffset()
        if json.loads(json.dumps(end)) == json.loads(start):
            return False
        self.offsets[batch] = json.dumps(end)
        if batch > 0:
            self.reader.commit(json.loads(self.offsets[batch - 1]))
        self._run(batch)
        if commit:
            self.commits.add(batch)
        return True

    def _run(self, batch: int) -> None:
        parts = self.reader.partitions(json.loads(self._start_of(batch)), json.loads(self.offsets[batch]))
        rows = []
        for index, part in enumerate(parts):
            rows += self._task(batch, index, part)
        self.rows[batch] = rows  # (a replay replaces its first attempt)

    def _task(self, batch: int, index: int, part: object) -> list[tuple[str, int]]:
        """A task as Spark runs it: an attempt may die part-way through its rows (its rows are dropped,
        and the task is tried again), and a speculative copy may run it twice (same rows, one kept)."""
        seed = self.seed
        for attempt in range(4):  # spark.task.maxFailures
            fate = chance(seed, "kill", batch, index, attempt, self.generation)
            if fate < self.kill_rate / 2 and self.model is not None:  # dies in the middle of its reads
                self.model.fail_at_call = self.model.calls + 1 + int(fate * 1000) % 5
            try:
                rows = self._attempt(part, stop_after=1 if fate < self.kill_rate else None)
            except ExecutorLost:
                rows = None
            finally:
                if self.model is not None:
                    self.model.fail_at_call = 0
            if rows is None:
                continue  # (the executor died: Spark tries the task again)
            if chance(seed, "copy", batch, index, attempt, self.generation) < self.copy_rate:
                self.done["copies"] += 1
                assert self._attempt(part, stop_after=None) == rows, "a speculative copy read other rows"
            return rows
        self.done["failed"] += 1
        raise QueryFailed(f"task {index} of batch {batch} failed four times")

    def _attempt(self, part: object, stop_after: int | None) -> list[tuple[str, int]] | None:
        reader, partition = pickle.loads(pickle.dumps((self.reader, part)))  # (as Spark ships them)
        rows = []
        for taken, record_batch in enumerate(reader.read(partition)):
            if stop_after is not None and taken >= stop_after:
                self.done["killed after its record"] += 1
                return None
            for name, new, keys in zip(
                record_batch.column("eventName").to_pylist(),
                record_batch.column("newImage").to_pylist(),
                record_batch.column("keys").to_pylist(),
                strict=True,
            ):
                version = json.loads(new)["version"] if new else 0
                rows.append((json.loads(keys)["id"], int(version) if name != "REMOVE" else -1))
        if stop_after is not None:  # (its rows all read, the executor dies before the task ends)
            self.done["killed after its record"] += 1
            return None
        return rows


def make_world(monkeypatch, seed: int = 7) -> tuple[SimClock, DynamoStreamModel, int]:
    """The simulated clock and stream model, patched into the connector for one test."""
    clock = SimClock()
    model = DynamoStreamModel(clock, seed)
    store = SimStore()
    patch_process(monkeypatch, clock, random.Random(seed))
    monkeypatch.setattr(dynamodb_streams, "dynamodb_streams_client", lambda settings, **kw: model.client())
    monkeypatch.setattr(store_module, "open_store", lambda location, options=None: store)
    monkeypatch.setattr(batch_log_module, "open_store", lambda location, options=None: store)
    monkeypatch.setattr(gc_freeze, "FREEZING", False)
    # (this world's executor caches and pacers: another world's iterators and times mean nothing here)
    monkeypatch.setattr(polling, "ITERATORS", iterator_cache.IteratorCache())
    monkeypatch.setattr(polling, "PACER", pacing.Pacer())
    monkeypatch.setattr(polling, "ITERATOR_PACER", pacing.Pacer(pacing.ITERATOR_SPACING_S))
    monkeypatch.setattr(task_module, "prepare_worker_process", lambda: None)
    monkeypatch.setattr(aws_client, "freeze_long_lived", lambda: None)
    quiet = logging.getLogger("pyspark_kinesis")
    monkeypatch.setattr(quiet, "propagate", False)
    monkeypatch.setattr(quiet, "handlers", [logging.NullHandler()])
    return clock, model, seed


def started(query: Query) -> Query:
    """A query's first start; a throttled one fails and its job starts it again (`restarted`)."""
    try:
        query.start()
    except QueryFailed:
        return restarted(query)
    return query


def restarted(query: Query) -> Query:
    for generation in range(query.generation + 1, query.generation + 4):  # (bounded)
        again = Query(query.options, query.seed, generation, query.model)
        again.kill_rate, again.copy_rate, again.done = query.kill_rate, query.copy_rate, query.done
        again.offsets, again.commits, again.rows = query.offsets, query.commits, query.rows
        try:
            again.start()  # (runs the batch the failed query left uncommitted)
        except QueryFailed:
            query = again
            continue
        return again
    raise AssertionError("a restarted query failed three times in a row")


def surviving(query: Query, trigger: Callable[[], bool]) -> tuple[Query, bool]:
    """A trigger; when a task failed four times (ten in a hundred attempts die, so over a week of
    batches it happens), the query fails and is restarted from its checkpoint, as a job would be."""
    try:
        return query, trigger()
    except QueryFailed:
        return restarted(query), True
