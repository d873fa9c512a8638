"""drainInOneBatch's reads pinned at what each chunk is told (src/pyspark_kinesis/source/executor/drain.py):
every chunk's read gets the task's limits, the shard's hash range and closed flag, the batch's names and
the continuation hint, and only the first chunk the tip time; a replay's chunks get no hint; a task of
several shards returns each end under its own shard; a spill is a file in Spark's local directory that
is gone once closed. The shard read itself is replaced by a recorder (test_drain.py runs the real one)."""

from __future__ import annotations

import os
import threading
from dataclasses import replace

import pytest

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import drain
from pyspark_kinesis.source.executor.columns import Columns
from pyspark_kinesis.source.executor.drain import Drain, Spill, end_of_chunks
from pyspark_kinesis.source.executor.protocol import MAX_THREADS
from pyspark_kinesis.source.executor.shard_read import ReadStuckError
from pyspark_kinesis.source.state.offsets import ShardEnd, ShardPlan, TaskPlan
from tests.unit.scripted import SHARD, SPEC, FakeProxy, ReadRecorder, task_config

STREAM = SPEC.arn
OTHER = "shardId-000000000002"


def _cols(shard: str, *seqs: str) -> Columns:
    cols = Columns(SPEC.name, STREAM, shard)
    for seq in seqs:
        cols.append(b"x" + seq.encode(), "k", seq, 0, 1.0)
    return cols


def Reads(monkeypatch, ends: dict[str, list[ShardEnd]]) -> ReadRecorder:
    """The drained task's reads recorded, each answering the next of its shard's `ends`."""
    queues = {shard: list(queue) for shard, queue in ends.items()}

    def answer(context, _start):
        end = queues[context.shard].pop(0)
        return _cols(context.shard, end.reached.seq or "0"), end

    return ReadRecorder(monkeypatch, [drain], answer)


def _chunk(start: Position, seq: str, **kw) -> ShardEnd:
    return ShardEnd(start, Position.after(seq), records=1, bytes=2, **kw)


def _config(tmp_path, **changes):
    base = task_config(str(tmp_path), drainInOneBatch="true")
    return replace(base, **changes)


PIECE = ShardPlan(
    STREAM,
    SHARD,
    Position.after("1"),
    -1,
    -1,
    closed=True,
    tip_ms=1_234,
    holder="10.0.0.7:4000@99",
    hash_range=(5, 500),
)


def test_every_chunk_of_a_first_attempt_is_told_the_tasks_limits_and_names(tmp_path, monkeypatch):
    cfg = _config(
        tmp_path,
        max_records_per_shard=7,
        max_bytes_per_shard=7_000,
        max_fetch_time_ms=100_000,
        shard_read_bytes_per_second=123_456,
        fail_on_corrupt_aggregate=True,
        idle_poll_interval_ms=250,
        fail_on_data_loss=False,
    )
    chunks = [
        _chunk(Position.after("1"), "2", holder="10.0.0.8:4000@100"),
        _chunk(Position.after("2"), "3", at_tip=True),
    ]
    reads = Reads(monkeypatch, {SHARD: chunks})
    plan = TaskPlan("tok", 9, 2, (PIECE,), cutoff_ms=55_000, relay_key=b"key", drain=True)
    pages = []
    monotonic = drain.time.monotonic()
    end = Drain(cfg, plan, {STREAM: FakeProxy()}, lambda context: pages.append(context) or "pages").run(
        None, spills := {}
    )
    assert [c["start"] for c in reads.calls] == [Position.after("1"), Position.after("2")]
    assert [c["context"].holder for c in reads.calls] == ["10.0.0.7:4000@99", "10.0.0.8:4000@100"]
    assert [c["tip_ms"] for c in reads.calls] == [1_234, 0]  # (the tip was seen at the first start only)
    assert [c["expect"] for c in reads.calls] == [None, None]
    assert [c["fail"] for c in reads.calls] == [False, False]
    assert [c["source"] for c in reads.calls] == ["pages", "pages"]
    assert pages == [c["context"] for c in reads.calls]
    for call in reads.calls:
        context = call["context"]
        assert context.shard == SHARD and context.until is None and context.batch == 9
        assert context.batch_key == "tok#9" and context.relay_key == b"key"
        limits = context.limits
        assert (limits.max_records, limits.max_bytes, limits.cutoff_ms) == (7, 7_000, 55_000)
        assert (limits.bytes_per_second, limits.closed, limits.hash_range) == (123_456, True, (5, 500))
        assert limits.fail_on_corrupt_aggregate is True and limits.push_wait_s == 0.25
        assert monotonic + 100 <= limits.deadline <= drain.time.monotonic() + 100
    assert end == {PIECE.ref: end_of_chunks(chunks)}
    assert spills[PIECE.ref].rows == 2
    spills[PIECE.ref].close()


