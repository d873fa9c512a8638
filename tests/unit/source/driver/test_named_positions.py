"""The start-up checks of named positions (named_positions.py) pinned to their bounds and exact words
(what an operator reads at query start): a timestamp start against the stream's retention, named
starting shards that are unknown or past retention, named ending shards that are unknown."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from pyspark_kinesis.errors import DataLossError, OptionError
from pyspark_kinesis.model import MIN_RETENTION_MS, RETENTION_MARGIN_MS, Position, ShardInfo
from pyspark_kinesis.source.driver import named_positions
from pyspark_kinesis.source.driver.named_positions import check_start_in_retention, named_ends, named_starts
from pyspark_kinesis.source.options import parse_options

NOW = 1_800_000_000_000
HOUR = 3_600_000
WHERE = "stream 'orders' in region 'eu-west-1' at endpoint http://127.0.0.1:9"
BASE = {
    "streamName": "orders",
    "region": "eu-west-1",
    "endpointUrl": "http://127.0.0.1:9",
    "metadataPath": "/m",
}


def spec(retention_h: int | None = 48, **options: str):
    [one] = parse_options({**BASE, **options}, streaming="endingPosition" not in options).streams
    return replace(one, retention_ms=None if retention_h is None else retention_h * HOUR)


def sid(n: int) -> str:
    return f"shardId-{n:012d}"


def shard(n: int, parent: int | None = None, closed: bool = False, first: str = "100") -> ShardInfo:
    return ShardInfo(sid(n), None if parent is None else sid(parent), None, 0, 1, closed, first, None)


# -- a timestamp start against retention -------------------------------------------------------------


def test_a_start_within_retention_less_its_margin_passes_and_at_it_fails():
    limit = 48 * HOUR - RETENTION_MARGIN_MS
    check_start_in_retention(spec(), Position.at_timestamp(NOW - limit + 1), True, NOW)
    with pytest.raises(OptionError) as info:
        check_start_in_retention(spec(), Position.at_timestamp(NOW - limit), True, NOW)
    assert str(info.value) == (
        f"Kinesis option 'startingPosition': AT_TIMESTAMP {NOW - limit} ms is longer ago than the retention of "
        f"{WHERE} (48 h): the records from then up to the oldest one left may be gone. Start at TRIM_HORIZON "
        "(the oldest record left), or set failOnDataLoss=false to accept it"
    )


def test_without_a_known_retention_the_minimum_of_24_hours_applies():
    limit = MIN_RETENTION_MS - RETENTION_MARGIN_MS
    check_start_in_retention(spec(None), Position.at_timestamp(NOW - limit + 1), True, NOW)
    with pytest.raises(OptionError, match=r"\(24 h\)"):
        check_start_in_retention(spec(None), Position.at_timestamp(NOW - limit), True, NOW)


def test_retention_is_named_in_whole_hours():
    with pytest.raises(OptionError, match=r"\(36 h\):"):
        check_start_in_retention(
            replace(spec(), retention_ms=36 * HOUR + 1), Position.at_timestamp(0), True, NOW
        )


def test_with_fail_on_data_loss_off_an_old_start_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger=named_positions.__name__):
        check_start_in_retention(spec(), Position.at_timestamp(0), False, NOW)
    assert caplog.messages == [
        f"Kinesis option 'startingPosition': AT_TIMESTAMP 0 ms is longer ago than the retention of {WHERE} "
        "(48 h): the records from then up to the oldest one left may be gone; failOnDataLoss=false: reading "
        "from the oldest one left"
    ]


@pytest.mark.parametrize("start", [Position.trim_horizon(), Position.latest(), Position.after("5")])
def test_only_timestamp_starts_are_checked(start):
    check_start_in_retention(spec(), start, True, NOW)


# -- named starting shards ---------------------------------------------------------------------------


def starts(mapping: dict[str, str], **options: str):
    return spec(startingPosition=json.dumps(mapping), **options)


def test_one_unknown_named_shard_is_named_with_what_is_listed():
    with pytest.raises(OptionError) as info:
        named_starts(starts({sid(7): "AFTER_SEQUENCE_NUMBER:150"}), [shard(0), shard(1)], True, NOW)
    assert str(info.value) == (
        f"Kinesis option 'startingPosition.{sid(7)}': names a shard {sid(7)} that {WHERE} does not have (nor any "
        "child of it: a typo, or past retention with its children). Name shards it lists: "
        f"{sid(0)}, {sid(1)}."
    )


def test_several_unknown_named_shards_are_all_named():
    mapping = {sid(7): "AFTER_SEQUENCE_NUMBER:150", sid(8): "AFTER_SEQUENCE_NUMBER:150"}
    with pytest.raises(OptionError, match=rf"names shards {sid(7)}, {sid(8)} that "):
        named_starts(starts(mapping), [shard(0)], True, NOW)


def test_a_named_sequence_number_outside_its_shard_names_the_shards_option():
    with pytest.raises(
        OptionError, match=rf"^Kinesis option 'startingPosition.{sid(0)}': sequence number 50"
    ):
        named_starts(starts({sid(0): "AFTER_SEQUENCE_NUMBER:50"}), [shard(0, first="100")], True, NOW)


def test_named_shards_past_retention_are_a_loss_or_a_warning(caplog):
    listed = [shard(2, parent=0, first="300"), shard(3, parent=1, first="300")]
    mapping = {sid(0): "AFTER_SEQUENCE_NUMBER:150", sid(1): "AFTER_SEQUENCE_NUMBER:160"}
    text = (
        f"Kinesis stream {WHERE}: the named shards {sid(0)}, {sid(1)} are past retention (their children are "
        "listed, they are not): the records from their named positions on are gone"
    )
    with pytest.raises(DataLossError) as info:
        named_starts(starts(mapping), listed, True, NOW)
    assert str(info.value) == (
        f"{text}. Set failOnDataLoss=false to accept the loss and read their children from their oldest "
        "records, or name the children's positions instead."
    )
    with caplog.at_level(logging.WARNING, logger=named_positions.__name__):
        states = named_starts(starts(mapping), listed, False, NOW)
    assert caplog.messages == [
        f"{text}; failOnDataLoss=false: reading their children from their oldest records"
    ]
    assert {k: s.position for k, s in states.items()} == {
        sid(2): Position.trim_horizon(),
        sid(3): Position.trim_horizon(),
    }


def test_each_named_timestamp_and_the_default_are_checked_against_retention(caplog):
    old = "AT_TIMESTAMP:2020-01-01T00:00:00Z"
    with pytest.raises(
        OptionError, match=r"^Kinesis option 'startingPosition': AT_TIMESTAMP 1577836800000 ms"
    ):
        named_starts(starts({sid(0): old, "default": "TRIM_HORIZON"}), [shard(0)], True, NOW)
    with pytest.raises(
        OptionError, match=r"^Kinesis option 'startingPosition': AT_TIMESTAMP 1577836800000 ms"
    ):
        named_starts(
            starts({sid(0): "AFTER_SEQUENCE_NUMBER:150", "default": old}), [shard(0), shard(1)], True, NOW
        )
    with caplog.at_level(logging.WARNING, logger=named_positions.__name__):
        named_starts(starts({sid(0): old, "default": old}), [shard(0)], False, NOW)
    assert len(caplog.messages) == 2 and all("(48 h)" in m for m in caplog.messages)


# -- named ending shards -----------------------------------------------------------------------------


def test_an_unknown_named_end_is_named_with_what_is_listed():
    ends = spec(endingPosition=json.dumps({sid(9): "AFTER_SEQUENCE_NUMBER:150"}))
    with pytest.raises(OptionError) as info:
        named_ends(ends, [shard(0)])
    assert str(info.value) == (
        f"Kinesis option 'endingPosition.{sid(9)}': names a shard that {WHERE} does not list (a typo, or past "
        f"retention). Name shards it lists: {sid(0)}."
    )


def test_a_named_end_outside_its_shard_names_the_ending_option():
    ends = spec(endingPosition=json.dumps({sid(0): "AFTER_SEQUENCE_NUMBER:50"}))
    with pytest.raises(OptionError, match=rf"^Kinesis option 'endingPosition.{sid(0)}': sequence number 50 "):
        named_ends(ends, [shard(0, first="100")])


def test_a_listing_of_more_than_twenty_shards_is_cut_in_messages():
    ends = spec(endingPosition=json.dumps({sid(99): "AFTER_SEQUENCE_NUMBER:150"}))
    with pytest.raises(OptionError) as info:
        named_ends(ends, [shard(n) for n in range(21)])
    assert str(info.value).endswith(", ".join(sid(n) for n in range(20)) + " ....")
