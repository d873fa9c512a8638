"""What the planner tells an operator, in its exact words (src/pyspark_kinesis/source/driver/planner.py):
the query's start line per stream, a checkpoint for other streams, and a replay whose metadataPath is not
the one it was planned under (cleaned, moved, or another query's)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver import planner as planner_module
from pyspark_kinesis.source.state.batch_log import planned_key
from pyspark_kinesis.source.state.offsets import ShardState, SourceOffset
from tests.unit.planner_fakes import Clock, FakeKinesis, Harness, arn, config, logged, one_stream, read, shard

A = arn("a")


def test_the_start_of_a_query_is_one_line_per_stream(caplog):
    h = one_stream()
    planner = h.planner()
    with caplog.at_level(logging.INFO, logger=planner_module.__name__):
        start = planner.initial_offset()
        assert caplog.messages == []  # said when the query starts: its first batch is planned
        planner.next_offset(start, None, None)
    assert caplog.messages[:1] == [
        f"Kinesis source starts query {start.token}: stream 'a' in region 'us-east-1' ({A}), 2 shards from "
        "TRIM_HORIZON"
    ]


def test_the_start_line_counts_the_shards_the_options_name(caplog):
    named = json.dumps({"shardId-000000000000": "AFTER_SEQUENCE_NUMBER:5", "default": "TRIM_HORIZON"})
    kinesis = FakeKinesis({A: [shard("shardId-000000000000"), shard("shardId-000000000001")]})
    h = Harness(config("a", startingPosition=named), kinesis, Clock())
    planner = h.planner()
    with caplog.at_level(logging.INFO, logger=planner_module.__name__):
        planner.next_offset(planner.initial_offset(), None, None)
    assert caplog.messages[0].endswith(f"({A}), 2 shards from TRIM_HORIZON (1 shards named)")


def test_a_checkpoint_of_other_streams_is_refused_naming_both():
    h = one_stream()
    other = SourceOffset("tok", 0, {arn("x"): {"s0": ShardState(Position.trim_horizon())}})
    with pytest.raises(CheckpointMismatchError) as info:
        h.planner().check_offset(other)
    assert str(info.value) == (
        f"The checkpoint was written for Kinesis stream(s) {arn('x')}, but the options name {A}: none of them. "
        "Use a new checkpointLocation (and metadataPath) for other streams; to add or remove streams, keep at "
        "least one."
    )


def test_a_replay_without_its_planned_marker_names_the_metadata_path():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.store.delete(planned_key(first.token, 0))
    with pytest.raises(CheckpointMismatchError) as info:
        h.planner().check_logged_batch(logged(first))
    assert str(info.value) == (
        "The checkpoint's batch 0 has no record under metadataPath '/unused' that it was planned: the "
        "metadataPath was changed, cleaned, or is older than the checkpoint. Restore the metadataPath this query "
        "ran with, or start over with a new checkpointLocation (and metadataPath)."
    )


def test_a_replay_planned_differently_names_the_metadata_path():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    tampered = logged(first)
    tampered.streams[A]["s0"] = replace(tampered.streams[A]["s0"], max_records=7)
    with pytest.raises(CheckpointMismatchError) as info:
        h.planner().check_logged_batch(tampered)
    assert str(info.value) == (
        "The checkpoint's batch 0 was planned differently under metadataPath '/unused' (another query's "
        "records, or a checkpoint restored from another copy). Use this query's own checkpoint and metadataPath."
    )


def test_a_checked_replay_is_not_checked_again():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    restarted = h.planner()
    restarted.check_logged_batch(logged(first))
    h.store.delete(planned_key(first.token, 0))
    restarted.check_logged_batch(logged(first))  # known to this run: the marker is not read again
    with pytest.raises(CheckpointMismatchError):
        h.planner().check_logged_batch(logged(first))


def test_a_loss_a_task_went_on_past_is_reported_in_the_driver_log_once_per_batch(caplog):
    """failOnDataLoss=false: the warning where the loss happened is in the log of the executor that ran
    the task; the driver repeats it from the batch-end record, whichever executor read the shard, and
    a later look at the same batch's ends says nothing again."""
    h = one_stream()
    planner = h.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    s0 = offset.state((A, "s0")).position
    lossy = replace(read(s0, 3, tip=False), losses=("the records from TRIM_HORIZON on are past retention",))
    h.run(offset, {(A, "s0"): lossy})
    with caplog.at_level(logging.WARNING, logger="pyspark_kinesis.source.driver"):
        planner.next_offset(offset, None, None)
        planner.next_offset(offset, None, None)
    assert caplog.messages == [
        f"Data loss in batch 0, Kinesis stream {A}, shard s0: the records from TRIM_HORIZON on are past "
        "retention; failOnDataLoss=false, so the query went on without them"
    ]