def test_without_a_page_maker_the_read_mode_is_the_consumer_type(tmp_path, monkeypatch):
    reads = Reads(monkeypatch, {SHARD: [_chunk(Position.after("1"), "2", at_tip=True)]})
    plan = TaskPlan("tok", 1, 0, (PIECE,), cutoff_ms=None, drain=True)
    cfg = _config(tmp_path)
    Drain(cfg, plan, {STREAM: FakeProxy()}).run(None, spills := {})
    assert reads.calls[0]["source"] == cfg.consumer_type
    spills[PIECE.ref].close()


def test_a_replay_reads_each_recorded_chunk_to_its_end_without_a_hint(tmp_path, monkeypatch):
    first = _chunk(Position.after("1"), "2", holder="10.0.0.8:4000@100")
    second = _chunk(Position.after("2"), "3", at_tip=True)
    recorded = end_of_chunks([first, second])
    again = [replace(first, losses=("two gone",)), replace(second, losses=("three gone",))]
    reads = Reads(monkeypatch, {SHARD: again})
    plan = TaskPlan("tok", 1, 0, (PIECE,), cutoff_ms=None, drain=True)
    ends = Drain(_config(tmp_path), plan, {STREAM: FakeProxy()}, lambda c: "pages").run(
        {PIECE.ref: recorded}, spills := {}
    )
    assert [(c["start"], c["expect"]) for c in reads.calls] == [(first.start, first), (second.start, second)]
    assert [c["context"].until for c in reads.calls] == [first.reached, second.reached]
    assert [(c["context"].holder, c["tip_ms"]) for c in reads.calls] == [("", 0), ("", 0)]
    assert ends == {PIECE.ref: replace(recorded, losses=("two gone", "three gone"))}
    spills[PIECE.ref].close()


def test_a_task_of_several_shards_gives_each_its_own_end_and_replaces_their_spills(tmp_path, monkeypatch):
    other = replace(PIECE, shard_id=OTHER)
    reads = Reads(
        monkeypatch,
        {
            SHARD: [_chunk(Position.after("1"), "2", at_tip=True)],
            OTHER: [_chunk(Position.after("1"), "8"), _chunk(Position.after("8"), "9", at_tip=True)],
        },
    )
    stale = Spill()
    stale.add(_cols(SHARD, "0"))
    stale_path = stale.path
    spills = {PIECE.ref: stale}
    plan = TaskPlan("tok", 1, 0, (PIECE, other), cutoff_ms=None, drain=True)
    ends = Drain(_config(tmp_path), plan, {STREAM: FakeProxy()}, lambda c: "pages").run(None, spills)
    assert {ref.shard: end.reached for ref, end in ends.items()} == {
        SHARD: Position.after("2"),
        OTHER: Position.after("9"),
    }
    assert ends[other.ref].records == 2 and len(reads.calls) == 3
    assert stale.path is None and not os.path.exists(stale_path)  # (the replaced spill is closed)
    assert spills[PIECE.ref] is not stale and spills[PIECE.ref].rows == 1 and spills[other.ref].rows == 2
    for spill in spills.values():
        spill.close()


