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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from .. import spark_features
from ..errors import KinesisConnectorError, surfaced, surfaced_rows
from .options import SourceConfig
from .state.offsets import BackfillPlan, SourceOffset, TaskPlan

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .driver.planner import Planner


class KinesisPartition(InputPartition):
    """One Spark task: a batch's `TaskPlan`, or one shard of a backfill."""

    def __init__(self, plan: TaskPlan | BackfillPlan) -> None:
        super().__init__(plan.task if isinstance(plan, TaskPlan) else 0)
        self.plan = plan


class KinesisStreamReader(DataSourceStreamReader):
    """`spark.readStream.format("kinesis")`: offsets and tasks from the planner, rows from `read_task`.

    On PySpark 4.2+ Spark hands `latestOffset` the batch's start and read limit; on 4.0/4.1 it calls it
    without arguments (see `spark_features`), and the reader plans from the newest offset it has seen
    instead: the initial one, every offset Spark passed to `partitions`/`commit` (a restarted query's
    last logged offset arrives as `partitions(X, X)`: Spark's `setLatestSeenOffset`), and every one it
    returned. The planner is the same either way: it bounds each batch by the options' limits, and a
    batch planned again gets the offset it was planned with (its marker under metadataPath).
    """

    def __init__(self, config: SourceConfig) -> None:
        from .driver.discovery import resolve_streams
        from .state.store import open_store

        self.config = resolve_streams(config)
        open_store(config.metadata_path or "", config.metadata_storage_options).check_writable()
        self._planner: Planner | None = None
        # This run's key for enhanced fan-out reads of subscriptions another executor holds (see
        # `agent.relay`): made here, on the driver, and given to tasks inside their partitions.
        self.relay_key = secrets.token_bytes(32) if self.config.fan_out and self.config.fan_out_relay else b""
        self._seen: SourceOffset | None = None  # the newest offset Spark showed (PySpark 4.0/4.1)
        self._available_now = False  # PySpark 4.2+: Spark prepared this run for Trigger.AvailableNow
        self._drained = False  # drainInOneBatch: this run planned its one batch
        self._told_backlog = False  # PySpark 4.0/4.1: the run's first planning looked at the backlog

    def __getstate__(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "_planner": None,
            "relay_key": b"",
            "_seen": None,
            "_available_now": False,
            "_drained": False,
        }

    def _see(self, offset: SourceOffset) -> SourceOffset:
        if self._seen is None or offset.batch >= self._seen.batch:
            self._seen = offset
        return offset

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            from ..aws.services import proxy_for
            from .driver.planner import Planner
            from .state.batch_log import BatchEndLog

            self._planner = Planner(
                self.config,
                BatchEndLog.open(self.config.metadata_path or "", self.config.metadata_storage_options),
                functools.partial(proxy_for, agent="planner"),
            )
            threading.Thread(
                target=_keep_alive, args=(self._planner,), name="kinesis-live", daemon=True
            ).start()
        return self._planner

    # -- driver side ------------------------------------------------------------------------------
    @surfaced
    def initialOffset(self) -> dict:
        return self._see(self.planner.initial_offset()).to_json()

    @surfaced
    def getDefaultReadLimit(self) -> spark_features.ReadLimit:
        """(PySpark 4.2+.)"""
        if self.config.max_records_per_batch:
            return spark_features.ReadMaxRows(self.config.max_records_per_batch)
        if self.config.max_bytes_per_batch:
            return spark_features.ReadMaxBytes(self.config.max_bytes_per_batch)
        return spark_features.ReadAllAvailable()

    @surfaced
    def latestOffset(self, start: dict | None = None, limit: spark_features.ReadLimit | None = None) -> dict:
        """The next batch's offset (or `start` when there is nothing to read now). Without arguments
        (PySpark 4.0/4.1), from the newest offset seen and the options' batch limits."""
        max_rows, max_bytes = self.config.max_records_per_batch, self.config.max_bytes_per_batch
        if start is None:
            offset = self._seen if self._seen is not None else self._see(self.planner.initial_offset())
        else:
            offset = SourceOffset.from_json(start)
            if isinstance(limit, spark_features.ReadAllAvailable):
                max_rows = max_bytes = None
            elif isinstance(limit, spark_features.ReadMaxRows):
                max_rows = limit.max_rows
            elif isinstance(limit, spark_features.ReadMaxBytes):
                max_bytes = limit.max_bytes
        if self.config.drain_in_one_batch and not self._available_now:
            self._drain_once()
            max_rows = max_bytes = None
        nxt = self.planner.next_offset(offset, max_rows, max_bytes)
        if start is None and not self._told_backlog and not self.config.drain_in_one_batch:
            from .driver.lag import report_backlog  # (PySpark 4.0/4.1, a run's first planning)

            self._told_backlog = True
            report_backlog(offset.batch, self.planner.recorded_ends(offset))
        if nxt is offset:
            return start if start is not None else offset.to_json()
        return self._see(nxt).to_json()

    def _drain_once(self) -> None:
        """drainInOneBatch: the run's one batch reads every shard to the moment it is planned, in
        chunks (see `executor.drain`). Spark asks a run for one batch under trigger(once=True), and
        under trigger(availableNow=True) on PySpark 4.0/4.1 for a source without
        SupportsTriggerAvailableNow (it runs one batch and stops): a second request means the trigger
        runs batches on, where draining everything in every batch is not what the options asked for."""
        if self._drained:
            from ..errors import OptionError

            raise OptionError(
                "drainInOneBatch",
                "Spark asked this run for a second batch, so the query's trigger is neither "
                "trigger(once=True) nor (PySpark 4.0/4.1) trigger(availableNow=True)",
                "Remove drainInOneBatch from a query that runs on (processingTime or the default trigger); "
                "its batches are bounded by maxRecordsPerBatch/maxBytesPerBatch and the per-shard limits.",
            )
        from .driver.discovery import now_ms

        self._drained = True
        self.planner.read_up_to(now_ms(), drain=True)

    @surfaced
    def reportLatestOffset(self) -> dict | None:
        """Lag per stream, shown as `sources[].latestOffset` in the query's progress (see `driver.lag`)."""
        return self.planner.lag.report()

    @surfaced
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        from .driver.task_plans import plan_tasks

        offset = self._see(SourceOffset.from_json(end))
        if start == end:
            return []
        self.planner.check_logged_batch(offset)
        plans = plan_tasks(
            offset, self.config, self.planner.holders, self.relay_key, self.planner.listed(offset)
        )
        return [KinesisPartition(plan) for plan in plans]

    @surfaced
    def commit(self, end: dict) -> None:
        """Spark committed the batch `end` ends: the records of it and before it can go (see
        `BatchEndLog.collect`). It lags a batch, and the last batch of a run may never be committed."""
        self.planner.committed(self._see(SourceOffset.from_json(end)))

    def stop(self) -> None:
        """The query stops: the driver's looks at idle shards still queued are dropped, not waited for."""
        if self._planner is not None:
            self._planner.probe.close()

    # -- executor side ----------------------------------------------------------------------------
    @surfaced_rows
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KinesisPartition) and isinstance(partition.plan, TaskPlan)
        from .executor.task import read_task  # (the executor's reading code: not in the planner's process)

        yield from read_task(self.config, partition.plan)


