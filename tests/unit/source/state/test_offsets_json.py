"""The JSON forms of what is durable: batch-end records (TaskEnd, ShardEnd) and format-2 offset entries
(ShardState, still read from old checkpoints). Every field comes back exactly; a record written before a
field existed reads as that field's default; a newer format is refused with advice.

Written against mutation testing (bash scripts/mutation.sh 'pyspark_kinesis.source.state.offsets.*'):
the integration tests round-trip these records with most fields at their defaults, so a misspelt key
or a changed default went unnoticed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_kinesis.errors import CheckpointFormatError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state.offsets import ShardEnd, ShardState, SourceOffset, TaskEnd

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
shard_ids = st.integers(0, 10**6).map(lambda n: f"shardId-{n:012d}")
seqs = st.integers(0, 10**40).map(str)
positions = st.one_of(  # never LATEST: a read resolves it before anything is recorded
    st.just(Position.trim_horizon()),
    st.just(Position.shard_end()),
    st.integers(1, 2**45).map(Position.at_timestamp),
    seqs.map(Position.after),
    st.builds(Position.inside, seqs, st.integers(0, 10**4)),
)
ends = st.builds(
    ShardEnd,
    start=positions,
    reached=positions,
    records=st.integers(0, 10**7),
    bytes=st.integers(0, 10**10),
    at_tip=st.booleans(),
    reached_cutoff=st.booleans(),
    children=st.lists(shard_ids, max_size=2).map(tuple),
    millis_behind=st.integers(-1, 10**9),
    read_at_ms=st.integers(0, 2**45),
    first=st.none() | st.tuples(seqs, st.integers(0, 10**4)),
    unrun=st.booleans(),
    holder=st.sampled_from(["", "10.0.0.7:41234@1795540618306"]),
    losses=st.lists(st.text(max_size=40), max_size=2).map(tuple),
    misplaced=st.integers(0, 10**6),
)
states = st.builds(
    ShardState,
    position=positions,
    parents=st.lists(shard_ids, max_size=2).map(tuple),
    task=st.integers(-1, 500),
    max_records=st.integers(-1, 10**6),
    max_bytes=st.integers(-1, 10**9),
    idle=st.booleans(),
    polled_ms=st.integers(0, 2**45),
    closed=st.booleans(),
    tip_ms=st.integers(0, 2**45),
)


@given(ends)
def test_a_shard_end_comes_back_exactly(end):
    assert ShardEnd.from_json(end.to_json()) == end


@given(st.dictionaries(shard_ids, ends, max_size=3), st.integers(0, 10**6), st.integers(0, 64))
def test_a_task_end_comes_back_exactly(shards, batch, task):
    record = TaskEnd("tok", batch, task, {(ARN, sid): end for sid, end in shards.items()})
    assert TaskEnd.from_json(record.to_json()) == record


@given(states)
def test_a_format_2_offset_entry_comes_back_exactly(state):
    assert ShardState.from_json(state.to_json()) == state


@given(states)
def test_a_format_3_offset_entry_comes_back_exactly(state):
    assert ShardState.from_compact(state.to_compact()) == state


def test_fields_a_record_does_not_have_read_as_their_defaults():
    """Records written before a field existed: each missing key means the dataclass's default."""
    start, end = Position.trim_horizon().to_json(), Position.after("5").to_json()
    assert ShardEnd.from_json({"start": start, "end": end}) == ShardEnd(
        Position.trim_horizon(), Position.after("5")
    )
    assert ShardState.from_json({"pos": end}) == ShardState(Position.after("5"))
    # (a first record written without its sub-sequence number: 0)
    assert ShardEnd.from_json({"start": start, "end": end, "fs": "4"}).first == ("4", 0)


def test_the_json_keys_are_the_documented_short_ones():
    """The keys are the on-disk format (docs/design.md): renaming one breaks every existing record."""
    end = ShardEnd(
        Position.trim_horizon(),
        Position.after("5"),
        records=3,
        bytes=30,
        at_tip=True,
        reached_cutoff=True,
        children=("shardId-000000000001", "shardId-000000000002"),
        millis_behind=7,
        read_at_ms=9,
        first=("4", 1),
        unrun=True,
        holder="h:1@2",
        losses=("gone",),
        misplaced=2,
    )
    assert set(end.to_json()) == {
        "start",
        "end",
        "n",
        "b",
        "tip",
        "cut",
        "children",
        "behind",
        "at",
        "fs",
        "fb",
        "unrun",
        "h",
        "loss",
        "mis",
    }
    assert end.to_json()["children"] == "shardId-000000000001,shardId-000000000002"
    plain = ShardEnd(Position.trim_horizon(), Position.after("5")).to_json()
    assert set(plain) == {"start", "end", "n", "b", "tip", "cut", "children", "behind", "at"}
    state = ShardState(Position.after("5"), parents=("p", "q"))
    assert set(state.to_json()) == {"pos", "par", "task", "rec", "byt", "idle", "polled", "closed", "tip"}
    assert state.to_json()["par"] == "p,q"
    assert TaskEnd("tok", 1, 0, {}).to_json() == {
        "v": 2,
        "token": "tok",
        "batch": 1,
        "task": 0,
        "streams": {},
    }


def test_a_newer_format_is_refused_naming_the_record_and_the_versions_read():
    newer = (
        "the checkpoint (or metadataPath) was written by a newer version. Run that version, or start over "
        "with a new checkpointLocation and metadataPath."
    )
    with pytest.raises(CheckpointFormatError) as record:
        TaskEnd.from_json(TaskEnd("tok", 1, 0, {}).to_json() | {"v": 99})
    assert str(record.value) == (
        f"The batch-end record is in format version 99; this version of pyspark-kinesis reads versions 2: {newer}"
    )
    with pytest.raises(CheckpointFormatError) as offset:
        SourceOffset.from_json(SourceOffset("tok", 1, {}).to_json() | {"v": 99})
    assert str(offset.value) == (
        f"The offset is in format version 99; this version of pyspark-kinesis reads versions 2, 3: {newer}"
    )


def test_a_newer_format_is_refused_with_advice():
    advice = "Run that version, or start over with a new checkpointLocation and metadataPath."
    record = TaskEnd("tok", 1, 0, {}).to_json() | {"v": 99}
    with pytest.raises(
        CheckpointFormatError,
        match=r"format version 99; this version of pyspark-kinesis reads versions 2: .*" + re.escape(advice),
    ):
        TaskEnd.from_json(record)
    offset = SourceOffset("tok", 1, {}).to_json() | {"v": 99}
    with pytest.raises(CheckpointFormatError, match="reads versions 2, 3: the checkpoint"):
        SourceOffset.from_json(offset)
    with pytest.raises(CheckpointFormatError, match="format version 0"):
        TaskEnd.from_json({k: v for k, v in TaskEnd("tok", 1, 0, {}).to_json().items() if k != "v"})


def test_a_task_plan_shows_no_relay_key_in_its_repr():
    """Issue #61 item 9: the query run's relay key (what lets a read continue another executor's
    subscription) showed in the plan's repr, and so in logs and error messages that print a plan."""
    from pyspark_kinesis.source.state.offsets import TaskPlan

    plan = TaskPlan("tok", 3, 0, (), None, relay_key=b"\xab" * 32)
    assert "relay_key" not in repr(plan) and "ab" * 8 not in repr(plan) and "\\xab" not in repr(plan)
    assert plan.relay_key == b"\xab" * 32
