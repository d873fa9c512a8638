"""Offset format 3: every shard state comes back exactly, format 2 checkpoints still load, and the
entries are less than half their format-2 size, before and after shards carry sequence numbers."""

from __future__ import annotations

import doctest
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_kinesis.errors import CheckpointFormatError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state import offset_codec
from pyspark_kinesis.source.state.offsets import ShardState, SourceOffset

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
SEQ = "49654321098765432109876543210987654321098765432109876543"

seqs = st.one_of(
    st.integers(min_value=0, max_value=10**56).map(str),
    st.text("0123456789", min_size=1, max_size=60),  # leading zeros: kept as text
)
positions = st.one_of(
    st.just(Position.trim_horizon()),
    st.just(Position.latest()),
    st.just(Position.shard_end()),
    st.integers(min_value=0, max_value=2**45).map(Position.at_timestamp),
    seqs.map(Position.after),
    st.builds(Position.inside, seqs, st.integers(min_value=0, max_value=10**6)),
)
shard_ids = st.one_of(
    st.integers(min_value=0, max_value=10**12 - 1).map(lambda n: f"shardId-{n:012d}"),
    st.text("abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=30),
)
states = st.builds(
    ShardState,
    position=positions,
    parents=st.lists(shard_ids, max_size=2).map(tuple),
    task=st.integers(min_value=-1, max_value=10_000),
    max_records=st.integers(min_value=-1, max_value=10**7),
    max_bytes=st.integers(min_value=-1, max_value=10**12),
    idle=st.booleans(),
    polled_ms=st.integers(min_value=0, max_value=2**45),
    closed=st.booleans(),
)


@given(st.dictionaries(shard_ids, states, max_size=8), st.integers(min_value=-1, max_value=10**6))
def test_every_offset_comes_back_exactly(shards, batch):
    offset = SourceOffset("token-1", batch, {ARN: shards}, cutoff_ms=None, created={ARN: 1})
    assert SourceOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset


def test_a_format_2_checkpoint_still_loads():
    written_by_format_2 = {
        "v": 2,
        "token": "t",
        "batch": 4,
        "streams": {
            ARN: {
                "shardId-000000000001": {
                    "pos": {"k": "after", "seq": SEQ},
                    "par": "shardId-000000000000",
                    "task": 2,
                    "rec": 100,
                    "byt": -1,
                    "idle": False,
                    "polled": 1700000000000,
                    "closed": True,
                },
                "shardId-000000000002": {"pos": {"k": "trim"}},
            }
        },
        "cut": 5,
    }
    offset = SourceOffset.from_json(written_by_format_2)
    one = offset.streams[ARN]["shardId-000000000001"]
    assert one == ShardState(
        Position.after(SEQ), ("shardId-000000000000",), 2, 100, -1, False, 1700000000000, True
    )
    assert offset.streams[ARN]["shardId-000000000002"] == ShardState(Position.trim_horizon())
    assert offset.cutoff_ms == 5
    again = SourceOffset.from_json(json.loads(json.dumps(offset.to_json())))  # rewritten as format 3
    assert again == offset and offset.to_json()["v"] == 3


def format_2_size(offset: SourceOffset) -> int:
    data = offset.to_json() | {
        "v": 2,
        "streams": {k: {sid: s.to_json() for sid, s in v.items()} for k, v in offset.streams.items()},
    }
    return len(json.dumps(data))


def test_entries_are_less_than_half_their_format_2_size():
    fresh = {f"shardId-{n:012d}": ShardState(Position.trim_horizon()) for n in range(1000)}
    read = {
        f"shardId-{n:012d}": ShardState(Position.after(SEQ), task=n % 64, polled_ms=1732400000000)
        for n in range(1000)
    }
    for shards in (fresh, read):
        offset = SourceOffset("token-" + "x" * 32, 7, {ARN: shards})
        assert len(json.dumps(offset.to_json())) * 2 <= format_2_size(offset)


def test_doctests():
    assert doctest.testmod(offset_codec).failed == 0


# -- exact encodings (written against mutation testing: round trips alone hide a wasted byte) --------


def test_sequence_numbers_take_their_fewest_bytes_without_padding():
    # base64url of the big-endian integer in ceil(bits / 8) bytes, padding stripped, worked by hand
    assert offset_codec.encode_position(Position.after("0")) == "AAA"
    assert offset_codec.encode_position(Position.after("255")) == "A_w"
    assert offset_codec.encode_position(Position.after("256")) == "AAQA"
    assert offset_codec.encode_position(Position.after("65559")) == "AAQAX"  # bytes 01 00 17
    assert offset_codec.encode_position(Position.inside("65559", 4)) == "I4.AQAX"
    for text in ("AAA", "A_w", "AAQA", "AAQAX", "I4.AQAX"):
        assert offset_codec.encode_position(offset_codec.decode_position(text)) == text


def test_a_sequence_number_that_is_not_a_plain_number_is_kept_as_text_or_refused():
    assert offset_codec.encode_position(Position.after("0042X")) == "A=0042X"
    assert offset_codec.decode_position("A=0042X") == Position.after("0042X")
    with pytest.raises(ValueError, match=r"sequence number '4\.2' cannot be written into an offset"):
        offset_codec.encode_position(Position.after("4.2"))
    with pytest.raises(ValueError, match="unknown position kind 'SOMEWHERE'"):
        offset_codec.encode_position(Position("SOMEWHERE"))


def test_kinesis_shard_ids_are_packed_to_their_number():
    assert offset_codec.pack_shard_id("shardId-000000000123") == "123"
    assert offset_codec.pack_shard_id("shardId-123") == "~shardId-123"
    assert offset_codec.unpack_shard_id("123") == "shardId-000000000123"


def test_a_checkpoint_from_a_newer_version_says_what_to_do():
    advice = re.escape("pyspark-kinesis. Run that version, or start over with a new checkpointLocation.")
    with pytest.raises(CheckpointFormatError, match="written by a newer version of " + advice):
        offset_codec.decode_position("Q123")
    entry = offset_codec.encode_state(Position.trim_horizon(), (), 0, 10, 100, False, 0, False)
    with pytest.raises(CheckpointFormatError, match="unknown field 'z9' .* version of " + advice):
        offset_codec.decode_state(entry + ";z9")