def test_a_drained_task_reads_up_to_MAX_THREADS_shards_at_once(tmp_path, monkeypatch):
    """Every read waits until MAX_THREADS of them wait together: it only passes with that many threads."""
    shards = [f"shardId-{i:012d}" for i in range(MAX_THREADS)]
    reads = Reads(monkeypatch, {s: [_chunk(Position.after("1"), "2", at_tip=True)] for s in shards})
    reads.barrier = threading.Barrier(MAX_THREADS, timeout=30)
    plan = TaskPlan(
        "tok", 1, 0, tuple(replace(PIECE, shard_id=s) for s in shards), cutoff_ms=None, drain=True
    )
    ends = Drain(_config(tmp_path), plan, {STREAM: FakeProxy()}, lambda c: "pages").run(None, spills := {})
    assert len(ends) == MAX_THREADS and not reads.barrier.broken
    for spill in spills.values():
        spill.close()


def test_a_shard_that_never_ends_stops_at_the_chunk_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(drain, "MAX_CHUNKS", 3)
    Reads(monkeypatch, {SHARD: [_chunk(Position.after(str(n)), str(n + 1)) for n in range(3)]})
    plan = TaskPlan("tok", 1, 0, (PIECE,), cutoff_ms=None, drain=True)
    with pytest.raises(ReadStuckError) as raised:
        Drain(_config(tmp_path), plan, {STREAM: FakeProxy()}, lambda c: "pages").run(None, spills := {})
    assert str(raised.value) == f"shard {SHARD}: drainInOneBatch read 3 chunks without ending"
    spills[PIECE.ref].close()


def test_the_end_over_chunks_adds_up_counts_and_losses_and_keeps_the_first_record_read():
    a = ShardEnd(Position.trim_horizon(), Position.after("2"), records=0, bytes=0, misplaced=1)
    b = ShardEnd(Position.after("2"), Position.after("5"), records=3, bytes=30, misplaced=2, first=("3", 0))
    c = ShardEnd(Position.after("5"), Position.shard_end(), records=1, bytes=9, first=("6", 0), losses=("x",))
    end = end_of_chunks([a, b, c])
    assert (end.start, end.reached, end.records, end.bytes) == (a.start, c.reached, 4, 39)
    assert (end.misplaced, end.first, end.chunks, end.losses) == (3, ("3", 0), (a, b, c), ("x",))
    assert end_of_chunks([a]).first is None


def _open_on(path: str) -> bool:
    """Whether this process holds a file handle on `path`."""
    fds = "/proc/self/fd"
    return any(os.path.realpath(os.path.join(fds, fd)) == os.path.realpath(path) for fd in os.listdir(fds))


def test_a_spill_is_a_file_in_sparks_local_directory_gone_once_closed(tmp_path, monkeypatch):
    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'missing'},{local}")
    spill = Spill()
    spill.add(_cols(SHARD))  # (no rows: no file)
    assert spill.path is None and list(spill.batches()) == []
    spill.add(_cols(SHARD, "1", "2"))
    spill.add(_cols(SHARD, "3"))
    path = spill.path
    assert path is not None and os.path.dirname(path) == str(local) and spill.rows == 3
    name = os.path.basename(path)
    assert name.startswith("kinesis-drain-") and name.endswith(".arrows")
    batches = list(spill.batches())
    assert [b.column("sequenceNumber").to_pylist() for b in batches] == [["1", "2"], ["3"]]
    assert not _open_on(path)  # (written out and closed before it is read)
    spill.close()
    assert spill.path is None and not os.path.exists(path)
    again = Spill()
    again.add(_cols(SHARD, "4"))
    os.unlink(again.path)  # (removed under it: closing still works)
    again.close()
    assert again.path is None


def test_without_a_usable_spark_local_directory_spills_go_to_the_systems(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f",{tmp_path / 'missing'}")
    assert drain._local_dir() is None
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert drain._local_dir() is None
