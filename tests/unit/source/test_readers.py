"""The Spark adapter classes of the source (src/pyspark_kinesis/source/readers.py), without Spark: what
a reader checks when Spark makes it, what travels to executors, the read limits it passes to the
planner, drainInOneBatch's one batch, the partitions of a batch, and where each read goes. The planner
is the real one over fakes (planner_fakes.py) where planning matters, else a recording stand-in."""

from __future__ import annotations

import pickle
import threading
import traceback
from dataclasses import replace
from typing import Any

import pytest

from pyspark_kinesis import spark_features
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source import readers
from pyspark_kinesis.source.driver import discovery, planner
from pyspark_kinesis.source.options import SourceConfig
from pyspark_kinesis.source.readers import KinesisBatchReader, KinesisPartition, KinesisStreamReader
from pyspark_kinesis.source.state import batch_log
from pyspark_kinesis.source.state.offsets import BackfillPlan, SourceOffset, TaskPlan
from tests.unit.planner_fakes import Harness, arn, one_stream

A = arn("a")


class Recorded:
    """A planner stand-in: records what the reader asks of it."""

    def __init__(self, offset: SourceOffset | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.offset = offset or SourceOffset("tok", 0, {})
        self.holders: dict = {}
        self.ledger = self

    def read_up_to(self, cutoff_ms: int, *, drain: bool = False) -> None:
        self.calls.append(("read_up_to", drain))

    def next_offset(self, offset: SourceOffset, max_rows: Any, max_bytes: Any) -> SourceOffset:
        self.calls.append(("next_offset", (offset.batch, max_rows, max_bytes)))
        return offset

    def initial_offset(self) -> SourceOffset:
        self.calls.append(("initial_offset", None))
        return self.offset

    def check_logged_batch(self, offset: SourceOffset) -> None:
        self.calls.append(("check_logged_batch", offset.batch))

    def listed(self, offset: SourceOffset) -> dict:
        return {}

    def committed(self, offset: SourceOffset) -> None:
        self.calls.append(("committed", offset.batch))

    def recorded_ends(self, offset: SourceOffset) -> dict:
        self.calls.append(("recorded_ends", offset.batch))
        return {}

    def beat(self) -> None:
        self.calls.append(("beat", None))


@pytest.fixture(autouse=True)
def no_aws(monkeypatch):
    """A reader's constructor asks AWS for its streams: here it may not (a test stands one in)."""

    def refuse(config: Any) -> Any:
        raise AssertionError("this test would reach AWS: stand resolve_streams in")

    monkeypatch.setattr(discovery, "resolve_streams", refuse)


def reader_for(
    h: Harness | None = None, stand_in: Recorded | None = None, **options: str
) -> KinesisStreamReader:
    """A reader as the driver-side process has it (its constructor asks AWS: see the first test)."""
    h = h or one_stream(**options)
    kind = readers.KinesisAvailableNowReader if spark_features.ADMISSION_CONTROL else KinesisStreamReader
    reader = object.__new__(kind)
    reader.config, reader.relay_key, reader._seen = h.config, b"", None
    reader._told_backlog = reader._available_now = reader._drained = False
    reader._planner = stand_in or h.planner()  # type: ignore[assignment]
    return reader


def test_a_reader_resolves_its_streams_checks_metadata_path_and_makes_a_relay_key(tmp_path, monkeypatch):
    resolved: list[Any] = []
    monkeypatch.setattr(discovery, "resolve_streams", lambda config: resolved.append(config) or config)
    config = replace(one_stream().config, metadata_path=str(tmp_path / "meta"))
    reader = KinesisStreamReader(config)
    assert resolved == [config] and reader.config is config
    assert reader.relay_key == b""  # (polling: no relay)
    assert (reader._seen, reader._planner, reader._available_now, reader._drained) == (
        None,
        None,
        False,
        False,
    )
    assert not reader._told_backlog
    fan_out = replace(config, consumer_type="efo", fan_out_relay=True)
    keys = {KinesisStreamReader(fan_out).relay_key for _ in range(2)}
    assert len(keys) == 2 and all(len(k) == 32 for k in keys)  # a new key per run
    assert KinesisStreamReader(replace(fan_out, fan_out_relay=False)).relay_key == b""
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    with pytest.raises(OptionError, match="metadataPath"):
        KinesisStreamReader(replace(config, metadata_path=str(unwritable / "meta")))


def test_stream_reader_picks_the_class_of_the_installed_pyspark(monkeypatch, tmp_path):
    monkeypatch.setattr(discovery, "resolve_streams", lambda config: config)
    config = replace(one_stream().config, metadata_path=str(tmp_path))
    reader = readers.stream_reader(lambda: config)
    assert isinstance(reader, KinesisStreamReader)
    assert (type(reader).__name__ == "KinesisAvailableNowReader") == spark_features.ADMISSION_CONTROL


def test_a_refused_query_says_so_from_the_first_call_spark_makes_not_from_its_creation():
    """PySpark's streaming runner follows an error raised while the reader is made with an
    UnboundLocalError of its own (`reader.stop()` in a `finally`): the refusal waits for the first call,
    and leaves it without the connector's frames or what it chained."""

    def refused() -> SourceConfig:
        try:
            raise KeyError("internal")
        except KeyError as exc:
            raise OptionError("metadataPath", "missing", "Set it.") from exc

    reader = readers.stream_reader(refused)
    reader.stop()  # (what the runner's `finally` calls: it must not raise)
    for call in (
        reader.initialOffset,
        reader.latestOffset,
        lambda: reader.latestOffset({}, None),
        reader.getDefaultReadLimit,
        lambda: reader.partitions({}, {}),
        lambda: reader.commit({}),
    ):
        with pytest.raises(OptionError, match="'metadataPath': missing") as caught:
            call()
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
        frames = traceback.extract_tb(caught.value.__traceback__)
        assert [f.name for f in frames if "pyspark_kinesis" in f.filename] == ["call"], frames


def test_what_travels_to_executors_is_the_config_alone():
    reader = reader_for(stand_in=Recorded())
    reader.relay_key, reader._seen = b"k" * 32, SourceOffset("tok", 3, {})
    reader._available_now = reader._drained = True
    state = reader.__getstate__()
    assert state == {
        "config": reader.config,
        "_planner": None,
        "relay_key": b"",
        "_seen": None,
        "_available_now": False,
        "_drained": False,
    }
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.config == reader.config and copy._planner is None


def test_the_planner_is_made_once_with_the_batch_end_log_and_a_heartbeat(monkeypatch):
    made: list[Any] = []
    monkeypatch.setattr(planner, "Planner", lambda *args: made.append(args) or Recorded())
    monkeypatch.setattr(batch_log, "LIVE_EVERY_S", 3600.0)
    reader = reader_for(stand_in=Recorded())
    reader._planner = None

    def beating() -> int:
        return sum(t.name == "kinesis-live" for t in threading.enumerate())

    before = beating()
    first = reader.planner
    assert reader.planner is first and len(made) == 1
    config, log, factory = made[0]
    assert config is reader.config and isinstance(log, batch_log.BatchEndLog)
    assert factory.keywords == {"agent": "planner"}
    assert beating() == before + 1  # (one heartbeat for the planner made; other tests may have left theirs)


def test_the_heartbeat_renews_the_live_record_and_outlives_a_failed_renewal(monkeypatch, caplog):
    class Stop(BaseException):
        pass

    beats: list[int] = []

    class Ledger:
        def beat(self) -> None:
            beats.append(1)
            if len(beats) == 1:
                raise OSError("storage hiccup")
            raise Stop

    class Owner:
        ledger = Ledger()

    monkeypatch.setattr(batch_log, "LIVE_EVERY_S", 0.001)
    with pytest.raises(Stop):
        readers._keep_alive(Owner())  # type: ignore[arg-type]
    assert len(beats) == 2
    assert "metadataPath: could not renew the query's live record: storage hiccup" in caplog.text


@pytest.mark.parametrize(
    ("options", "limit"),
    [
        ({"maxRecordsPerBatch": "7"}, ("ReadMaxRows", 7)),
        ({"maxBytesPerBatch": "9000"}, ("ReadMaxBytes", 9000)),
        ({"maxRecordsPerBatch": "7", "maxBytesPerBatch": "9000"}, ("ReadMaxRows", 7)),
        ({}, ("ReadAllAvailable", None)),
    ],
)
@pytest.mark.skipif(not spark_features.ADMISSION_CONTROL, reason="read limits reach Python sources from 4.2")
def test_the_default_read_limit_is_the_batch_option(options, limit):
    got = reader_for(stand_in=Recorded(), **options).getDefaultReadLimit()
    assert type(got).__name__ == limit[0]
    assert getattr(got, "max_rows", getattr(got, "max_bytes", None)) == limit[1]


@pytest.mark.skipif(not spark_features.ADMISSION_CONTROL, reason="read limits reach Python sources from 4.2")
def test_the_read_limit_spark_gives_replaces_the_options():
    stand_in = Recorded()
    reader = reader_for(stand_in=stand_in, maxRecordsPerBatch="7", maxBytesPerBatch="9000")
    start = SourceOffset("tok", 4, {}).to_json()
    assert reader.latestOffset(start, spark_features.ReadMaxRows(3)) == start  # (nothing new: the start)
    reader.latestOffset(start, spark_features.ReadMaxBytes(50))
    reader.latestOffset(start, spark_features.ReadAllAvailable())
    reader.latestOffset(start, None)
    assert [args for call, args in stand_in.calls if call == "next_offset"] == [
        (4, 3, 9000),
        (4, 7, 50),
        (4, None, None),
        (4, 7, 9000),
    ]


def test_without_arguments_the_first_planning_starts_from_the_initial_offset():
    stand_in = Recorded(SourceOffset("tok", 0, {}))
    reader = reader_for(stand_in=stand_in, maxRecordsPerBatch="7")
    assert reader.latestOffset() == SourceOffset("tok", 0, {}).to_json()
    assert stand_in.calls == [("initial_offset", None), ("next_offset", (0, 7, None)), ("recorded_ends", 0)]
    reader.latestOffset()
    assert stand_in.calls[3:] == [("next_offset", (0, 7, None))]  # (the backlog is looked at once per run)


def test_drain_in_one_batch_reads_everything_once_and_refuses_a_second_batch():
    stand_in = Recorded()
    reader = reader_for(stand_in=stand_in, drainInOneBatch="true", maxRecordsPerBatch="7")
    reader.latestOffset()
    assert ("read_up_to", True) in stand_in.calls
    assert ("next_offset", (0, None, None)) in stand_in.calls  # the batch limits do not apply
    assert not reader._told_backlog
    with pytest.raises(OptionError) as refused:
        reader.latestOffset()
    assert refused.value.option == "drainInOneBatch"
    assert str(refused.value) == (
        "Kinesis option 'drainInOneBatch': Spark asked this run for a second batch, so the query's trigger is "
        "neither trigger(once=True) nor (PySpark 4.0/4.1) trigger(availableNow=True). Remove drainInOneBatch "
        "from a query that runs on (processingTime or the default trigger); its batches are bounded by "
        "maxRecordsPerBatch/maxBytesPerBatch and the per-shard limits."
    )


@pytest.mark.skipif(
    not spark_features.ADMISSION_CONTROL, reason="Trigger.AvailableNow reaches Python sources from 4.2"
)
def test_available_now_reads_up_to_its_start_in_bounded_batches_even_with_drain():
    stand_in = Recorded()
    reader = reader_for(stand_in=stand_in, drainInOneBatch="true", maxRecordsPerBatch="7")
    reader.prepareForTriggerAvailableNow()  # type: ignore[attr-defined]
    assert stand_in.calls == [("read_up_to", False)]
    start = SourceOffset("tok", 2, {}).to_json()
    reader.latestOffset(start, spark_features.ReadMaxRows(7))
    reader.latestOffset(start, spark_features.ReadMaxRows(7))  # (a second batch: no refusal)
    assert stand_in.calls[1:] == [("next_offset", (2, 7, None))] * 2


def test_a_batch_planned_as_its_own_start_has_no_partitions_and_others_one_per_task():
    h = one_stream()
    reader = reader_for(h)
    first = reader.latestOffset()
    assert reader.partitions(first, first) == []
    parts = reader.partitions(reader.initialOffset(), first)
    offset = SourceOffset.from_json(first)
    assert [p.plan.task for p in parts] == sorted(offset.tasks())
    assert all(isinstance(p, KinesisPartition) and p.value == p.plan.task for p in parts)
    assert {(s.stream, s.shard_id) for p in parts for s in p.plan.shards} == {
        (A, sid) for sid in ("s0", "s1")
    }


def test_commit_tells_the_planner_and_moves_what_the_reader_has_seen():
    stand_in = Recorded()
    reader = reader_for(stand_in=stand_in)
    reader.commit(SourceOffset("tok", 5, {}).to_json())
    assert stand_in.calls == [("committed", 5)] and reader._seen is not None and reader._seen.batch == 5


def test_reads_go_to_the_tasks_read_and_a_batch_reads_to_the_backfill(monkeypatch):
    from pyspark_kinesis.source.executor import task

    monkeypatch.setattr(task, "read_task", lambda config, plan: iter([("task", plan.task)]))
    monkeypatch.setattr(task, "read_backfill", lambda config, plan: iter([("backfill", plan.shard_id)]))
    reader = reader_for(stand_in=Recorded())
    plan = TaskPlan("tok", 1, 3, (), cutoff_ms=None)
    assert list(reader.read(KinesisPartition(plan))) == [("task", 3)]
    piece = BackfillPlan(A, "s9", Position.trim_horizon(), False, 10)
    monkeypatch.setattr(discovery, "resolve_streams", lambda config: config)
    monkeypatch.setattr(discovery, "backfill_slices", lambda config: [piece])
    batch = KinesisBatchReader(reader.config)
    (part,) = batch.partitions()
    assert part.plan is piece and part.value == 0
    assert list(batch.read(part)) == [("backfill", "s9")]
