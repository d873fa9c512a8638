"""Exact starting positions: the startingPosition map's parsing (config.start_positions), the lineage rule
for shards it does not name (lineage.named_states), and the checks against a listing (named_positions.named_starts)."""

from __future__ import annotations

import json

import pytest

from pyspark_kinesis.errors import DataLossError, OptionError
from pyspark_kinesis.model import LATEST, Position, ShardInfo
from pyspark_kinesis.source.driver import lineage
from pyspark_kinesis.source.driver.named_positions import named_starts
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.offset_codec import decode_position, encode_position

SEQ = "49654219758254213958104739577931476735848126163521945602"
BASE = {"region": "eu-west-1", "endpointUrl": "http://127.0.0.1:9", "metadataPath": "/m"}


def options(start, **more) -> dict[str, str]:
    opts = {"streamName": "orders", **BASE, **more}
    opts["startingPosition"] = start if isinstance(start, str) else json.dumps(start)
    return opts


def spec_of(start, streaming=True, **more):
    return parse_options(options(start, **more), streaming=streaming).streams


def shard(sid, parent=None, adjacent=None, closed=False, first="100", last=None) -> ShardInfo:
    return ShardInfo(f"shardId-{sid:012d}", parent, adjacent, 0, 1, closed, first, last)


def sid(n: int) -> str:
    return f"shardId-{n:012d}"


# -- parsing -----------------------------------------------------------------------------------
def test_a_plain_position_still_applies_to_every_shard():
    (spec,) = spec_of("TRIM_HORIZON")
    assert spec.starting_position == Position.trim_horizon() and spec.shard_starts == ()


def test_a_map_names_shards_by_stream_with_defaults():
    start = {
        "default": "TRIM_HORIZON",
        "orders": {
            sid(1): f"AFTER_SEQUENCE_NUMBER:{SEQ}",
            sid(2): f"at_sequence_number:{SEQ}",
            "default": "LATEST",
        },
    }
    (spec,) = spec_of(start)
    assert spec.starting_position.kind == LATEST  # the stream's own default wins over the source's
    assert dict(spec.shard_starts) == {sid(1): Position.after(SEQ), sid(2): Position.at_sequence(SEQ)}


def test_a_source_of_one_stream_may_name_shards_at_the_top_level():
    (spec,) = spec_of({sid(3): f"AT_SEQUENCE_NUMBER:{SEQ}", "default": "TRIM_HORIZON"})
    assert spec.starting_position == Position.trim_horizon()
    assert dict(spec.shard_starts) == {sid(3): Position.at_sequence(SEQ)}


def test_a_map_without_default_falls_back_to_the_read_kind():
    (streaming,) = spec_of({sid(3): f"AT_SEQUENCE_NUMBER:{SEQ}"})
    (batch,) = spec_of({sid(3): f"AT_SEQUENCE_NUMBER:{SEQ}"}, streaming=False)
    assert streaming.starting_position.kind == LATEST and batch.starting_position == Position.trim_horizon()


def test_a_streams_entry_carries_its_own_shard_map():
    streams = [
        {"streamName": "orders", "startingPosition": {sid(1): f"AFTER_SEQUENCE_NUMBER:{SEQ}"}},
        {"streamName": "clicks", "region": "us-east-1"},
    ]
    opts = {"streams": json.dumps(streams), **BASE, "startingPosition": "TRIM_HORIZON"}
    orders, clicks = parse_options(opts, streaming=True).streams
    assert dict(orders.shard_starts) == {sid(1): Position.after(SEQ)}
    assert orders.starting_position == Position.trim_horizon() and clicks.shard_starts == ()


@pytest.mark.parametrize(
    ("start", "option", "words"),
    [
        ("{not json", "startingPosition", "not valid JSON"),
        ({"orders": {"shard-1": "LATEST"}}, "startingPosition.orders.shard-1", "neither a shard id"),
        (
            {"orders": {sid(1): "AT_SEQUENCE_NUMBER:"}},
            f"startingPosition.orders.{sid(1)}",
            "no sequence number",
        ),
        (
            {"orders": {sid(1): "AT_SEQUENCE_NUMBER:12ab"}},
            f"startingPosition.orders.{sid(1)}",
            "no sequence number",
        ),
        ({"default": f"AT_SEQUENCE_NUMBER:{SEQ}"}, "startingPosition.default", "belongs to one shard"),
        ({"orders": f"AFTER_SEQUENCE_NUMBER:{SEQ}"}, "startingPosition.orders", "belongs to one shard"),
        ({"clicks": "LATEST"}, "startingPosition.clicks", "names no stream this source reads"),
        ({"orders": {sid(1): 5}}, f"startingPosition.orders.{sid(1)}", "not a string"),
        ({"orders": {sid(1): "SOMEWHERE"}}, f"startingPosition.orders.{sid(1)}", "unknown position"),
    ],
)
def test_bad_maps_name_the_option_and_what_to_do(start, option, words):
    with pytest.raises(OptionError) as caught:
        spec_of(start)
    assert option in str(caught.value) and words in str(caught.value)


def test_shards_at_the_top_level_of_several_streams_are_refused():
    opts = {"streamName": "orders,clicks", **BASE, "startingPosition": json.dumps({sid(1): "LATEST"})}
    with pytest.raises(OptionError, match="Nest the shards under their stream"):
        parse_options(opts, streaming=True)


