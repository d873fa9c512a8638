"""What each shard read of a task is told (src/pyspark_kinesis/source/executor/task.py), pinned field by
field: the options' limits and pacing, the shard's hash range and closed flag, the batch's names, the
continuation hint, the data-loss policy and the tip time; the fair share of maxFetchTimeMs by waves of
MAX_THREADS reads at once; a batch read's chunks; a drained task through `read_task`. The shard read is
replaced by a recorder here (test_task.py reads a served shard through the real one)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import drain, task
from pyspark_kinesis.source.executor.columns import Columns
from pyspark_kinesis.source.executor.protocol import MAX_THREADS
from pyspark_kinesis.source.state.offsets import BackfillPlan, ShardEnd, ShardPlan, TaskPlan
from pyspark_kinesis.source.value_columns import with_values
from tests.unit.scripted import SHARD, SPEC, FakeProxy, ReadRecorder, task_config

STREAM = SPEC.arn
FETCH_S = 100.0  # maxFetchTimeMs / 1000: large, so that a deadline off by a part in 1000 shows


def _config(tmp_path, **changes):
    return replace(
        task_config(str(tmp_path)),
        max_records_per_shard=70,
        max_bytes_per_shard=70_000,
        max_fetch_time_ms=int(FETCH_S * 1000),
        shard_read_bytes_per_second=123_456,
        fail_on_corrupt_aggregate=True,
        idle_poll_interval_ms=250,
        fail_on_data_loss=False,
        **changes,
    )


def _cols(shard: str, n: int) -> Columns:
    cols = Columns(SPEC.name, STREAM, shard)
    for i in range(n):
        cols.append(b"x", "k", str(i + 1), 0, 1.0)
    return cols


def Reads(monkeypatch) -> ReadRecorder:
    """The task's reads recorded (a drained task's too), each answering one row at the tip."""

    def answer(context, start):
        return _cols(context.shard, 1), ShardEnd(start, Position.after("1"), records=1, bytes=1, at_tip=True)

    monkeypatch.setattr(task, "proxy_for", lambda spec, **kw: FakeProxy(spec))
    return ReadRecorder(monkeypatch, [task, drain], answer)


def _piece(shard: str = SHARD, **kw) -> ShardPlan:
    base = {"max_records": 30, "max_bytes": 20_000, "closed": True, "tip_ms": 1_234}
    base.update(holder="10.0.0.7:4000@99", hash_range=(5, 500))
    return ShardPlan(STREAM, shard, Position.after("0"), **{**base, **kw})


def test_each_read_is_told_the_options_the_shard_and_the_batch(tmp_path, monkeypatch):
    reads = Reads(monkeypatch)
    plan = TaskPlan("tok", 9, 2, (_piece(),), cutoff_ms=55_000, relay_key=b"key")
    before = task.time.monotonic()
    got = list(task.read_task(_config(tmp_path), plan))
    after = task.time.monotonic()
    assert sum(b.num_rows for b in got) == 1
    (call,) = reads.calls
    assert call["source"] == "polling" and call["start"] == Position.after("0") and call["expect"] is None
    assert call["fail"] is False and call["tip_ms"] == 1_234
    context = call["context"]
    assert (context.shard, context.until, context.batch, context.batch_key) == (SHARD, None, 9, "tok#9")
    assert (context.holder, context.relay_key) == ("10.0.0.7:4000@99", b"key")
    limits = context.limits
    assert (limits.max_records, limits.max_bytes, limits.cutoff_ms) == (30, 20_000, 55_000)
    assert (limits.bytes_per_second, limits.closed, limits.hash_range) == (123_456, True, (5, 500))
    assert limits.fail_on_corrupt_aggregate is True and limits.push_wait_s == 0.25
    assert before + FETCH_S <= limits.deadline <= after + FETCH_S  # (one wave: the whole time)


def test_a_replay_is_told_its_recorded_end(tmp_path, monkeypatch):
    reads = Reads(monkeypatch)
    cfg = _config(tmp_path)
    plan = TaskPlan("tok", 9, 2, (_piece(),), cutoff_ms=None)
    list(task.read_task(cfg, plan))  # (the first attempt records Position.after("1"))
    list(task.read_task(cfg, plan))
    first, replay = reads.calls
    assert first["expect"] is None and first["context"].until is None
    assert replay["expect"] is not None and replay["context"].until == Position.after("1")


def test_a_planned_share_of_one_record_or_byte_binds(tmp_path, monkeypatch):
    reads = Reads(monkeypatch)
    list(
        task.read_task(_config(tmp_path), TaskPlan("tok", 9, 2, (_piece(max_records=1, max_bytes=1),), None))
    )
    limits = reads.calls[0]["context"].limits
    assert (limits.max_records, limits.max_bytes) == (1, 1)


def test_with_more_shards_than_threads_each_wave_gets_its_share_of_the_time(tmp_path, monkeypatch):
    reads = Reads(monkeypatch)
    shards = [f"shardId-{i:012d}" for i in range(MAX_THREADS + 1)]  # two waves
    before = task.time.monotonic()
    got = list(task.read_task(_config(tmp_path), TaskPlan("tok", 9, 2, tuple(map(_piece, shards)), None)))
    after = task.time.monotonic()
    assert [b.column("shardId").to_pylist() for b in got] == [[s] for s in shards]
    for call in reads.calls:
        assert before + FETCH_S / 2 <= call["context"].limits.deadline <= after + FETCH_S / 2


def test_a_task_reads_up_to_MAX_THREADS_shards_at_once(tmp_path, monkeypatch):
    """Every read waits until MAX_THREADS of them wait together: it only passes with that many threads."""
    reads = Reads(monkeypatch)
    reads.barrier = threading.Barrier(MAX_THREADS, timeout=30)
    shards = tuple(_piece(f"shardId-{i:012d}") for i in range(MAX_THREADS))
    got = list(task.read_task(_config(tmp_path), TaskPlan("tok", 9, 2, shards, None)))
    assert len(got) == MAX_THREADS and not reads.barrier.broken


def test_a_drained_task_yields_its_shards_rows_with_the_sources_columns(tmp_path, monkeypatch):
    reads = Reads(monkeypatch)  # (the drained reads too: at the tip, one chunk)
    cfg = _config(tmp_path)
    plan = TaskPlan("tok", 9, 2, (_piece(), _piece("shardId-000000000002")), cutoff_ms=None, drain=True)
    got = list(task.read_task(cfg, plan))
    assert [b.column("shardId").to_pylist() for b in got] == [[SHARD], ["shardId-000000000002"]]
    assert [b.schema for b in got] == [with_values(_cols(SHARD, 1).to_arrow(), cfg).schema] * 2
    assert [c["context"].batch_key for c in reads.calls] == ["tok#9", "tok#9"]


def test_a_batch_reads_chunks_are_each_told_the_options_and_the_shard(tmp_path, monkeypatch):
    calls = []
    ends = [Position.after("1"), Position.after("2")]

    def fetch(proxy, shard, position, limits, expect, fail_on_data_loss):
        calls.append((shard, position, limits, expect, fail_on_data_loss))
        reached = ends[len(calls) - 1]
        return _cols(shard, 1), ShardEnd(position, reached, records=1, at_tip=len(calls) == len(ends))

    monkeypatch.setattr(task, "fetch_shard", fetch)
    monkeypatch.setattr(task, "proxy_for", lambda spec, **kw: FakeProxy(spec))
    piece = BackfillPlan(
        STREAM,
        SHARD,
        Position.trim_horizon(),
        closed=True,
        cutoff_ms=66_000,
        end_at=Position.after("9"),
        hash_range=(5, 500),
    )
    before = task.time.monotonic()
    got = list(task.read_backfill(_config(tmp_path), piece))
    after = task.time.monotonic()
    assert len(got) == 2
    assert [(c[0], c[1], c[3], c[4]) for c in calls] == [
        (SHARD, Position.trim_horizon(), None, False),
        (SHARD, Position.after("1"), None, False),
    ]
    for _shard, _position, limits, _expect, _fail in calls:
        assert (limits.max_records, limits.max_bytes, limits.cutoff_ms) == (70, 70_000, 66_000)
        assert (limits.bytes_per_second, limits.closed, limits.hash_range) == (123_456, True, (5, 500))
        assert limits.fail_on_corrupt_aggregate is True and limits.end_at == Position.after("9")
        assert before + FETCH_S <= limits.deadline <= after + FETCH_S


def test_a_batch_read_that_never_ends_stops_at_the_chunk_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(task, "MAX_BACKFILL_CHUNKS", 2)
    monkeypatch.setattr(task, "proxy_for", lambda spec, **kw: FakeProxy(spec))
    monkeypatch.setattr(
        task,
        "fetch_shard",
        lambda proxy, shard, position, limits, expect, fail: (_cols(shard, 0), ShardEnd(position, position)),
    )
    piece = BackfillPlan(STREAM, SHARD, Position.trim_horizon(), False, 66_000)
    with pytest.raises(task.ReadStuckError) as raised:
        list(task.read_backfill(_config(tmp_path), piece))
    assert str(raised.value) == f"shard {SHARD}: the backfill read 2 chunks without ending"


def test_every_kind_of_task_first_freezes_what_the_worker_keeps(tmp_path, monkeypatch):
    """A stream task, a drained task and a batch read's shard each start with `prepare_worker_process`
    (aws/process_tuning.py: PySpark's daemon collects garbage after every task, over all the worker
    holds)."""
    Reads(monkeypatch)
    frozen: list[str] = []
    monkeypatch.setattr(task, "prepare_worker_process", lambda: frozen.append("frozen"))
    cfg = _config(tmp_path)
    list(task.read_task(cfg, TaskPlan("tok", 9, 2, (_piece(),), None)))
    list(task.read_task(cfg, TaskPlan("tok", 10, 2, (_piece(),), None, drain=True)))
    monkeypatch.setattr(
        task, "fetch_shard", lambda *a: (_cols(SHARD, 1), ShardEnd(a[2], Position.after("1"), at_tip=True))
    )
    list(task.read_backfill(cfg, BackfillPlan(STREAM, SHARD, Position.after("0"), True, 10**13)))
    assert frozen == ["frozen"] * 3


def test_a_shards_rows_reach_spark_as_the_batches_they_were_read_in(tmp_path, monkeypatch):
    """Rows taken in bulk from two responses and one taken alone reach Spark as three batches in read
    order, none concatenated (a concatenation copies every payload again)."""

    def response(seqs: list[str]) -> Records:
        return Records.from_lists(seqs, ["k"] * len(seqs), [b"x"] * len(seqs), [1.0] * len(seqs))

    def answer(context, start):
        cols = Columns(SPEC.name, STREAM, context.shard)
        cols.add(response(["1", "2"]), 2)
        cols.add(response(["3", "4", "5", "6"]), 3)  # (cut after 5)
        cols.append(b"alone", "k", "9", 0, 2.0)
        return cols, ShardEnd(start, Position.after("9"), records=6, bytes=6, at_tip=True)

    monkeypatch.setattr(task, "proxy_for", lambda spec, **kw: FakeProxy(spec))
    ReadRecorder(monkeypatch, [task, drain], answer)
    got = list(task.read_task(_config(tmp_path), TaskPlan("tok", 9, 2, (_piece(),), None)))
    assert [b.num_rows for b in got] == [2, 3, 1]
    assert [s for b in got for s in b.column("sequenceNumber").to_pylist()] == ["1", "2", "3", "4", "5", "9"]
