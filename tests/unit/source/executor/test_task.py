"""A task's bounded read (src/pyspark_kinesis/source/executor/task.py) through its own entry points:
the limits each shard gets from the plan and the options, one API client per stream, the rows held
until the record is durable and replayed exactly, and a batch read's chunks. The Kinesis API is a
served shard in memory (`Shards`: iterators are places in its records, as on the service) read by
polling; the batch-end log is real."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import task
from pyspark_kinesis.source.executor.iterator_cache import ITERATORS
from pyspark_kinesis.source.executor.modes import polling
from pyspark_kinesis.source.executor.pacing import ITERATOR_PACER
from pyspark_kinesis.source.state.batch_log import BatchEndLog
from pyspark_kinesis.source.state.offsets import BackfillPlan, ShardPlan, TaskPlan
from tests.unit.scripted import SHARD, SPEC, FakeProxy, task_config

STREAM = SPEC.arn
OTHER_SHARD = "shardId-000000000002"


Stored = list[tuple[int, float, bytes]]  # a shard's records: (sequence number, arrival s, data)


def stored(seqs, *, arrival: float = 1.0, data: bytes = b"x") -> Stored:
    return [(int(s), arrival, data) for s in seqs]


class Shards:
    """KinesisProxy replaced by a server over `shards`: an iterator is a place in a shard's records,
    GetRecords answers up to `page` records from it (and MillisBehindLatest 0 once nothing is left),
    as the service does. The clients the task makes are counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, shards: dict[str, Stored], page: int = 1000) -> None:
        self.shards, self.page = shards, page
        self.made: list[tuple[str, str, int]] = []
        monkeypatch.setattr(task, "proxy_for", self.make)

    def make(self, spec: Any, *, agent: str, max_attempts: int) -> FakeProxy:
        self.made.append((spec.arn, agent, max_attempts))
        server = self

        class Served(FakeProxy):
            def shard_iterator(self, shard: str, position: Position, verify: bool = False) -> str:
                self.calls.append(("GetShardIterator", (shard, position)))
                args = position.iterator_args(verify)
                seqs = [seq for seq, _at, _d in server.shards[shard]]
                if "StartingSequenceNumber" not in args:
                    return f"{shard}@0"
                first = int(args["StartingSequenceNumber"])
                first += args["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
                return f"{shard}@{sum(seq < first for seq in seqs)}"

            def get_records(self, iterator: str, limit: int) -> dict[str, Any]:
                self.calls.append(("GetRecords", (iterator, limit)))
                shard, at = iterator.rsplit("@", 1)
                held = server.shards[shard][int(at) : int(at) + min(limit, server.page)]
                after = int(at) + len(held)
                left = len(server.shards[shard]) - after
                return {
                    "Records": Records.from_lists(
                        [str(seq) for seq, _a, _d in held],
                        ["k"] * len(held),
                        [data for _s, _a, data in held],
                        [arrival for _s, arrival, _d in held],
                    ),
                    "NextShardIterator": f"{shard}@{after}",
                    "MillisBehindLatest": 5000 if left else 0,
                }

        return Served(spec)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    """No iterator kept between tests, no pacing sleeps (the pacer's rules have their own tests)."""
    ITERATORS.clear()
    ITERATOR_PACER.clear()
    monkeypatch.setattr(polling.PACER, "before_call", lambda key: 0.0)
    monkeypatch.setattr(polling.PACER, "after_response", lambda *args: None)
    yield
    ITERATORS.clear()
    ITERATOR_PACER.clear()


def config(meta: str, **options: str):
    return task_config(meta, **{"maxFetchTimeMs": "3000", **options})


def piece(shard: str = SHARD, max_records: int = -1, max_bytes: int = -1, **kw: Any) -> ShardPlan:
    return ShardPlan(STREAM, shard, Position.trim_horizon(), max_records, max_bytes, **kw)


def plan(*pieces: ShardPlan, cutoff_ms: int | None = None, task_index: int = 0) -> TaskPlan:
    return TaskPlan("tok", 3, task_index, pieces or (piece(),), cutoff_ms=cutoff_ms)


def rows(batches) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for batch in batches:
        out += zip(
            batch.column("shardId").to_pylist(), batch.column("sequenceNumber").to_pylist(), strict=True
        )
    return out


def test_each_shard_is_read_and_its_rows_leave_after_the_record_with_one_client_per_stream(
    tmp_path, monkeypatch
):
    server = Shards(monkeypatch, {SHARD: stored([1, 2]), OTHER_SHARD: stored([5])})
    cfg = config(str(tmp_path))
    got = list(task.read_task(cfg, plan(piece(), piece(OTHER_SHARD))))
    assert rows(got) == [(SHARD, "1"), (SHARD, "2"), (OTHER_SHARD, "5")]  # in the plan's order
    assert len(got) == 2  # one batch per shard
    assert server.made == [(STREAM, "reader", task.FETCH_ATTEMPTS)]  # one client for the stream
    record = BatchEndLog.open(cfg.metadata_path).read("tok", 3, 0)
    assert record is not None
    assert {ref.shard: end.records for ref, end in record.shards.items()} == {SHARD: 2, OTHER_SHARD: 1}
    assert record.shards[(STREAM, SHARD)].reached == Position.after("2")


def test_a_replay_reads_each_shard_to_its_recorded_end_and_emits_the_same_rows(tmp_path, monkeypatch):
    cfg = config(str(tmp_path))
    Shards(monkeypatch, {SHARD: stored([1, 2])})
    first = rows(task.read_task(cfg, plan()))
    ITERATORS.clear()
    # The shard has grown since: a replay still ends where the first attempt's record says.
    Shards(monkeypatch, {SHARD: stored([1, 2, 3, 4])})
    assert rows(task.read_task(cfg, plan())) == first == [(SHARD, "1"), (SHARD, "2")]


def test_a_shard_that_read_nothing_yields_no_batch(tmp_path, monkeypatch):
    Shards(monkeypatch, {SHARD: [], OTHER_SHARD: stored([9])})
    got = list(task.read_task(config(str(tmp_path)), plan(piece(), piece(OTHER_SHARD))))
    assert [b.num_rows for b in got] == [1] and rows(got) == [(OTHER_SHARD, "9")]


@pytest.mark.parametrize(
    ("planned", "option", "expected"),
    [
        (2, "1000", 2),  # the plan's share is below the option: the plan's
        (5, "3", 3),  # the option is below the plan's share: the option's
        (-1, "4", 4),  # no share planned (rate limits off): the option's
        (0, "4", 4),  # (0 means no share either)
    ],
)
def test_a_shards_record_limit_is_the_lower_of_its_planned_share_and_the_option(
    tmp_path, monkeypatch, planned, option, expected
):
    Shards(monkeypatch, {SHARD: stored(range(1, 9))})
    cfg = config(str(tmp_path), maxRecordsPerShard=option)
    got = rows(task.read_task(cfg, plan(piece(max_records=planned))))
    assert got == [(SHARD, str(s)) for s in range(1, expected + 1)]


def bytes_read(tmp_path, monkeypatch, planned: int, option: str) -> int:
    Shards(monkeypatch, {SHARD: stored(range(1, 9), data=b"d" * 100)}, page=1)
    return len(
        rows(task.read_task(config(str(tmp_path), maxBytesPerShard=option), plan(piece(max_bytes=planned))))
    )


def test_a_shards_byte_limit_is_the_lower_of_its_planned_share_and_the_option(tmp_path, monkeypatch):
    """Pages of one 100-byte record: the count read grows with the byte limit in force, which is
    the plan's share when it is lower than maxBytesPerShard, else the option's."""
    by_plan = bytes_read(tmp_path / "a", monkeypatch, 250, "10000")
    by_option = bytes_read(tmp_path / "b", monkeypatch, 10_000, "250")
    unplanned = bytes_read(tmp_path / "c", monkeypatch, -1, "250")
    zero = bytes_read(tmp_path / "d", monkeypatch, 0, "250")
    larger = bytes_read(tmp_path / "e", monkeypatch, 450, "10000")
    assert by_plan == by_option == unplanned == zero < larger < 8


def test_the_batchs_cutoff_bounds_every_shard(tmp_path, monkeypatch):
    """Records that arrived after the batch's cutoff stay for the next batch."""
    Shards(monkeypatch, {SHARD: stored([1, 2], arrival=10.0) + stored([3], arrival=30.0)})
    got = rows(task.read_task(config(str(tmp_path)), plan(cutoff_ms=20_000)))
    assert got == [(SHARD, "1"), (SHARD, "2")]


def test_a_task_naming_a_stream_the_options_no_longer_name_is_refused(tmp_path, monkeypatch):
    Shards(monkeypatch, {})
    gone = replace(piece(), stream="arn:aws:kinesis:eu-west-1:123456789012:stream/gone")
    with pytest.raises(
        CheckpointMismatchError, match=r"Batch 3 reads stream .*stream/gone, which the options"
    ):
        list(task.read_task(config(str(tmp_path)), plan(gone)))


def test_many_shards_are_read_in_parallel_and_each_keeps_its_own_rows(tmp_path, monkeypatch):
    shards = [f"shardId-{i:012d}" for i in range(1, 21)]  # more than MAX_THREADS
    Shards(monkeypatch, {s: stored([i * 10 + 1, i * 10 + 2]) for i, s in enumerate(shards)})
    got = rows(task.read_task(config(str(tmp_path)), plan(*(piece(s) for s in shards))))
    assert got == [(s, str(i * 10 + k)) for i, s in enumerate(shards) for k in (1, 2)]


def backfill(cutoff_ms: int = 10**15, **kw: Any) -> BackfillPlan:
    return BackfillPlan(STREAM, SHARD, Position.trim_horizon(), False, cutoff_ms, **kw)


def test_a_batch_read_goes_chunk_by_chunk_to_the_tip(tmp_path, monkeypatch):
    """Each chunk is bounded by maxRecordsPerShard; the read goes on from where a chunk stopped."""
    server = Shards(monkeypatch, {SHARD: stored(range(1, 7))}, page=3)
    got = list(task.read_backfill(config(str(tmp_path), maxRecordsPerShard="2"), backfill()))
    assert rows(got) == [(SHARD, str(s)) for s in range(1, 7)]
    assert [b.num_rows for b in got] == [2, 2, 2]
    assert server.made == [(STREAM, "reader", task.FETCH_ATTEMPTS)]


def test_a_batch_read_stops_at_its_cutoff_and_at_its_named_end(tmp_path, monkeypatch):
    Shards(monkeypatch, {SHARD: stored([1, 2], arrival=10.0) + stored([3], arrival=30.0)}, page=1)
    late = rows(task.read_backfill(config(str(tmp_path)), backfill(cutoff_ms=20_000)))
    assert late == [(SHARD, "1"), (SHARD, "2")]
    ITERATORS.clear()
    Shards(monkeypatch, {SHARD: stored([1, 2, 3, 4])}, page=1)
    named = rows(task.read_backfill(config(str(tmp_path)), backfill(end_at=Position.after("2"))))
    assert named == [(SHARD, "1"), (SHARD, "2")]


def test_a_batch_read_that_never_ends_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(task, "MAX_BACKFILL_CHUNKS", 3)
    Shards(monkeypatch, {SHARD: stored(range(1, 10))})
    cfg = config(str(tmp_path), maxRecordsPerShard="1")
    with pytest.raises(task.ReadStuckError, match="backfill read 3 chunks without ending"):
        list(task.read_backfill(cfg, backfill()))
