"""Thin adapters between Spark's Python Data Source API and the connector's planning and reading.

The reader object is pickled to executors for `read()`, so it carries only the validated config;
the planner (with its AWS client and caches) lives in the driver-side process and is not pickled.
"""

from __future__ import annotations

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
from .fetching import ShardLimits, fetch_shard
from .offsets import SourceOffset
from .options import SourceConfig, parse_options
from .planning import Planner, now_ms
from .positions import LATEST, Position
from .reading import ShardSlice, TaskPlan, read_task
from .schema import SPARK_SCHEMA
from .sink import KinesisBatchWriter, KinesisStreamWriter, check_schema, check_stream
from .sink_options import parse_sink_options
from .store import open_store

log = logging.getLogger(__name__)
_STARTUP_ATTEMPTS = 2  # start-up checks fail in seconds on a wrong endpoint instead of retrying for minutes


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
        self.config = config
        KinesisProxy(config.stream_name, config.aws, max_attempts=_STARTUP_ATTEMPTS).check_stream()
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
                lambda: KinesisProxy(config.stream_name, config.aws),
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
        for task, shard_ids in sorted(offset.tasks().items()):
            slices = tuple(
                ShardSlice(
                    sid,
                    offset.shards[sid].position,
                    offset.shards[sid].max_records,
                    offset.shards[sid].max_bytes,
                )
                for sid in shard_ids
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
    """A bounded read for backfills: every shard from startingPosition to endingPosition (default: the
    moment of the call), one task per shard."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        proxy = KinesisProxy(config.stream_name, config.aws, max_attempts=_STARTUP_ATTEMPTS)
        proxy.check_stream()
        ending = config.ending_position
        self.cutoff_ms = now_ms() if ending.kind == LATEST else int(ending.ts_ms or 0)
        start = config.starting_position
        self.start = Position.at_timestamp(now_ms()) if start.kind == LATEST else start
        self.shard_ids = [s.shard_id for s in proxy.list_shards()]

    def partitions(self) -> list[InputPartition]:
        return [KinesisPartition(sid) for sid in self.shard_ids]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        config = self.config
        proxy = KinesisProxy(config.stream_name, config.aws)
        position = self.start
        for _chunk in range(1_000_000):  # bounded; every chunk is itself bounded in records and time
            limits = ShardLimits(
                config.max_records_per_shard,
                config.max_bytes_per_shard,
                self.cutoff_ms,
                deadline=time.monotonic() + config.max_fetch_time_ms / 1000.0,
            )
            cols, end = fetch_shard(proxy, partition.plan, position, limits)
            if len(cols):
                yield cols.to_arrow()
            if end.end.is_end or end.reached_cutoff or end.at_tip:
                return
            position = end.end
