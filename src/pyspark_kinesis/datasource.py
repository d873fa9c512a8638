"""Thin adapters between Spark's Python Data Source API and the connector's planning and reading.

The reader object is pickled to executors for `read()`, so it carries only the validated config;
the planner (with its AWS client and caches) lives in the driver-side process and is not pickled.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .aws.kinesis import KinesisProxy
from .errors import OptionError
from .model import LATEST, Position
from .sink.options import parse_sink_options
from .sink.writers import KinesisBatchWriter, KinesisStreamWriter, check_schema, check_stream
from .source.fetching import FETCH_ATTEMPTS, ShardLimits, fetch_shard
from .source.offsets import SourceOffset
from .source.options import SourceConfig, parse_options
from .source.planning import Planner, now_ms
from .source.reading import ShardSlice, TaskPlan, read_task
from .source.schema import SPARK_SCHEMA
from .source.store import open_store

log = logging.getLogger(__name__)
_STARTUP_ATTEMPTS = 2  # start-up checks fail in seconds on a wrong endpoint instead of retrying for minutes


def resolve_streams(config: SourceConfig) -> SourceConfig:
    """Check at query start that every stream is reachable (endpoint, credentials, role, existence),
    failing fast with one clear message, and learn each stream's ARN: its identity in offsets."""
    arns = [
        KinesisProxy(spec, agent="planner", max_attempts=_STARTUP_ATTEMPTS).check_stream()
        for spec in config.streams
    ]
    for index, arn in enumerate(arns):
        if arn in arns[:index]:
            raise OptionError(
                "streams" if len(arns) > 1 else "streamName",
                f"names the stream {arn} twice",
                "Name each stream once.",
            )
    return config.with_arns(arns)


class KinesisPartition(InputPartition):
    def __init__(self, plan: Any) -> None:
        super().__init__(plan.task if isinstance(plan, TaskPlan) else 0)
        self.plan = plan


class KinesisDataSource(DataSource):
    """`spark.readStream/read.format("kinesis")` and `df.writeStream/write.format("kinesis")`."""

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> str:
        # Spark calls this at .load(): validating here makes a typo fail there, before any query starts.
        parse_options(self._batch_options(), streaming=False)
        return SPARK_SCHEMA

    def _batch_options(self) -> dict[str, str]:
        options = dict(self.options)
        if not any(k.lower() == "startingposition" for k in options):
            options["startingPosition"] = "TRIM_HORIZON"  # a backfill reads the whole retention by default
        return options

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KinesisStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        config = parse_sink_options(self.options)
        check_schema(schema, config)
        check_stream(config)
        return KinesisBatchWriter(config)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        config = parse_sink_options(self.options)
        check_schema(schema, config)
        check_stream(config)
        return KinesisStreamWriter(config)

    def reader(self, schema: Any) -> DataSourceReader:
        return KinesisBatchReader(parse_options(self._batch_options(), streaming=False))


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: SourceConfig) -> None:
        self.config = resolve_streams(config)
        open_store(config.metadata_path or "").check_writable()
        self._planner: Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_planner": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            config = self.config
            self._planner = Planner(
                config,
                open_store(config.metadata_path or ""),
                functools.partial(KinesisProxy, agent="planner"),
            )
        return self._planner

    # -- driver side ------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        return self.planner.initial_offset().to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_records_per_batch:
            return ReadMaxRows(self.config.max_records_per_batch)
        if self.config.max_bytes_per_batch:
            return ReadMaxBytes(self.config.max_bytes_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.cutoff_ms = now_ms()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        max_rows = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.config.max_records_per_batch
            max_bytes = (
                limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.config.max_bytes_per_batch
            )
        offset = SourceOffset.from_json(start)
        nxt = self.planner.next_offset(offset, max_rows, max_bytes)
        return start if nxt is offset else nxt.to_json()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        offset = SourceOffset.from_json(end)
        if start == end:
            return []
        plans = []
        for task, refs in sorted(offset.tasks().items()):
            kept = [ref for ref in refs if self.config.stream(ref[0]) is not None]
            if len(kept) < len(refs):
                # A batch logged before a restart that removed streams: the removed ones cannot be read
                # (their settings are gone); they leave the query here, as from the next batch on.
                log.warning(
                    "Batch %d: skipping shards of streams no longer in the options: %s",
                    offset.batch,
                    ", ".join(sorted({ref[0] for ref in refs} - {ref[0] for ref in kept})),
                )
            if not kept:
                continue
            slices = tuple(
                ShardSlice(stream, sid, state.position, state.max_records, state.max_bytes, state.closed)
                for stream, sid in kept
                for state in (offset.state((stream, sid)),)
            )
            plans.append(
                KinesisPartition(TaskPlan(offset.token, offset.batch, task, slices, offset.cutoff_ms))
            )
        return plans

    def commit(self, end: dict) -> None:
        """A hint only (it lags a batch and may never come); garbage collection happens in planning."""

    # -- executor side ----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_task(self.config, partition.plan)


class KinesisBatchReader(DataSourceReader):
    """A bounded read for backfills: every shard of every stream from startingPosition to
    endingPosition (default: the moment of the call), one task per shard."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = resolve_streams(config)
        ending = config.ending_position
        self.cutoff_ms = now_ms() if ending.kind == LATEST else int(ending.ts_ms or 0)
        self.starts: dict[str, Position] = {}
        self.shards: list[tuple[str, str, bool]] = []  # (stream, shard, closed)
        for spec in self.config.streams:
            start = spec.starting_position
            self.starts[spec.key] = Position.at_timestamp(now_ms()) if start.kind == LATEST else start
            listed = KinesisProxy(spec, agent="planner").list_shards()
            self.shards += [(spec.key, s.shard_id, s.closed) for s in listed]

    def partitions(self) -> list[InputPartition]:
        return [KinesisPartition(ref) for ref in self.shards]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        config = self.config
        key, shard, closed = partition.plan
        spec = config.stream(key)
        assert spec is not None
        proxy = KinesisProxy(spec, agent="reader", max_attempts=FETCH_ATTEMPTS)
        position = self.starts[key]
        for _chunk in range(1_000_000):  # bounded; every chunk is itself bounded in records and time
            limits = ShardLimits(
                config.max_records_per_shard,
                config.max_bytes_per_shard,
                self.cutoff_ms,
                deadline=time.monotonic() + config.max_fetch_time_ms / 1000.0,
                bytes_per_second=config.shard_read_bytes_per_second,
                closed=closed,
            )
            cols, end = fetch_shard(proxy, shard, position, limits)
            if len(cols):
                yield cols.to_arrow()
            if end.end.is_end or end.reached_cutoff or end.at_tip:
                return
            position = end.end
