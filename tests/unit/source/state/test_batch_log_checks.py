"""The batch-end log's own checks, each on its own: a record stands for its task only when it covers
exactly the shards the checkpoint planned, from the starts the checkpoint gives, and the first record
written stands whoever writes next."""

from __future__ import annotations

import pytest

from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state.batch_log import BatchEndLog
from pyspark_kinesis.source.state.offsets import ShardEnd, TaskEnd

STREAM = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
A, B = (STREAM, "shardId-000000000000"), (STREAM, "shardId-000000000001")


@pytest.fixture
def log(tmp_path) -> BatchEndLog:
    return BatchEndLog.open(str(tmp_path / "meta"))


def ended(start: Position, end: Position, records: int = 1) -> ShardEnd:
    return ShardEnd(start=start, reached=end, records=records)


def test_a_record_from_the_planned_starts_passes(log):
    record = TaskEnd("t", 3, 0, {A: ended(Position.after("10"), Position.after("20"))})
    log.check(record, {A: Position.after("10")})


def test_a_record_from_another_start_is_another_querys(log):
    """Same shard, same task, another start: the records under metadataPath are not this checkpoint's."""
    record = TaskEnd("t", 3, 0, {A: ended(Position.after("10"), Position.after("20"))})
    with pytest.raises(
        CheckpointMismatchError, match="does not match the checkpoint for shard shardId-000000000000"
    ):
        log.check(record, {A: Position.after("11")})


def test_a_record_without_a_planned_shard_is_another_querys(log):
    record = TaskEnd("t", 3, 0, {A: ended(Position.after("10"), Position.after("20"))})
    with pytest.raises(CheckpointMismatchError, match="shard shardId-000000000001"):
        log.check(record, {A: Position.after("10"), B: Position.trim_horizon()})


def test_the_first_record_written_stands(log):
    first = TaskEnd("t", 3, 0, {A: ended(Position.after("10"), Position.after("20"), 10)})
    second = TaskEnd("t", 3, 0, {A: ended(Position.after("10"), Position.after("25"), 15)})
    assert log.write(first) == first
    assert log.write(second) == first
    assert log.read("t", 3, 0) == first
