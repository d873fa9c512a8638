"""What the chaos harness's age-out fault reads from a checkpoint (tests/driver.py `tip_positions`): the
shards found at the tip at a position a restart may resume from, so that it never ages out records a
real stream could not have lost (records that arrived after the tip was seen, seconds ago)."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state.offsets import ShardState, SourceOffset
from tests.driver import tip_positions

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/chaos"


def log_offset(checkpoint: Path, batch: int, states: dict[str, ShardState], other: bool = False) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0})]
    if other:  # the two-source shape: the rate source's offset on its own line
        lines.append(json.dumps({"offset": 5}))
    lines.append(json.dumps(SourceOffset("0" * 32, batch, {ARN: states}).to_json()))
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))


def commit(checkpoint: Path, batch: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch)).write_text("v1\n{}")


def test_shards_at_the_tip_from_the_last_commit_on_with_their_smallest_position(tmp_path: Path) -> None:
    log_offset(tmp_path, 0, {"shardId-0": ShardState(Position.after("100"), tip_ms=1)})  # before the commit
    log_offset(tmp_path, 1, {"shardId-0": ShardState(Position.after("200"))})
    commit(tmp_path, 0)
    commit(tmp_path, 1)
    log_offset(
        tmp_path,
        2,
        {
            "shardId-0": ShardState(Position.after("300")),
            "shardId-1": ShardState(Position.after("150"), tip_ms=5),
            "shardId-2": ShardState(Position.trim_horizon(), tip_ms=5),
        },
        other=True,
    )
    log_offset(tmp_path, 3, {"shardId-1": ShardState(Position.after("170"), tip_ms=9)})
    assert tip_positions(tmp_path) == {"shardId-1": "150", "shardId-2": None}


def test_a_tip_at_the_committed_position_counts(tmp_path: Path) -> None:
    log_offset(tmp_path, 0, {"shardId-0": ShardState(Position.after("100"), tip_ms=1)})
    commit(tmp_path, 0)
    log_offset(tmp_path, 1, {"shardId-0": ShardState(Position.after("120"))})
    assert tip_positions(tmp_path) == {"shardId-0": "100"}


def test_a_checkpoint_without_offsets_has_no_tip(tmp_path: Path) -> None:
    assert tip_positions(tmp_path) == {}


def test_a_batch_end_record_or_quiet_note_that_says_the_tip_counts_too(tmp_path: Path) -> None:
    """Under asynchronous progress tracking a batch's record can say the tip before Spark's log holds
    the offset that carries it, and a restart plans from the record (found by the chaos run of
    2026-11-29: the age-out fault trimmed records behind such a tip, and the query rightly said nothing)."""
    checkpoint, meta = tmp_path / "cp", tmp_path / "meta"
    log_offset(checkpoint, 2, {"shardId-2": ShardState(Position.after("300"))})
    commit(checkpoint, 1)
    folder = meta / ("0" * 32) / "batch-000000000002"
    folder.mkdir(parents=True)
    end = {"start": Position.after("300").to_json(), "end": Position.after("340").to_json(), "tip": True}
    (folder / "task-00000.json").write_text(json.dumps({"streams": {ARN: {"shardId-2": end}}}))
    (folder / "task-00001.json").write_text(
        json.dumps({"streams": {ARN: {"shardId-3": {**end, "tip": False}}}})
    )
    (folder / "quiet-000000000009.json").write_text(
        json.dumps({"streams": {ARN: {"shardId-4": [Position.after("77").to_json(), 9]}}})
    )
    old = meta / ("0" * 32) / "batch-000000000000"  # (before the last commit: not where a restart starts)
    old.mkdir(parents=True)
    (old / "task-00000.json").write_text(json.dumps({"streams": {ARN: {"shardId-5": end}}}))
    assert tip_positions(checkpoint) == {}
    assert tip_positions(checkpoint, meta) == {"shardId-2": "300", "shardId-4": "77"}
