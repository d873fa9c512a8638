"""endingPosition as a JSON map (batch reads): parsing, the lineage rule for the shards after a named end,
and where a shard's read stops (plain records and inside KPL aggregates)."""

from __future__ import annotations

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.model import Position, ShardInfo
from pyspark_kinesis.source.driver import lineage
from pyspark_kinesis.source.driver.named_positions import named_ends
from pyspark_kinesis.source.executor.cutting import BatchCut, ShardLimits
from pyspark_kinesis.source.options import parse_options

BASE = {"streamName": "orders", "region": "us-east-1"}


def _config(ending: str, **extra: str):
    return parse_options(BASE | {"endingPosition": ending} | extra, streaming=False)


# -- parsing ---------------------------------------------------------------------------------------


def test_a_map_names_shard_ends_and_a_default():
    config = _config(
        '{"default": "AT_TIMESTAMP:2026-01-01T00:00:00Z", "orders": {"shardId-000000000001": '
        '"AFTER_SEQUENCE_NUMBER:42", "shardId-000000000002": "AT_SEQUENCE_NUMBER:7"}}'
    )
    [spec] = config.streams
    assert config.ending_position == Position.at_timestamp(1_767_225_600_000)
    assert dict(spec.shard_ends) == {
        "shardId-000000000001": Position.after("42"),
        "shardId-000000000002": Position.at_sequence("7"),
    }
    assert spec.ending_position is None


def test_shards_at_the_top_level_for_one_stream_and_a_stream_default():
    [spec] = _config('{"shardId-000000000003": "AFTER_SEQUENCE_NUMBER:9"}').streams
    assert dict(spec.shard_ends) == {"shardId-000000000003": Position.after("9")}
    [spec] = _config('{"orders": "AT_TIMESTAMP:2026-01-01T00:00:00Z"}').streams
    assert spec.ending_position == Position.at_timestamp(1_767_225_600_000)


@pytest.mark.parametrize(
    ("ending", "option", "words"),
    [
        ('{"default": "TRIM_HORIZON"}', "endingPosition.default", "unknown position 'TRIM_HORIZON'"),
        ('{"orders": {"shardId-000000000001": "TRIM_HORIZON"}}', "endingPosition.orders.shardId", "TRIM"),
        ('{"payments": "LATEST"}', "endingPosition.payments", "names no stream this source reads"),
        ("AFTER_SEQUENCE_NUMBER:5", "endingPosition", "a sequence number belongs to one shard"),
        ('{"orders": {"shard-1": "LATEST"}}', "endingPosition.orders.shard-1", "neither a shard id"),
        ("{not json", "endingPosition", "is not valid JSON"),
    ],
)
def test_bad_ending_maps_name_the_option(ending, option, words):
    with pytest.raises(OptionError) as error:
        _config(ending)
    assert option in str(error.value) and words in str(error.value)


def test_streaming_reads_still_refuse_an_ending_position():
    with pytest.raises(OptionError, match="applies to batch reads only"):
        parse_options(
            BASE
            | {"endingPosition": '{"shardId-000000000001": "AT_SEQUENCE_NUMBER:1"}', "metadataPath": "/m"},
            streaming=True,
        )


# -- the lineage rule ------------------------------------------------------------------------------


def _info(sid: str, *parents: str) -> ShardInfo:
    parent, adjacent = [*parents, None, None][:2]
    return ShardInfo(sid, parent, adjacent, 0, 2**128 - 1, bool(parents) is False)


def test_shards_descending_from_a_sequence_end_are_left_out():
    listed = [_info("p"), _info("a", "p"), _info("b", "p"), _info("m", "a", "x"), _info("x"), _info("y")]
    assert lineage.past_ends(listed, {"p": Position.after("5")}) == {"a", "b", "m"}
    assert lineage.past_ends(listed, {"x": Position.at_sequence("5")}) == {"m"}
    assert lineage.past_ends(listed, {"p": Position.at_timestamp(1), "y": Position.latest()}) == set()


# -- where the read stops --------------------------------------------------------------------------


def _aggregate(*payloads: bytes) -> bytes:
    aggregator = RecordAggregator()
    for payload in payloads:
        aggregator.add_user_record("k", payload)
    return aggregator.clear_and_get().get_contents()[2]


def _read(end_at: Position, start: Position | None = None, first: int = 0) -> tuple[list[bytes], bool]:
    """One page of four records (the second a KPL aggregate of three), from record `first` on (where
    the service would answer a read resumed at `start`)."""
    page = Records.from_lists(
        seqs=["100", "200", "300", "400"][first:],
        keys=["k"] * (4 - first),
        data=[b"r100", _aggregate(b"a0", b"a1", b"a2"), b"r300", b"r400"][first:],
        arrivals=[1_700_000_000.0 + i for i in range(first, 4)],
    )
    start = start or Position.trim_horizon()
    limits = ShardLimits(max_records=-1, max_bytes=-1, cutoff_ms=1_800_000_000_000, end_at=end_at)
    cut = BatchCut("orders", "arn", "shardId-000000000000", start, limits, None)
    cut.take(page, start)
    return cut.cols.payloads().to_pylist(), cut.reached_cutoff


@pytest.mark.parametrize(
    ("end_at", "expected"),
    [
        (Position.at_sequence("300"), [b"r100", b"a0", b"a1", b"a2"]),
        (Position.after("300"), [b"r100", b"a0", b"a1", b"a2", b"r300"]),
        (Position.at_sequence("200"), [b"r100"]),  # before the aggregate's first sub-record
        (Position.after("200"), [b"r100", b"a0", b"a1", b"a2"]),  # all of the aggregate
        (Position.after("250"), [b"r100", b"a0", b"a1", b"a2"]),  # a gap: stops at the next record
        (Position.at_sequence("100"), []),
    ],
)
def test_a_shard_read_stops_at_its_named_end(end_at, expected):
    assert _read(end_at) == (expected, True)


def test_an_end_past_the_page_reads_it_all_and_goes_on():
    assert _read(Position.after("999")) == ([b"r100", b"a0", b"a1", b"a2", b"r300", b"r400"], False)


def test_a_read_resumed_inside_an_aggregate_stops_at_the_same_end():
    assert _read(Position.after("300"), Position.inside("200", 0), first=1) == ([b"a1", b"a2", b"r300"], True)


# -- checks against the listing --------------------------------------------------------------------


def test_named_ends_are_checked_against_the_listing():
    def listed(first: str | None = None, last: str | None = None) -> list[ShardInfo]:
        return [ShardInfo("shardId-000000000000", None, None, 0, 1, last is not None, first, last)]

    [spec] = _config('{"shardId-000000000009": "AFTER_SEQUENCE_NUMBER:5"}').streams
    with pytest.raises(OptionError) as caught:
        named_ends(spec, listed())
    assert "endingPosition.shardId-000000000009" in str(caught.value)
    assert "Name shards it lists: shardId-000000000000" in str(caught.value)
    [spec] = _config('{"shardId-000000000000": "AT_SEQUENCE_NUMBER:99"}').streams
    with pytest.raises(OptionError, match="sequence number 99 is not in shardId-000000000000"):
        named_ends(spec, listed(first="100"))
    assert named_ends(spec, listed(first="10", last="200")) == {
        "shardId-000000000000": Position.at_sequence("99")
    }
