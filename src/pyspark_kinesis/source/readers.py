"""Thin adapters between Spark's Python Data Source API and the connector's planning and reading.

The reader object is pickled to executors for `read()`, so it carries only the validated config; the
planner (with its AWS clients and caches) lives in the driver-side process and is never pickled.
Driver-side modules are imported inside the driver-side methods: an executor that unpickles a reader
loads only what reading needs (`tests/unit/test_architecture.py` checks it).
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .executor.task import BackfillSlice, read_backfill, read_task
from .options import SourceConfig
from .state.offsets import SourceOffset, TaskPlan

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .driver.planner import Planner


class KinesisPartition(InputPartition):
    """One Spark task: a batch's `TaskPlan`, or one shard of a backfill."""

    def __init__(self, plan: TaskPlan | BackfillSlice) -> None:
        super().__init__(plan.task if isinstance(plan, TaskPlan) else 0)
        self.plan = plan


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("kinesis")`: offsets and tasks from the planner, rows from `read_task`."""

    def __init__(self, config: SourceConfig) -> None:
        from .driver.discovery import resolve_streams
        from .state.store import open_store

        self.config = resolve_streams(config)
        open_store(config.metadata_path or "", config.metadata_storage_options).check_writable()
        self._planner: Planner | None = None
        # This run's key for enhanced fan-out reads of subscriptions another executor holds (see
        # `agent.relay`): made here, on the driver, and given to tasks inside their partitions.
        self.relay_key = secrets.token_bytes(32) if self.config.fan_out and self.config.fan_out_relay else b""

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_planner": None, "relay_key": b""}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            from ..aws.kinesis import KinesisProxy
            from .driver.planner import Planner
            from .state.batch_log import BatchEndLog

            self._planner = Planner(
                self.config,
                BatchEndLog.open(self.config.metadata_path or "", self.config.metadata_storage_options),
                functools.partial(KinesisProxy, agent="planner"),
            )
            threading.Thread(
                target=_keep_alive, args=(self._planner,), name="kinesis-live", daemon=True
            ).start()
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
        from .driver.discovery import now_ms

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

    def reportLatestOffset(self) -> dict | None:
        """Lag per stream, shown as `sources[].latestOffset` in the query's progress (see `driver.lag`)."""
        return self.planner.lag.report()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        from .driver.planner import plan_tasks

        if start == end:
            return []
        offset = SourceOffset.from_json(end)
        self.planner.check_replay(offset)
        plans = plan_tasks(offset, self.config, self.planner.holders, self.relay_key)
        return [KinesisPartition(plan) for plan in plans]

    def commit(self, end: dict) -> None:
        """Spark committed the batch `end` ends: the records of it and before it can go (see
        `BatchEndLog.collect`). It lags a batch, and the last batch of a run may never be committed."""
        self.planner.committed(SourceOffset.from_json(end))

    # -- executor side ----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KinesisPartition) and isinstance(partition.plan, TaskPlan)
        yield from read_task(self.config, partition.plan)


def _keep_alive(planner: Planner) -> None:
    """Renew the running query's `live` record under metadataPath while this driver-side process
    lives (see `BatchEndLog.beat`): another query that would share metadataPath refuses to start."""
    from .state.batch_log import LIVE_EVERY_S

    pause = threading.Event()
    while True:  # a daemon thread: it ends with the process (the query's run)
        pause.wait(LIVE_EVERY_S)
        if planner.token is not None:
            try:
                planner.log.beat(planner.token)
            except Exception as exc:  # a passing storage failure: the next beat tries again
                log.warning("metadataPath: could not renew the query's live record: %s", exc)


class KinesisBatchReader(DataSourceReader):
    """`spark.read.format("kinesis")`, a bounded read for backfills: every shard of every stream from
    startingPosition to endingPosition (default: the moment of the call), one task per shard."""

    def __init__(self, config: SourceConfig) -> None:
        from .driver.discovery import backfill_slices, resolve_streams

        self.config = resolve_streams(config)
        self.slices = backfill_slices(self.config)

    def partitions(self) -> list[InputPartition]:
        return [KinesisPartition(piece) for piece in self.slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KinesisPartition) and isinstance(partition.plan, BackfillSlice)
        yield from read_backfill(self.config, partition.plan)
