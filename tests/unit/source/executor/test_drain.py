"""drainInOneBatch on the executor (`executor.drain`): a shard read in chunks, each bounded by the
per-shard limits, spilled to local disk, recorded chunk by chunk; a replay reads the recorded chunks and
gives exactly the first attempt's rows, and an attempt that lost the race to record emits the winner's.

The shard is the in-memory page source of the replay property test (plain records and KPL aggregates,
pages cut at random sizes), so chunk ends fall inside aggregates too."""

from __future__ import annotations

import os
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import drain
from pyspark_kinesis.source.executor.columns import Columns
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.batch_log import BatchEndLog
from pyspark_kinesis.source.state.offsets import ShardEnd, ShardPlan, SourceOffset, TaskEnd, TaskPlan
from tests.unit.scripted import SHARD, SPEC, FakeProxy, task_config
from tests.unit.source.executor.test_replay_property import ShardPages, build_shard

STREAM = SPEC.arn


def config(meta: str, limit: int):
    return task_config(meta, maxRecordsPerShard=str(limit), maxFetchTimeMs="5000", drainInOneBatch="true")


def plan(task: int = 0) -> TaskPlan:
    piece = ShardPlan(STREAM, SHARD, Position.trim_horizon(), -1, -1)
    return TaskPlan("tok", 3, task, (piece,), cutoff_ms=None, drain=True)


def rows(batches) -> list[tuple[str, int, bytes]]:
    out = []
    for batch in batches:
        out += zip(
            batch.column("sequenceNumber").to_pylist(),
            batch.column("subSequenceNumber").to_pylist(),
            batch.column("data").to_pylist(),
            strict=True,
        )
    return out


class Served:
    """A page source per read over the same shard, counting the reads (one per chunk)."""

    def __init__(self, seqs, data, page_sizes) -> None:
        self.seqs, self.data, self.page_sizes, self.reads = seqs, data, page_sizes, 0

    def __call__(self, _context) -> ShardPages:
        self.reads += 1
        return ShardPages(self.seqs, self.data, self.page_sizes)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=12),
    limit=st.integers(min_value=1, max_value=6),
    page_sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=4),
)
def test_a_drained_shard_is_read_whole_in_bounded_chunks_and_replays_chunk_by_chunk(
    shape, limit, page_sizes, tmp_path_factory
):
    seqs, data, users = build_shard(shape)
    cfg = config(str(tmp_path_factory.mktemp("meta")), limit)
    served = Served(seqs, data, page_sizes)
    first = list(drain.read_drained(cfg, plan(), {STREAM: FakeProxy()}, served))
    assert rows(first) == users  # every user record once, in order, in one batch
    assert all(b.num_rows <= limit for b in first)  # no chunk above the per-shard limit
    record = BatchEndLog.open(cfg.metadata_path).read("tok", 3, 0)
    assert record is not None
    end = record.shards[(STREAM, SHARD)]
    assert end.records == len(users) and end.at_tip and len(end.chunks) == served.reads
    assert [c.start for c in end.chunks[1:]] == [c.reached for c in end.chunks[:-1]]  # contiguous
    # A replay (the record exists: a retry, a restarted query) reads the recorded chunks again.
    again = Served(seqs, data, page_sizes)
    replayed = list(drain.read_drained(cfg, plan(), {STREAM: FakeProxy()}, again))
    assert rows(replayed) == users and again.reads == len(end.chunks)


def test_an_attempt_that_lost_the_race_emits_the_winners_rows(tmp_path):
    """The winner recorded a shorter read (its chunks end earlier): this attempt, which read the
    whole shard, emits exactly what the winner recorded."""
    seqs, data, users = build_shard([0, 3, 0, 2, 0])
    cfg = config(str(tmp_path), 2)
    winner_cfg = config(str(tmp_path / "w"), 2)
    served = Served(seqs, data, [5])
    whole = list(drain.read_drained(winner_cfg, plan(), {STREAM: FakeProxy()}, served))
    full = BatchEndLog.open(winner_cfg.metadata_path).read("tok", 3, 0)
    assert full is not None and rows(whole) == users
    end = full.shards[(STREAM, SHARD)]
    short = drain.end_of_chunks(list(end.chunks[:2]))
    BatchEndLog.open(cfg.metadata_path).write(TaskEnd("tok", 3, 0, {(STREAM, SHARD): short}))
    log = BatchEndLog.open(cfg.metadata_path)

    original = log.read

    def race(*args):  # the winner's record appears only after this attempt looked for one
        log.read = original
        return None

    emitted = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchEndLog, "open", staticmethod(lambda *_a, **_k: log))
        patch.setattr(log, "read", race)
        emitted = list(drain.read_drained(cfg, plan(), {STREAM: FakeProxy()}, Served(seqs, data, [5])))
    assert rows(emitted) == users[: short.records] and short.records < len(users)