def test_a_stream_named_in_the_map_and_in_its_entry_is_refused():
    streams = [{"streamName": "orders", "startingPosition": "LATEST"}]
    opts = {
        "streams": json.dumps(streams),
        **BASE,
        "startingPosition": json.dumps({"orders": "TRIM_HORIZON"}),
    }
    with pytest.raises(OptionError, match=r"streams\[0\].startingPosition"):
        parse_options(opts, streaming=True)


# -- the lineage rule for the shards not named ---------------------------------------------------
def test_unnamed_shards_follow_the_lineage_of_the_named_ones():
    # 0 split into 1 and 2; 2 merged with 3 into 4; 5 unrelated (open), 6 unrelated (closed).
    listed = [
        shard(0, closed=True),
        shard(1, parent=sid(0)),
        shard(2, parent=sid(0), closed=True),
        shard(3, closed=True),
        shard(4, parent=sid(2), adjacent=sid(3)),
        shard(5),
        shard(6, closed=True),
    ]
    named = {sid(2): Position.after(SEQ)}
    states, gone, unknown = lineage.named_states(listed, Position.latest(), named)
    assert gone == unknown == []
    positions = {s: st.position for s, st in states.items()}
    assert positions[sid(2)] == Position.after(SEQ)
    assert sid(0) not in positions  # 2 descends from it: the checkpoint got past it
    assert positions[sid(4)] == Position.trim_horizon()  # born after the named position: from its start
    assert states[sid(4)].parents == (sid(2), sid(3))  # ... after its parents (3 at LATEST: not read)
    assert positions[sid(1)].kind == LATEST and positions[sid(5)].kind == LATEST  # the default
    assert sid(3) not in positions and sid(6) not in positions  # closed, default LATEST: nothing to read
    assert lineage.readable(states) == [sid(1), sid(2), sid(5)]


def test_with_a_default_from_the_start_unrelated_closed_shards_are_read_first():
    listed = [shard(2, closed=True), shard(3, closed=True), shard(4, parent=sid(2), adjacent=sid(3))]
    states, _gone, _unknown = lineage.named_states(
        listed, Position.trim_horizon(), {sid(2): Position.after(SEQ)}
    )
    assert states[sid(3)].position == Position.trim_horizon()
    assert lineage.readable(states) == [sid(2), sid(3)]  # 4 waits for both


def test_a_named_child_skips_its_ancestors_and_a_named_parent_keeps_it_waiting():
    listed = [shard(0, closed=True), shard(1, parent=sid(0)), shard(2, parent=sid(0))]
    states, _g, _u = lineage.named_states(
        listed, Position.trim_horizon(), {sid(1): Position.at_sequence(SEQ)}
    )
    assert set(states) == {sid(1), sid(2)} and states[sid(2)].position == Position.trim_horizon()
    both = {sid(0): Position.after("150"), sid(1): Position.at_sequence(SEQ)}
    states, _g, _u = lineage.named_states(listed, Position.trim_horizon(), both)
    assert lineage.readable(states) == [sid(0)]  # the parent from its position first, then the children


def test_named_shards_past_retention_and_unknown_ones_are_told_apart():
    listed = [shard(4, parent=sid(2), adjacent=sid(3))]
    named = {sid(2): Position.after(SEQ), sid(9): Position.after(SEQ)}
    states, gone, unknown = lineage.named_states(listed, Position.latest(), named)
    assert gone == [sid(2)] and unknown == [sid(9)]
    assert states[sid(4)].position == Position.trim_horizon()


# -- checks against the listing ------------------------------------------------------------------
def test_an_unknown_shard_is_an_error_listing_the_shards_there_are():
    (spec,) = spec_of({sid(9): f"AT_SEQUENCE_NUMBER:{SEQ}"})
    with pytest.raises(OptionError) as caught:
        named_starts(spec, [shard(0), shard(1)], True, 0)
    assert f"startingPosition.{sid(9)}" in str(caught.value) and sid(1) in str(caught.value)


def test_a_sequence_number_outside_its_shard_is_an_error():
    (spec,) = spec_of({sid(0): "AFTER_SEQUENCE_NUMBER:99"})
    with pytest.raises(OptionError, match="is not in shardId-000000000000"):
        named_starts(spec, [shard(0, first="100")], True, 0)
    (spec,) = spec_of({sid(0): "AFTER_SEQUENCE_NUMBER:300"})
    with pytest.raises(OptionError, match="is not in"):
        named_starts(spec, [shard(0, first="100", last="200", closed=True)], True, 0)
    assert named_starts(spec, [shard(0, first="100")], True, 0)[sid(0)].position == Position.after("300")


def test_a_named_shard_past_retention_is_loss_judged_by_fail_on_data_loss(caplog):
    (spec,) = spec_of({sid(2): f"AFTER_SEQUENCE_NUMBER:{SEQ}"})
    listed = [shard(4, parent=sid(2))]
    with pytest.raises(DataLossError, match="past retention"):
        named_starts(spec, listed, True, 0)
    states = named_starts(spec, listed, False, 0)
    assert states[sid(4)].position == Position.trim_horizon() and "past retention" in caplog.text


def test_at_sequence_number_reads_the_record_itself():
    at = Position.at_sequence(SEQ)
    assert decode_position(encode_position(at)) == at and Position.from_json(at.to_json()) == at
    assert at.iterator_args() == {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": SEQ}
    assert not at.skips(SEQ, 0) and at.anchor == SEQ and at.describe() == f"at sequence number {SEQ}"
