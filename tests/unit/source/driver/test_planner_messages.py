"""What the planner tells an operator, in its exact words (src/pyspark_kinesis/source/driver/planner.py):
the query's start line per stream, a checkpoint for other streams, a replay whose metadataPath is not
the one it was planned under (cleaned, moved, or another query's), streams dropped from or added to the
options, and listings that fail (for hash ranges; after a closure under AvailableNow, with its back-off)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import orjson
import pytest

from pyspark_kinesis.errors import CheckpointMismatchError, StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver import planner as planner_module
from pyspark_kinesis.source.state.batch_log import batch_folder, planned_key
from pyspark_kinesis.source.state.offsets import ShardState, SourceOffset
from tests.unit.planner_fakes import (
    HALF,
    Clock,
    FakeKinesis,
    Harness,
    arn,
    config,
    logged,
    one_stream,
    read,
    shard,
)

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


def test_a_dynamodb_tables_new_stream_is_named_as_such_with_both_ways_on():
    from pyspark_kinesis.source.driver.recorded import other_streams

    old = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"
    new = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-03-01T00:00:00.000"
    message = str(other_streams({old}, {new}))
    assert message.startswith(
        f"The stream of DynamoDB table 'orders' is a new one ({new}) since this checkpoint"
    )
    assert f"written for {old}" in message and "Name the table by its name (streamName=orders)" in message
    other = "arn:aws:dynamodb:eu-west-1:123456789012:table/payments/stream/2026-03-01T00:00:00.000"
    assert str(other_streams({old}, {other})).startswith("The checkpoint was written for")  # another table


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


def test_a_checkpoint_of_other_streams_names_every_stream_on_both_sides():
    kinesis = FakeKinesis({arn("a"): [shard("s0")], arn("b"): [shard("s0")]})
    h = Harness(config("a", "b"), kinesis, Clock())
    state = {"s0": ShardState(Position.trim_horizon())}
    other = SourceOffset("tok", 0, {arn("y"): state, arn("x"): state})
    with pytest.raises(CheckpointMismatchError) as info:
        h.planner().check_offset(other)
    assert str(info.value).startswith(
        f"The checkpoint was written for Kinesis stream(s) {arn('x')}, {arn('y')}, but the options name "
        f"{arn('a')}, {arn('b')}: none of them."
    )


def test_streams_dropped_from_and_added_to_the_options_are_said(caplog):
    """A restart with other streams: those no longer named leave the offset (a warning), those newly
    named start at their starting position (said too)."""
    kinesis = FakeKinesis({A: [shard("s0")], arn("b"): [shard("s0")], arn("c"): [shard("s0")]})
    before = Harness(config("a", "c"), kinesis, Clock())
    planner = before.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    before.run(first)
    after = Harness(config("a", "b"), kinesis, Clock(), before.store)
    with caplog.at_level(logging.INFO, logger="pyspark_kinesis.source.driver"):
        second = after.planner().next_offset(logged(first), None, None)
    assert sorted(second.streams) == [A, arn("b")]
    assert f"Kinesis stream {arn('c')} is no longer in the options: dropped from the query's offsets" in (
        caplog.messages
    )
    assert f"Kinesis stream {arn('b')} was added to the options: read from its starting position" in (
        caplog.messages
    )


def ranges(listed) -> dict:
    return {ref: (info.start_hash, info.end_hash) for ref, info in listed.items()}


def test_a_replay_filters_by_the_hash_key_ranges_its_batch_was_planned_with_not_by_a_listing():
    """Issue #61 item 3: a restarted driver listed each stream for the ranges of a replayed batch, and
    when that listing failed the replay kept the KPL user records its first attempt had dropped."""
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    planned = {(A, "s0"): (0, HALF - 1), (A, "s1"): (HALF, 2**128 - 1)}
    assert ranges(planner.listed(first)) == planned
    restarted = h.planner()  # (a restart: nothing listed in this run yet, and ListShards refuses)
    asked: list[str] = []

    def refuse(key, *args, **kwargs):
        asked.append(key)
        raise StreamAccessError("ListShards refused (injected)")

    restarted.discovery.refresh = refuse  # type: ignore[method-assign]
    restarted.check_logged_batch(logged(first))  # (what Spark's partitions() does first)
    assert ranges(restarted.listed(logged(first))) == planned
    assert asked == []


def test_a_replay_of_a_batch_whose_marker_has_no_ranges_lists_and_fails_clearly_if_it_cannot(caplog):
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    key = f"{batch_folder(first.token, 0)}/planned.json"
    marker = orjson.loads(h.store.data[key])
    del marker["listed"]  # (a marker written before markers kept it)
    h.store.data[key] = orjson.dumps(marker)
    restarted = h.planner()

    def refuse(key, *args, **kwargs):
        raise StreamAccessError("ListShards refused (injected)")

    restarted.discovery.refresh = refuse  # type: ignore[method-assign]
    restarted.check_logged_batch(logged(first))
    with pytest.raises(StreamAccessError) as failed:
        restarted.listed(logged(first))
    assert str(failed.value) == (
        f"Kinesis stream {A}: batch 0 must be read as it was planned, and its record under metadataPath does "
        "not keep shard s0's hash key range (it was written by an earlier version), which ListShards did not "
        "answer. Start the query again once ListShards answers."
    )
    again = h.planner()
    again.check_logged_batch(logged(first))
    assert ranges(again.listed(logged(first))) == {(A, "s0"): (0, HALF - 1), (A, "s1"): (HALF, 2**128 - 1)}


def test_a_shard_whose_range_no_listing_of_this_run_told_waits_for_one(caplog):
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    restarted = h.planner()
    h.kinesis.failures = 100  # every listing of this run fails
    with caplog.at_level(logging.WARNING, logger=planner_module.__name__):
        assert restarted.next_offset(first, None, None) is first  # no batch: no range known
    assert f"Kinesis shards s0 of {A}, s1 of {A} wait for a listing that shows their hash key ranges" in (
        caplog.messages
    )
    h.kinesis.failures = 0
    h.clock.now += 60_000
    second = restarted.next_offset(first, None, None)
    assert second.batch == 1 and ranges(restarted.listed(second)) == {
        (A, "s0"): (0, HALF - 1),
        (A, "s1"): (HALF, 2**128 - 1),
    }


def test_an_available_now_run_whose_closed_shards_children_never_list_fails_naming_them():
    """Under AvailableNow a closure's listing is tried 6 times, backing off 0.5 s doubling to 8 s at
    most, then the run fails naming the closed shards and the children the listings lacked."""
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a"), kinesis, Clock())
    planner = h.planner()
    slept: list[float] = []
    planner.sleep = slept.append
    planner.read_up_to(h.clock.now)
    first = planner.next_offset(planner.initial_offset(), None, None)
    closed = read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())
    h.run(first, {(A, "p"): replace(closed, children=("c2", "c1"))})
    kinesis.shards[A] = [shard("p", closed=True), shard("c1", "p")]  # c2 never lists
    with pytest.raises(StreamAccessError) as failed:
        planner.next_offset(first, None, None)
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert str(failed.value) == (
        f"Kinesis stream {A}: shards p closed, but 6 listings in a row failed or did not show their children "
        "c2; trigger(availableNow=True) cannot finish without reading them. Run the query again once "
        "ListShards answers."
    )


def test_a_running_query_lists_a_closures_children_once_per_trigger():
    """Outside AvailableNow a listing that lacks the children is tried again at the next trigger."""
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a"), kinesis, Clock())
    planner = h.planner()
    planner.sleep = lambda s: pytest.fail("a running query does not wait between listings")
    first = planner.next_offset(planner.initial_offset(), None, None)
    closed = read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())
    h.run(first, {(A, "p"): replace(closed, children=("c1",))})
    calls = kinesis.list_calls[A]
    kinesis.failures = 1
    planner.next_offset(first, None, None)
    assert kinesis.list_calls[A] == calls + 1


def test_an_available_now_run_whose_listings_fail_fails_rather_than_end_early():
    """Found by the simulation: a scheduled AvailableNow run that met a ListShards outage (no range
    known, so no shard admitted) planned no batch, which ends the run: its records were left for a
    later run without a word. Now the listing is tried 6 times, then the run fails, naming the stream."""
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    restarted = h.planner()
    slept: list[float] = []
    restarted.sleep = slept.append
    restarted.read_up_to(h.clock.now)
    h.kinesis.failures = 100
    with pytest.raises(StreamAccessError) as failed:
        restarted.next_offset(first, None, None)
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert str(failed.value) == (
        f"Kinesis stream(s) {A}: 6 listings in a row failed, and without them trigger(availableNow=True) "
        "cannot read their shards (each batch keeps the hash key ranges it filters by). Run the query again "
        "once ListShards answers."
    )