if spark_features.ADMISSION_CONTROL:

    class KinesisAvailableNowReader(KinesisStreamReader, spark_features.SupportsTriggerAvailableNow):
        """PySpark 4.2+: `trigger(availableNow=True)` reads what was there when the run started, in as
        many batches as the limits make, then stops."""

        @surfaced
        def prepareForTriggerAvailableNow(self) -> None:
            from .driver.discovery import now_ms

            self._available_now = True  # reads in bounded batches: drainInOneBatch does not apply
            self.planner.read_up_to(now_ms())


class RefusedStreamReader(DataSourceStreamReader):
    """What `streamReader` returns when the query's options or streams are refused: the refusal is
    raised by the first call Spark makes. Spark creates the reader in the query's own thread, after
    `start()` returned, and PySpark's streaming runner calls `stop()` on it in a `finally` that follows a
    failed creation with an `UnboundLocalError` of its own, which reads as the cause; raised from a
    call instead, the connector's message is the last line."""

    def __init__(self, error: KinesisConnectorError) -> None:
        self.error = error

    def _refuse(self) -> Any:
        raise self.error

    initialOffset = surfaced(_refuse)
    getDefaultReadLimit = surfaced(_refuse)
    prepareForTriggerAvailableNow = surfaced(_refuse)

    @surfaced
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return self._refuse()

    @surfaced
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return self._refuse()

    @surfaced
    def commit(self, end: dict) -> None:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._refuse()


def stream_reader(config: Callable[[], SourceConfig]) -> DataSourceStreamReader:
    """The stream reader for the running PySpark (see `spark_features`), from the options `config`
    makes; or, when they or the streams are refused, a reader that says so (`RefusedStreamReader`)."""
    try:
        made = config()
        if spark_features.ADMISSION_CONTROL:
            return KinesisAvailableNowReader(made)
        return KinesisStreamReader(made)
    except KinesisConnectorError as exc:
        return RefusedStreamReader(exc)


def _keep_alive(planner: Planner) -> None:
    """Renew the running query's `live` record under metadataPath while this driver-side process
    lives (see `LiveRecords.beat`): another query that would share metadataPath refuses to start."""
    from .state.batch_log import LIVE_EVERY_S

    pause = threading.Event()
    while True:  # a daemon thread: it ends with the process (the query's run)
        pause.wait(LIVE_EVERY_S)
        try:
            planner.ledger.beat()
        except Exception as exc:  # a passing storage failure: the next beat tries again
            log.warning("metadataPath: could not renew the query's live record: %s", exc)


class KinesisBatchReader(DataSourceReader):
    """`spark.read.format("kinesis")`, a bounded read for backfills: every shard of every stream from
    startingPosition to endingPosition (default: the moment of the call), one task per shard."""

    def __init__(self, config: SourceConfig) -> None:
        from .driver.discovery import backfill_slices, resolve_streams

        self.config = resolve_streams(config)
        self.slices = backfill_slices(self.config)

    @surfaced
    def partitions(self) -> list[InputPartition]:
        return [KinesisPartition(piece) for piece in self.slices]

    @surfaced_rows
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KinesisPartition) and isinstance(partition.plan, BackfillPlan)
        from .executor.task import read_backfill

        yield from read_backfill(self.config, partition.plan)
