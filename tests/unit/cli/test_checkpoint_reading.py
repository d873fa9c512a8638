"""`pyspark-kinesis lag` and `inspect` read a checkpoint and a metadataPath: a checkpoint that does not
exist, a folder that is not one, another query's metadataPath and a deleted batch-end record each get
their own words (they all said "no committed batch yet" or "no record yet")."""

from __future__ import annotations

import orjson
import pytest

from pyspark_kinesis.cli.query_state import Checkpoint
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state.batch_log import BatchEndLog
from pyspark_kinesis.source.state.offsets import ShardState, SourceOffset

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


def checkpoint_with(tmp_path, token: str) -> str:
    """A checkpoint folder whose offset log has batch 0 of a query with `token`, one shard on task 0."""
    offset = SourceOffset(token, 0, {ARN: {"s0": ShardState(position=Position.trim_horizon(), task=0)}})
    folder = tmp_path / "cp"
    (folder / "offsets").mkdir(parents=True)
    lines = [
        "v1",
        '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}',
        orjson.dumps(offset.to_json()).decode(),
    ]
    (folder / "offsets" / "0").write_text("\n".join(lines))
    return str(folder)


def test_a_checkpoint_that_does_not_exist_or_is_not_one(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        Checkpoint(str(tmp_path / "nowhere"), str(tmp_path / "meta"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is not a Structured Streaming checkpoint"):
        Checkpoint(str(tmp_path / "empty"), str(tmp_path / "meta"))


def test_another_querys_metadata_path_is_named_as_such(tmp_path):
    location = checkpoint_with(tmp_path, "a" * 32)
    BatchEndLog.open(str(tmp_path / "other"), None).start_query("b" * 32, [ARN])
    with pytest.raises(ValueError, match="holds no records of this checkpoint's query"):
        Checkpoint(location, str(tmp_path / "other")).batch(0)


def test_a_record_the_driver_read_and_that_is_gone_is_told_apart_from_one_not_written_yet(tmp_path):
    token = "c" * 32
    location = checkpoint_with(tmp_path, token)
    log = BatchEndLog.open(str(tmp_path / "meta"), None)
    log.start_query(token, [ARN])
    assert Checkpoint(location, str(tmp_path / "meta")).batch(0).read == frozenset()
    log.mark_read(token, 0, [0])
    found = Checkpoint(location, str(tmp_path / "meta")).batch(0)
    assert found.records == {0: None} and found.read == frozenset({0})


def test_lag_finds_a_tables_later_stream_where_the_query_recorded_its_first():
    from pyspark_kinesis.cli.checkpoints import _place_of

    first = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"
    later = first.replace("2026-01-01", "2026-03-01")
    local = {"region": "us-east-1", "endpointUrl": "http://127.0.0.1:4567"}
    recorded = {first: local, ARN: {"region": "us-east-1", "endpointUrl": "http://127.0.0.1:9"}}
    assert _place_of(recorded, later) == local  # (followed after the table's stream was enabled again)
    assert _place_of(recorded, first.replace("table/orders/", "table/other/")) == {}
    assert _place_of(recorded, ARN + "2") == {}
