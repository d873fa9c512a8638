"""The runner: a world (the Kinesis model, the store under metadataPath, the executors, the oracle), the
schedule applied to it on the simulated clock, and the query's driver runs over one checkpoint; then a
final drain and the end-of-run checks. `python -m tests.sim.run --seeds N --days D` runs many seeds and
prints the figures; a failing seed is shrunk to the fewest events that still fail, and printed as a
schedule `--replay` runs again.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import logging
import multiprocessing
import random
import re
import subprocess
import sys
import time as wall
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.aws import client as aws_client
from pyspark_kinesis.aws import gc_freeze
from pyspark_kinesis.aws import kinesis as aws_kinesis
from pyspark_kinesis.aws.kinesis import KinesisProxy
from pyspark_kinesis.errors import DataLossError, StreamAccessError
from pyspark_kinesis.kpl import deaggregate
from pyspark_kinesis.model import RETENTION_MARGIN_MS
from pyspark_kinesis.sink import writers
from pyspark_kinesis.sink.options import parse_sink_options
from pyspark_kinesis.sink.producing import Producer
from pyspark_kinesis.source import readers
from pyspark_kinesis.source.driver import discovery
from pyspark_kinesis.source.driver.planner import Planner
from pyspark_kinesis.source.executor import task as task_module
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state import batch_log as batch_log_module
from pyspark_kinesis.source.state import store as store_module
from pyspark_kinesis.source.state.batch_log import BatchEndLog

from .clock import SimClock, chance, patch_process
from .kinesis import Faults, Flavor, KinesisModel, Stream, md5_hash
from .oracle import Oracle, Violation, kcl_hash, payload, uid_of
from .schedule import DAY_MS, HOUR_MS, Event, Schedule, draw
from .spark import Checkpoint, DriverCrash, Executor, QueryFailed, SparkQuery
from .store import SimCrash, SimStore

METADATA = "sim://metadata"
# The driver's loggers whose warnings report a loss (failOnDataLoss=false): the listings' and the
# checks of positions the options name.
LOSS_LOGGERS = ("pyspark_kinesis.source.driver.discovery", "pyspark_kinesis.source.driver.named_positions")
ENDPOINT = "http://127.0.0.1:9"  # (never reached: every client is the model's)
ARN = re.compile(r"arn:aws:kinesis:[\w-]+:\d+:stream/[\w.-]+")
SHARD = re.compile(r"shard (shardId-\d+)")
DRAIN_TRIGGERS = 3_000  # the final drain's triggers at most
AVAILABLE_NOW_BATCHES = 400  # an AvailableNow run that plans more has not ended
SPARK_TASK_ATTEMPTS = 4  # spark.task.maxFailures' default: a failed task is tried again 3 times
DATA_KINDS = ("put", "split", "merge", "scale", "faults")


@dataclass
class Figures:
    """What a run did, for the printed summary."""

    days: float = 0.0
    batches: int = 0
    restarts: int = 0
    crashes: int = 0
    records: int = 0
    losses: int = 0
    reshards: int = 0
    sink_rows: int = 0
    sink_failures: int = 0  # write jobs that failed all their task attempts in an outage
    quota_refusals: int = 0
    wall_s: float = 0.0


@dataclass
class World:
    schedule: Schedule
    clock: SimClock = field(init=False)
    model: KinesisModel = field(init=False)
    store: SimStore = field(init=False)
    oracle: Oracle = field(init=False)
    executors: list[Executor] = field(init=False)
    figures: Figures = field(default_factory=Figures)

    def __post_init__(self) -> None:
        setup = self.schedule.setup
        self.clock = SimClock()
        self.start_ms = self.clock.now_ms
        self.model = KinesisModel(self.clock, setup.seed)
        self.store = SimStore()
        self.oracle = Oracle(self.start_ms)
        # (a running query reads or looks at every shard at least each idle step, its looks trusted to the
        # retention less a margin: see `Oracle.start_aged_out`)
        self.oracle.look_gap_ms = self.schedule.setup.idle_step_ms + 2 * RETENTION_MARGIN_MS
        self.executors = [Executor(n) for n in range(setup.executors)]
        self.streams: list[Stream] = [
            self.model.create(
                f"sim-{n}", setup.shards, setup.retention_h, Flavor(setup.flavor), setup.trimmed_seq_error
            )
            for n in range(setup.streams)
        ]
        self.pending = list(self.schedule.events)  # (in time order)
        self.next_uid = 1
        self.overrides: dict[str, Any] = {"fail_on_data_loss": True}
        self.running = False
        self.down_since: int | None = self.start_ms
        self.query: SparkQuery | None = None
        self.checkpoint = Checkpoint()
        self.generation = 0
        self.restart_at: int | None = self.start_ms
        self.crash_phase: str | None = None
        self.last_activity = -DAY_MS
        self.model.before_call = self._data_events
        self.store.on_task_record = self._task_record
        self.store.on_loss_note = self._loss_note

    # -- the process the connector runs in ------------------------------------------------------------
    def install(self, patches: pytest.MonkeyPatch) -> None:
        patch_process(patches, self.clock, random.Random(self.schedule.setup.seed))
        patches.setattr(
            aws_kinesis,
            "kinesis_client",
            lambda settings, max_attempts=None, **kw: self.model.client(max_attempts),
        )
        patches.setattr(store_module, "open_store", lambda location, options=None: self.store)
        patches.setattr(batch_log_module, "open_store", lambda location, options=None: self.store)
        patches.setattr(gc_freeze, "FREEZING", False)
        patches.setattr(task_module, "prepare_worker_process", lambda: None)  # (no mallopt, no freeze)
        patches.setattr(writers, "prepare_worker_process", lambda: None)
        patches.setattr(aws_client, "freeze_long_lived", lambda: None)
        aws_kinesis._same_stream_checked.clear()
        handler = _LossLog(self)
        for name in LOSS_LOGGERS:
            logging.getLogger(name).addHandler(handler)
        self._handler = handler
        quiet = logging.getLogger("pyspark_kinesis")  # (the connector's log: not the simulation's output)
        patches.setattr(quiet, "propagate", False)
        patches.setattr(quiet, "handlers", [logging.NullHandler()])

    def uninstall(self) -> None:
        for name in LOSS_LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)

    def options(self) -> dict[str, str]:
        setup, over = self.schedule.setup, self.overrides
        opts = {
            "streamName": ",".join(s.name for s in self.streams),
            "region": "us-east-1",
            "endpointUrl": ENDPOINT,
            "metadataPath": METADATA,
            "startingPosition": "TRIM_HORIZON",
            "failOnDataLoss": str(over["fail_on_data_loss"]).lower(),
            "idlePollIntervalMs": "500",
            "shardDiscoveryIntervalMs": "30000",
            "maxFetchTimeMs": "2000",
        }
        max_records = over.get("max_records", setup.max_records)
        if max_records:
            opts["maxRecordsPerBatch"] = str(max_records)
        target = over.get("target_tasks", setup.target_tasks)
        if target:
            opts["targetTasks"] = str(target)
        return opts

    def new_reader(self, options: dict[str, str]) -> Any:
        """The stream reader as Spark makes it at a query's start, with its planner made as its
        `planner` property makes it (less the live record's thread: the runner beats instead)."""
        reader = readers.stream_reader(lambda: parse_options(options, streaming=True))
        assert isinstance(reader, readers.KinesisStreamReader), getattr(reader, "error", reader)
        reader._planner = Planner(
            reader.config, BatchEndLog.open(METADATA), functools.partial(KinesisProxy, agent="planner")
        )
        return reader

    # -- what the schedule does -----------------------------------------------------------------------
    def _data_events(self) -> None:
        """Data and stream events whose moment came: applied at every Kinesis call too, so puts and
        reshards land in the middle of reads."""
        now = self.clock.now_ms - self.start_ms
        while self.pending and self.pending[0].at_ms <= now and self.pending[0].kind in DATA_KINDS:
            self._apply(self.pending.pop(0))

    def _apply(self, event: Event) -> None:
        args = event.args
        if event.kind == "put":
            self.last_activity = self.clock.now_ms
            self._put(self.streams[args["stream"] % len(self.streams)], args)
        elif event.kind in ("split", "merge", "scale"):
            stream = self.streams[args["stream"] % len(self.streams)]
            shards = self.model.open_shards(stream)
            pick = shards[int(args["roll"] * len(shards))]
            if event.kind == "split":
                self.model.split(stream, pick.sid, pick.low + (pick.high - pick.low + 1) // 2)
            elif event.kind == "merge" and len(shards) > 1:
                index = min(int(args["roll"] * len(shards)), len(shards) - 2)
                self.model.merge(stream, shards[index].sid, shards[index + 1].sid)
            elif event.kind == "scale":
                self.model.scale(stream, args["count"])
            self.figures.reshards += 1
        elif event.kind == "faults":
            self.model.faults = Faults(
                self.clock.now_ms + args["for_ms"], args["rate"], frozenset(args["calls"]), args["code"]
            )
        elif event.kind == "stop":
            self._stop()
        elif event.kind == "start":
            self.overrides.update(args)
            if "executors" in args:
                self.executors = [Executor(n) for n in range(args["executors"])]
            self.restart_at = self.clock.now_ms
        elif event.kind == "crash":
            self.crash_phase = args["phase"]
        elif event.kind == "lose_executor":
            self.executors[args["executor"] % len(self.executors)].lose()
        elif event.kind == "sink":
            self._sink(args)
        elif event.kind == "efo_start":
            self._efo_start()

    def _uid(self) -> int:
        self.next_uid += 1
        return self.next_uid

    def _put(self, stream: Stream, args: dict[str, Any]) -> None:
        """The producer: plain records, KPL aggregates packed per shard, aggregates a stale shard map
        put in the wrong shard (their misplaced user records re-sent where they belong, as the KPL does),
        and aggregates with explicit hash keys that are no number."""
        style, count = args["style"], args["count"]
        seed = self.schedule.setup.seed
        keys = [f"k{int(chance(seed, 'key', self.next_uid, n) * args['keys'])}" for n in range(count)]
        retention = stream.keeps_ms  # (when each record ages out, as the server keeps it)
        if style == "plain":
            for key in keys:
                uid = self._uid()
                shard = self.model.put(stream, key, None, payload(uid), (uid,))
                self.oracle.expect(uid, stream.arn, shard.sid, key, self.clock.now_ms, retention)
            self.figures.records += count
            return
        shards = self.model.open_shards(stream)
        closed = [
            s
            for s in stream.shards.values()
            if not s.open and self.clock.now_ms - (s.closed_ms or 0) < 2 * HOUR_MS
        ]
        if style == "stale" and closed:
            target = closed[-1]  # the shard a stale map still sends these keys to
            members = [(k, None) for k in _keys_in(target.low, target.high, count, seed, self.next_uid)]
        elif style == "hostile":
            hostile = ["²", "١٢", "9" * 50, str(2**128), "1_0"]
            members = [(k, None) for k in keys[: max(1, count // 2)]]
            members += [(f"h{self._uid()}", hostile[n % len(hostile)]) for n in range(count - len(members))]
        else:  # an aggregate of one shard's keys, as the KPL packs
            where = shards[int(chance(seed, "agg", self.next_uid) * len(shards))]
            members = [(k, None) for k in _keys_in(where.low, where.high, count, seed, self.next_uid)]
        aggregator = RecordAggregator()
        uids = []
        for key, explicit in members:
            uid = self._uid()
            uids.append(uid)
            aggregator.add_user_record(key, payload(uid), explicit)
        _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
        first_key = members[0][0]
        shard = self.model.put(stream, first_key, str(md5_hash(first_key)), blob, tuple(uids))
        resend = []
        for uid, (key, explicit) in zip(uids, members, strict=True):
            where = kcl_hash(key, explicit)
            if where is None or shard.low <= where <= shard.high:
                self.oracle.expect(uid, stream.arn, shard.sid, key, self.clock.now_ms, retention)
            else:
                resend.append((uid, key))
        for uid, key in resend:  # (the KPL re-sends what its stale map put in the wrong shard)
            again = self.model.put(stream, key, None, payload(uid), (uid,))
            self.oracle.expect(uid, stream.arn, again.sid, key, self.clock.now_ms, retention)
        self.figures.records += len(members)

    # -- the query's life ------------------------------------------------------------------------------
    def _stop(self) -> None:
        if self.query is not None:
            self.query = None
            self.down_since = self.clock.now_ms
        self.restart_at = None

    def _down(self, restart_after_ms: int) -> None:
        self.query = None
        self.down_since = self.clock.now_ms
        self.restart_at = self.clock.now_ms + restart_after_ms

    def _start(self) -> None:
        """A (re)start of the query's driver over the checkpoint."""
        if self.down_since is not None:
            self.oracle.downtimes.append((self.down_since, self.clock.now_ms))
        self.down_since = None
        self.restart_at = None
        self.generation += 1
        self.figures.restarts += 1
        self.query = SparkQuery(self, self.options(), self.checkpoint, self.generation)
        self._guarded(self.query.start)

    def _guarded(self, step: Callable[[], Any]) -> Any:
        """Run a driver step; what ends the query (a crash, a failure) is handled here."""
        assert self.query is not None
        query = self.query
        if self.crash_phase is not None:
            query.crash_at, self.crash_phase = self.crash_phase, None
        try:
            return step()
        except (DriverCrash, SimCrash):
            self.figures.crashes += 1
            self.oracle.uncommit(self.checkpoint.crash())
            self._down(30_000)
        except QueryFailed as failed:
            self._failed(failed.cause)
        except Violation:
            raise
        except Exception as exc:  # (raised by the driver: its planning, its checks)
            self._failed(exc)
        return None

    def _failed(self, cause: BaseException) -> None:
        """The query stopped with `cause`. A data loss must be a real one (then the user accepts it and
        restarts with failOnDataLoss=false); a stream access error is what an outage of the schedule's
        may end in (restarted after it); anything else is a defect."""
        retention = self.streams[0].retention_ms
        if isinstance(cause, DataLossError):
            text = str(cause)
            stream = ARN.search(text)
            shard = SHARD.search(text)
            self.figures.losses += 1
            self.oracle.loss_reported(
                stream.group(0) if stream else "",
                shard.group(1) if shard else None,
                text,
                self.clock.now_ms,
                retention,
            )
            self.overrides["fail_on_data_loss"] = False
            self._down(60_000)
            return
        if isinstance(cause, StreamAccessError) and self.model.faults.until_ms > self.clock.now_ms - 600_000:
            self._down(max(60_000, self.model.faults.until_ms - self.clock.now_ms + 1_000))
            return
        raise Violation(
            "query-failed", f"{type(cause).__name__}: {cause}", self.oracle.now(self.clock.now_ms)
        )

    def _task_record(self, record: Any) -> None:
        for (stream, shard), end in record.shards.items():
            for text in end.losses:
                self.figures.losses += 1
                self.oracle.loss_reported(
                    stream, shard, text, self.clock.now_ms, self.streams[0].retention_ms
                )

    def _loss_note(self, note: dict[str, Any]) -> None:
        for stream, shards in note["streams"].items():
            for shard, texts in shards.items():
                for text in texts:
                    self.figures.losses += 1
                    self.oracle.loss_reported(
                        stream, shard, text, self.clock.now_ms, self.streams[0].retention_ms
                    )

    # -- the run ---------------------------------------------------------------------------------------
    def run(self) -> Figures:
        setup = self.schedule.setup
        started = wall.monotonic()
        end_ms = self.start_ms + int(setup.days * DAY_MS)
        while self.clock.now_ms < end_ms:
            self._events_due()
            if self.query is None and self.restart_at is not None and self.clock.now_ms >= self.restart_at:
                self._start()
            busy = False
            if self.query is not None:
                busy = self._trigger()
                self.oracle.metadata(list(self.store.data), self.clock.now_ms)
            # (triggers come every trigger_ms while batches run or records came within the last half
            # minute; in between they are sampled every idle_step_ms: a faster trigger only adds looks)
            quiet = self.clock.now_ms - self.last_activity > 30_000 and not busy
            step = setup.idle_step_ms if quiet else setup.trigger_ms
            self._advance(min(self.clock.now_ms + step, end_ms))
        self._drain()
        self.oracle.final(self.clock.now_ms)
        self.figures.days = setup.days
        self.figures.quota_refusals = len(self.model.violations)
        self.figures.wall_s = wall.monotonic() - started
        return self.figures

    def _events_due(self) -> None:
        now = self.clock.now_ms - self.start_ms
        while self.pending and self.pending[0].at_ms <= now:
            self._apply(self.pending.pop(0))

    def _advance(self, to_ms: int) -> None:
        """Move the clock to `to_ms`, or to the next event's moment if sooner (events then apply)."""
        if self.pending:
            to_ms = min(to_ms, self.start_ms + self.pending[0].at_ms)
        if self.restart_at is not None and self.query is None:
            to_ms = min(to_ms, max(self.restart_at, self.clock.now_ms))
        self.clock.advance_to(to_ms)

    def _trigger(self) -> bool:
        """A processing-time trigger, or (trigger=available_now) an AvailableNow run: the run's batches
        until it plans none (each run is a new driver, as a scheduled job is)."""
        assert self.query is not None
        if self.schedule.setup.trigger != "available_now":
            ran = bool(self._guarded(self.query.trigger))
            self.figures.batches += int(ran)
            return ran
        cutoff = self.clock.now_ms
        ran = self._available_now_run()
        if ran is not None:
            self._check_drained(cutoff)
        # the job's next run in an hour or so; the driver is gone between runs
        self._down(HOUR_MS)
        return bool(ran)

    def _available_now_run(self) -> int | None:
        assert self.query is not None
        if self.query.line == "4.0":
            return int(bool(self._guarded(self.query.trigger)))
        if self._guarded(self.query.prepare_available_now) is None and self.query is None:
            return None
        for count in range(AVAILABLE_NOW_BATCHES):
            if self.query is None:
                return None
            ran = self._guarded(self.query.trigger)
            if self.query is None:
                return None
            self.figures.batches += int(bool(ran))
            if not ran:
                return count
        raise Violation(
            "available-now-endless",
            f"an AvailableNow run planned {AVAILABLE_NOW_BATCHES} batches without ending",
            self.oracle.now(self.clock.now_ms),
        )

    def _check_drained(self, cutoff_ms: int) -> None:
        """An AvailableNow run (PySpark 4.2+) that ended delivered every record that arrived before it
        started, unless it aged out."""
        if self.query is None or self.query.line == "4.0":
            return
        left = [
            r for r in self.oracle.expected.values()
            if r.uid not in self.oracle.delivered and r.arrival_ms < cutoff_ms - 1000 and r.trimmed_ms > self.clock.now_ms
        ]  # fmt: skip
        if left:
            raise Violation(
                "available-now-short",
                f"an AvailableNow run ended with {len(left)} records put before it unread, e.g. {left[0]}",
                self.oracle.now(self.clock.now_ms),
            )

    def _drain(self) -> None:
        """The end: no more faults, crashes or puts; the query runs (or is started) until it has read
        everything it can."""
        self.pending = [e for e in self.pending if e.kind in ("split", "merge", "scale")]
        self.model.faults = Faults()
        self.crash_phase = None
        self.overrides["fail_on_data_loss"] = False
        setup = self.schedule.setup
        if setup.trigger == "available_now":
            self.schedule = replace(self.schedule, setup=replace(setup, trigger="processing"))
        idle = 0
        for _trigger in range(DRAIN_TRIGGERS):
            self._events_due()
            if self.query is None:
                self._start()
                continue
            ran = self._trigger()
            idle = 0 if ran else idle + 1
            if idle >= 20 and not self.pending:
                return
            self._advance(self.clock.now_ms + 5_000)
        raise Violation(
            "drain-endless",
            f"the final drain did not end in {DRAIN_TRIGGERS} triggers",
            self.oracle.now(self.clock.now_ms),
        )

    # -- the sink ----------------------------------------------------------------------------------------
    def _sink(self, args: dict[str, Any]) -> None:
        """A write of `rows` rows (aggregated, in key order) to an output stream, through the sink's own
        partition writer; with `reshard`, the stream splits between the task's listing and its first
        put. A task that fails is tried again as Spark does (spark.task.maxFailures, 4 attempts); it may
        fail only with the connector's own error while the schedule's outage lasts. Read back as the KCL
        reads: each attempt's rows at most once and each key's rows in the order written, all of them
        for the attempt that succeeded, and no more put again than one buffer held."""
        setup = self.schedule.setup
        if not hasattr(self, "out"):
            self.out = self.model.create("sim-out", 1, 24, Flavor.SERVICE, False)
        keys = [
            f"s{int(chance(setup.seed, 'sink', n, self.next_uid) * args['keys'])}"
            for n in range(args["rows"])
        ]
        listed: list[bool] = []
        for _attempt in range(SPARK_TASK_ATTEMPTS):
            # (each attempt's rows carry their own uids, so a reader of the stream tells the attempts apart)
            rows = [(key, self._uid()) for key in keys]
            # (the records already there hold none of these uids: the read-back starts after them)
            before = {sid: len(shard.recs) for sid, shard in self.out.shards.items()}
            try:
                self._sink_attempt(rows, args, listed)
            except StreamAccessError as exc:
                self._sink_read_back(rows, before, complete=False)
                if self.model.faults.until_ms <= self.clock.now_ms - 600_000:
                    raise Violation(
                        "sink-failed", f"outside an outage: {exc}", self.oracle.now(self.clock.now_ms)
                    ) from None
                continue
            self._sink_read_back(rows, before, complete=True)
            self.figures.sink_rows += len(rows)
            return
        self.figures.sink_failures += (
            1  # (the write job failed with the connector's error: the user runs it again)
        )

    def _sink_attempt(self, rows: list[tuple[str, int]], args: dict[str, Any], listed: list[bool]) -> None:
        """One task attempt of the write, within the bounds the sink states for what it holds."""
        setup, out, seed = self.schedule.setup, self.out, self.schedule.setup.seed
        real = writers._router

        def router(config: Any, stream: str, every: bool = False) -> Any:
            got = real(config, stream, every)
            listed.append(every)
            if args["reshard"] and len(listed) == 1:
                shards = self.model.open_shards(out)
                pick = shards[int(chance(seed, "sink-split", self.next_uid) * len(shards))]
                self.model.split(out, pick.sid, pick.low + (pick.high - pick.low + 1) // 2)
            return got

        config = parse_sink_options(
            {
                "streamName": out.name,
                "region": "us-east-1",
                "endpointUrl": ENDPOINT,
                "aggregate": "true",
                "preserveOrder": "true",
                "maxRetryTimeMs": "600000",
            }
        )
        patches = pytest.MonkeyPatch()
        patches.setattr(writers, "_router", router)
        patches.setattr(writers, "Producer", functools.partial(Producer, buffer_records=setup.sink_buffer))
        patches.setattr(writers, "MAX_RECORD_BYTES", 400)
        # What the producer keeps after a flush (misplaced aggregates with their members, and what it held
        # back behind them): the repair must take it after every flush, so no more than one buffer's
        # worth is ever held.
        peak = [0]
        real_flush = Producer.flush

        def flush(producer: Producer) -> None:
            real_flush(producer)
            peak[0] = max(peak[0], sum(len(lane.misplaced) + len(lane.pending) for lane in producer.lanes))

        patches.setattr(Producer, "flush", flush)
        patches.setattr(self.model, "put_failure_rate", 0.1)
        try:
            batch = pa.RecordBatch.from_pydict(
                {"data": [payload(uid) for _k, uid in rows], "partitionKey": [k for k, _u in rows]}
            )
            writers.write_partition(config, iter([batch]))
        finally:
            patches.undo()
            if peak[0] > setup.sink_buffer:
                raise Violation(
                    "sink-memory",
                    f"{peak[0]} misplaced or held-back entries kept at once: more than a buffer's {setup.sink_buffer}",
                    self.oracle.now(self.clock.now_ms),
                )

    def _sink_read_back(self, rows: list[tuple[str, int]], before: dict[str, int], complete: bool) -> None:
        """The output stream read as the KCL reads it (misplaced user records dropped), for one attempt:
        each shard from the record count it had when the attempt began (`before`), not from its start,
        so that a long run's read-backs do not grow with everything written before."""
        mine = {uid for _k, uid in rows}
        seen: dict[str, list[int]] = {}
        put = 0
        for sid, shard in self.out.shards.items():
            for rec in shard.recs[before.get(sid, 0) :]:
                users = deaggregate(rec.data) or [(rec.key or "", rec.explicit, rec.data)]
                for key, explicit, data in users:
                    uid = uid_of(data)
                    if uid not in mine:
                        continue
                    put += 1
                    where = kcl_hash(key, explicit)
                    if where is None or shard.low <= where <= shard.high:
                        seen.setdefault(key, []).append(uid)
        now = self.oracle.now(self.clock.now_ms)
        got = sorted(uid for uids in seen.values() for uid in uids)
        if len(set(got)) != len(got) or (complete and got != sorted(mine)):
            raise Violation(
                "sink-once",
                f"a KCL reader of the sink's stream sees {len(got)} rows of {len(mine)} (or some twice)",
                now,
            )
        for key, uids in seen.items():
            # (uids rise in the order rows were written: a key's rows in order are a rising list)
            if uids != sorted(uids):
                raise Violation("sink-key-order", f"key {key}: the sink's rows read out of order", now)
        rows_per_aggregate = 400 // len(payload(0))
        if put - len(got) > self.schedule.setup.sink_buffer * rows_per_aggregate:
            raise Violation(
                "sink-memory",
                f"{put - len(got)} user records put again for {len(rows)} rows: more than a buffer's worth",
                now,
            )

    def _efo_start(self) -> None:
        """A query start with enhanced fan-out on a stream whose 20 consumer slots are taken: it must fail
        within 30 s of its start, naming the consumers."""
        stream = self.streams[0]
        for n in range(20 - len(stream.consumers)):
            stream.consumers[f"other-{n}"] = {
                "ConsumerName": f"other-{n}",
                "ConsumerARN": f"{stream.arn}/consumer/other-{n}:1",
                "ConsumerStatus": "ACTIVE",
            }
        started = self.clock.now_ms
        try:
            discovery.resolve_streams(
                parse_options(
                    {**self.options(), "consumerType": "efo", "consumerName": "sim-efo"}, streaming=True
                )
            )
        except StreamAccessError as exc:
            took = self.clock.now_ms - started
            if took > 30_000 or "other-0" not in str(exc):
                raise Violation(
                    "efo-slots",
                    f"an efo start on a stream without a consumer slot failed after {took / 1000:.0f} s: {exc}",
                    self.oracle.now(self.clock.now_ms),
                ) from None
        else:
            raise Violation(
                "efo-slots",
                "an efo start registered a consumer on a stream without a slot",
                self.oracle.now(self.clock.now_ms),
            )
        finally:
            stream.consumers.clear()


class _LossLog(logging.Handler):
    """What the driver's discovery says it went on without (failOnDataLoss=false)."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.WARNING)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "failOnDataLoss=false" not in text:
            return
        stream = ARN.search(text)
        self.world.figures.losses += 1
        self.world.oracle.loss_reported(
            stream.group(0) if stream else "",
            None,
            text,
            self.world.clock.now_ms,
            self.world.streams[0].retention_ms,
        )


def _keys_in(low: int, high: int, count: int, seed: int, salt: int) -> list[str]:
    """`count` partition keys whose MD5 lies in [low, high] (a shard's keys), from a small pool per range."""
    out: list[str] = []
    for n in range(100_000):
        key = f"k{n}"
        if low <= md5_hash(key) <= high:
            out.append(key)
            if len(out) >= 6:
                break
    return [out[int(chance(seed, "pick", salt, i) * len(out))] for i in range(count)]


# -- running seeds ----------------------------------------------------------------------------------------
def run_schedule(schedule: Schedule) -> tuple[Figures, Violation | None]:
    """One run of a schedule, in this process (the patches undone after)."""
    world = World(schedule)
    patches = pytest.MonkeyPatch()
    world.install(patches)
    try:
        return world.run(), None
    except Violation as violation:
        return world.figures, violation
    except Exception as exc:  # (a defect of the connector or of the harness: one seed fails, not the run)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{type(exc).__name__}: {exc} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        return world.figures, Violation("escaped", detail, world.oracle.now(world.clock.now_ms))
    finally:
        world.uninstall()
        patches.undo()


def run_one(seed: int, days: float) -> tuple[Figures, Violation | None]:
    return run_schedule(draw(seed, days))


def shrink(schedule: Schedule, kind: str, budget: int = 60) -> Schedule:
    """The fewest events (removed in halves, then one at a time) with which the run still fails the same
    way (`kind`); at most `budget` runs."""
    runs = 0
    chunk = max(1, len(schedule.events) // 2)
    while chunk >= 1 and runs < budget:
        index, shrunk = 0, False
        while index < len(schedule.events) and runs < budget:
            trial = schedule.without(set(range(index, index + chunk)))
            runs += 1
            _figures, violation = run_schedule(trial)
            if violation is not None and violation.kind == kind:
                schedule, shrunk = trial, True
            else:
                index += chunk
        if not shrunk:
            chunk //= 2
    return schedule


SUMMED = (
    "days",
    "batches",
    "restarts",
    "crashes",
    "records",
    "losses",
    "reshards",
    "sink_rows",
    "sink_failures",
    "quota_refusals",
)


def _seed_run(seed: int, days: float, no_shrink: bool) -> dict[str, Any]:
    """One seed, in a worker process: its figures, and when it failed, the violation and the (shrunk)
    schedule that replays it."""
    schedule = draw(seed, days)
    figures, violation = run_schedule(schedule)
    out: dict[str, Any] = {"seed": seed, "days": days, **{n: getattr(figures, n) for n in SUMMED}}
    if violation is not None:
        shrunk = schedule if no_shrink else shrink(schedule, violation.kind)
        out["failed"] = str(violation)
        out["schedule"] = shrunk.to_json()
        out["events"] = [len(shrunk.events), len(schedule.events)]
    return out


def _journal_read(path: str | None, days: float) -> dict[int, dict[str, Any]]:
    """The seeds a journal holds for these `days` (a long run is resumed across sittings)."""
    if not path:
        return {}
    done: dict[int, dict[str, Any]] = {}
    try:
        with open(path) as handle:
            for line in handle:
                if line.strip():
                    entry = json.loads(line)
                    if entry["days"] == days:
                        done[entry["seed"]] = entry
    except FileNotFoundError:
        pass
    return done


def _commit() -> str:
    """The commit the seeds run at (a journal resumed across sittings says which code each seed ran),
    with "+changes" when src/ or tests/ differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src", "tests"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _by_commit(results: list[dict[str, Any]]) -> str:
    """`commit (seeds)` for each commit the results ran at, oldest journal lines first."""
    counts = collections.Counter(entry.get("commit", "unrecorded") for entry in results)
    return ", ".join(f"{commit} ({count:,} seeds)" for commit, count in counts.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The deterministic simulation: seeds, days, figures.")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--days", type=float, default=7.0, help="simulated days per seed")
    parser.add_argument("--jobs", type=int, default=1, help="processes running seeds at once")
    parser.add_argument(
        "--journal",
        help="a file each finished seed is appended to; seeds it holds are not run again (resume a long run)",
    )
    parser.add_argument("--replay", help="a schedule (JSON file) a failing run printed")
    parser.add_argument("--no-shrink", action="store_true", help="print a failing seed's schedule as drawn")
    args = parser.parse_args(argv)
    if args.replay:
        with open(args.replay) as handle:
            figures, violation = run_schedule(Schedule.from_json(handle.read()))
        print(violation or f"ok: {figures}")
        return 1 if violation else 0
    seeds = range(args.first, args.first + args.seeds)
    done = _journal_read(args.journal, args.days)
    todo = [seed for seed in seeds if seed not in done]
    results = [done[seed] for seed in seeds if seed in done]
    started = wall.monotonic()
    commit = _commit()
    work = functools.partial(_seed_run, days=args.days, no_shrink=args.no_shrink)
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) if args.jobs > 1 else _Inline() as pool:
        for entry in pool.imap_unordered(work, todo):
            entry["commit"] = commit
            results.append(entry)
            if args.journal:
                with open(args.journal, "a") as handle:
                    handle.write(json.dumps(entry) + "\n")
            if "failed" in entry:
                shown, drawn = entry["events"]
                print(f"seed {entry['seed']}: FAILED: {entry['failed']}", flush=True)
                print(
                    f"seed {entry['seed']}: schedule ({shown} of {drawn} events), replay with --replay FILE:"
                )
                print(entry["schedule"], flush=True)
    took = wall.monotonic() - started
    totals = {name: sum(entry.get(name, 0) for entry in results) for name in SUMMED}
    failed = sorted(entry["seed"] for entry in results if "failed" in entry)
    resumed = f" ({len(results) - len(todo)} of them from {args.journal})" if len(todo) < len(results) else ""
    print(
        f"{args.seeds} seeds x {args.days:g} days = {totals['days']:,.0f} simulated query-days{resumed}, "
        f"{len(todo)} seeds run now in {took:,.0f} s with {args.jobs} process(es): "
        f"{totals['batches']:,} batches, {totals['records']:,} user records, {totals['restarts']:,} driver starts, "
        f"{totals['crashes']:,} driver or executor crashes, {totals['reshards']:,} reshards, "
        f"{totals['losses']:,} losses said, {totals['sink_rows']:,} sink rows "
        f"({totals['sink_failures']:,} writes failed in outages), "
        f"{totals['quota_refusals']:,} quota refusals; failed seeds: {failed or 'none'}; "
        f"code: {_by_commit(results)}"
    )
    return 1 if failed else 0


class _Inline:
    """`Pool`'s face for one process: seeds run here, in order."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def imap_unordered(self, work: Callable[[int], dict[str, Any]], items: list[int]) -> Any:
        return map(work, items)


if __name__ == "__main__":
    sys.exit(main())