def test_summed_adds_the_chunks_up_and_keeps_the_last_ones_stop():
    a = ShardEnd(Position.trim_horizon(), Position.after("10"), records=2, bytes=5, first=("5", 0))
    b = ShardEnd(Position.after("10"), Position.after("20"), records=3, bytes=7, at_tip=True, millis_behind=0)
    total = drain.end_of_chunks([a, b])
    assert (total.start, total.reached, total.records, total.bytes) == (a.start, b.reached, 5, 12)
    assert total.first == ("5", 0) and total.at_tip and total.millis_behind == 0 and total.chunks == (a, b)
    empty_first = drain.end_of_chunks(
        [replace(a, records=0, first=None), b.__class__(b.start, b.reached, first=("15", 0))]
    )
    assert empty_first.first == ("15", 0)
    assert ShardEnd.from_json(total.to_json()) == total  # the chunks travel in the record
    lossy = drain.end_of_chunks([replace(a, losses=("x",)), b, replace(b, losses=("y", "z"))])
    assert lossy.losses == ("x", "y", "z")  # what the driver reports comes from the summed end


def test_done_is_the_cutoff_the_tip_or_the_shards_end():
    running = ShardEnd(Position.trim_horizon(), Position.after("1"))
    assert not drain.done(running)
    assert drain.done(replace(running, at_tip=True))
    assert drain.done(replace(running, reached_cutoff=True))
    assert drain.done(replace(running, reached=Position.shard_end()))


def test_the_offset_carries_the_drain_flag_to_the_tasks():
    offset = SourceOffset("tok", 0, {}, cutoff_ms=5, drain=True)
    assert SourceOffset.from_json(offset.to_json()).drain
    assert not SourceOffset.from_json(replace(offset, drain=False).to_json()).drain
    assert "drain" not in replace(offset, drain=False).to_json()


def test_a_spill_lives_in_sparks_local_dir_and_is_removed_when_closed(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path},/nonexistent")
    spill = drain.Spill()
    assert list(spill.batches()) == []
    cols = Columns("orders", STREAM, SHARD)
    cols.append(b"x", "k", "1", 0, 1.0)
    spill.add(cols)
    spill.add(Columns("orders", STREAM, SHARD))  # an empty chunk adds nothing
    assert spill.path is not None and os.path.dirname(spill.path) == str(tmp_path)
    (batch,) = spill.batches()
    assert isinstance(batch, pa.RecordBatch) and batch.num_rows == 1 and spill.rows == 1
    path = spill.path
    spill.close()
    assert not os.path.exists(path)


def test_drain_in_one_batch_is_a_streaming_option():
    from pyspark_kinesis.errors import OptionError
    from pyspark_kinesis.source.options import refuse_fan_out_for_batch_reads

    config = parse_options(
        {"streamName": "s", "region": "eu-west-1", "drainInOneBatch": "true"}, streaming=False
    )
    with pytest.raises(OptionError, match="'drainInOneBatch': applies to streaming reads only"):
        refuse_fan_out_for_batch_reads(config)


class AgedPages(ShardPages):
    """A shard whose oldest records aged out: a position before its oldest record opens there."""

    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        if position.seq is not None and position.seq not in self.seqs:
            self.opens.append(position)
            self.cursor = 0
            return True
        return super().open(position, verify=verify, reuse=reuse)


class Trimmed(Served):
    def __call__(self, _context) -> ShardPages:
        self.reads += 1
        return AgedPages(self.seqs, self.data, self.page_sizes)


def test_a_drained_replay_notes_its_own_losses_not_the_first_attempts(tmp_path):
    """failOnDataLoss=false: the replay of a drained batch whose first records aged out since notes what
    it went on without beside the record (for the driver to report), not what the first attempt lost."""
    seqs, data, users = build_shard([0, 0, 0, 0, 0, 0])
    cfg = replace(config(str(tmp_path / "meta"), 2), fail_on_data_loss=False)
    list(drain.read_drained(cfg, plan(), {STREAM: FakeProxy()}, Served(seqs, data, [5])))
    log = BatchEndLog.open(cfg.metadata_path)
    record = log.read("tok", 3, 0)
    assert record is not None
    end = record.shards[(STREAM, SHARD)]
    marked = replace(
        end,
        losses=("the first attempt's loss",),
        chunks=tuple(
            replace(c, losses=("the first attempt's loss",)) if i == 0 else c
            for i, c in enumerate(end.chunks)
        ),
    )
    log.store.delete("tok/batch-000000000003/task-00000.json")
    log.write(replace(record, shards={(STREAM, SHARD): marked}))
    trimmed = Trimmed(seqs[3:], data[3:], [5])  # the first three records aged out since
    replayed = list(drain.read_drained(cfg, plan(), {STREAM: FakeProxy()}, trimmed))
    assert rows(replayed) == users[3:]
    noted = log.with_noted_losses("tok", 3, {(STREAM, SHARD): replace(end, losses=())})[
        (STREAM, SHARD)
    ].losses
    assert noted and all("must be read again exactly as first read" in text for text in noted), noted
