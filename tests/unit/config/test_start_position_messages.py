"""Every refusal of a startingPosition / endingPosition map, word for word (src/pyspark_kinesis/config/
start_positions.py): the option path it names, what is wrong and what to write instead. A user reads
these at query start; a changed word here is a changed message, reviewed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pyspark_kinesis.config import start_positions as sp
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.model import Position
from tests.unit.parser_words import orjson_words

TRUNCATED = '{"default": '  # (a stream's map cut short)
CLICKS = "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks"
EXAMPLE = (
    '{"default": "LATEST", "orders": {"shardId-000000000001": "AFTER_SEQUENCE_NUMBER:4960...", '
    '"default": "TRIM_HORIZON"}}'
)
SHARD = "shardId-000000000001"
SEQ_EXAMPLE = "49654219758254213958104739577931476735848126163521945602"
NESTED = 'Nest the shards under their stream: {"orders": {"shardId-000000000001": "..."}}.'
TOP_SHARD = "names a shard at the top level, where only a source of one stream, not named there, may"
NO_END_TRIM = "unknown position 'TRIM_HORIZON'. Use LATEST or AT_TIMESTAMP:<ISO-8601>."

CASES: list[tuple[str, Callable[[], Any], str, str]] = [
    (
        "a key naming no stream lists the streams",
        lambda: sp.match_streams({"views": "LATEST"}, [("orders", None), ("clicks", CLICKS)]),
        "startingPosition.views",
        f"names no stream this source reads. Use one of: orders, {CLICKS} (or 'default').",
    ),
    (
        "a name two streams share",
        lambda: sp.match_streams({"orders": "LATEST"}, [("orders", None), ("orders", None)]),
        "startingPosition.orders",
        "names several streams of this source (same name, other regions or accounts). "
        "Name the streams by ARN, or set startingPosition in each streams entry.",
    ),
    (
        "a name two streams share, as an end (entries have no endingPosition)",
        lambda: sp.match_streams({"orders": "LATEST"}, [("orders", None), ("orders", None)], sp.ENDING),
        "endingPosition.orders",
        "names several streams of this source (same name, other regions or accounts). Name the streams by ARN.",
    ),
    (
        "a stream named by its name and its ARN",
        lambda: sp.match_streams({"orders": "LATEST", CLICKS: "LATEST"}, [("orders", CLICKS)]),
        f"startingPosition.{CLICKS}",
        "names a stream already named by another key. Name each stream once.",
    ),
    (
        "shards at the top level of two streams",
        lambda: sp.match_streams({SHARD: "LATEST"}, [("orders", None), ("clicks", None)]),
        f"startingPosition.{SHARD}",
        f"{TOP_SHARD}. {NESTED}",
    ),
    (
        "shards at the top level beside their stream's key",
        lambda: sp.match_streams({SHARD: "LATEST", "orders": "LATEST"}, [("orders", None)]),
        f"startingPosition.{SHARD}",
        f"{TOP_SHARD}. {NESTED}",
    ),
    (
        "a stream's value neither a position nor an object",
        lambda: sp.match_streams({"orders": 5}, [("orders", None)]),
        "startingPosition.orders",
        f"is 5, not a position or an object. Write it like {EXAMPLE}.",
    ),
    (
        "a key in a stream's map neither a shard nor default",
        lambda: sp.parse_stream_start("startingPosition.orders", {"shard-1": "LATEST"}),
        "startingPosition.orders.shard-1",
        "is neither a shard id nor 'default'. Name shards by their full id, like shardId-000000000001 "
        "(`pyspark-kinesis streams describe` lists them).",
    ),
    (
        "a position that is not a string",
        lambda: sp.parse_stream_start("startingPosition.orders", {"default": 5}),
        "startingPosition.orders.default",
        'is 5, not a string. Quote the position: "TRIM_HORIZON".',
    ),
    (
        "a shard's position that is not a string",
        lambda: sp.parse_stream_start("startingPosition.orders", {SHARD: None}),
        f"startingPosition.orders.{SHARD}",
        'is None, not a string. Quote the position: "TRIM_HORIZON".',
    ),
    (
        "a map that is not JSON",
        lambda: sp.parse_source_start("{nope", Position.latest()),
        "startingPosition",
        f"is not valid JSON ({orjson_words('{nope')}). Write a JSON object, e.g. {EXAMPLE}.",
    ),
    (
        "a stream's map that is not JSON",
        lambda: sp.parse_stream_start("startingPosition.orders", TRUNCATED),
        "startingPosition.orders",
        f"is not valid JSON ({orjson_words(TRUNCATED)}). Write a JSON object, e.g. {EXAMPLE}.",
    ),
    (
        "a sequence kind without a number (any case, spaces)",
        lambda: sp.parse_shard_position("p", " after_sequence_number : abc"),
        "p",
        "'after_sequence_number : abc' has no sequence number after the colon. "
        f"Write it like AFTER_SEQUENCE_NUMBER:{SEQ_EXAMPLE}.",
    ),
    (
        "a sequence number followed by more",
        lambda: sp.parse_shard_position("p", "AT_SEQUENCE_NUMBER:5:6"),
        "p",
        f"'AT_SEQUENCE_NUMBER:5:6' has no sequence number after the colon. Write it like AT_SEQUENCE_NUMBER:{SEQ_EXAMPLE}.",
    ),
    (
        "a sequence number for every shard",
        lambda: sp.parse_source_start("AT_SEQUENCE_NUMBER:5", Position.latest()),
        "startingPosition",
        "'AT_SEQUENCE_NUMBER:5': a sequence number belongs to one shard. "
        'Name the shard it belongs to: {"shardId-000000000001": "AT_SEQUENCE_NUMBER:<sequence number>"}.',
    ),
    (
        "TRIM_HORIZON as a stream's end",
        lambda: sp.match_streams({"orders": {"default": "TRIM_HORIZON"}}, [("orders", None)], sp.ENDING),
        "endingPosition.orders.default",
        NO_END_TRIM,
    ),
    (
        "TRIM_HORIZON as a stream's end, written as text",
        lambda: sp.match_streams({"orders": "TRIM_HORIZON"}, [("orders", None)], sp.ENDING),
        "endingPosition.orders",
        NO_END_TRIM,
    ),
    (
        "TRIM_HORIZON as a top-level shard's end",
        lambda: sp.match_streams({SHARD: "TRIM_HORIZON"}, [("orders", None)], sp.ENDING),
        f"endingPosition.{SHARD}",
        NO_END_TRIM,
    ),
    (
        "TRIM_HORIZON as the default end",
        lambda: sp.parse_source_start('{"default": "TRIM_HORIZON"}', Position.latest(), sp.ENDING),
        "endingPosition.default",
        NO_END_TRIM,
    ),
]


@pytest.mark.parametrize(("call", "option", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_refused_position_names_its_option_the_problem_and_the_fix(call, option, message):
    with pytest.raises(OptionError) as refused:
        call()
    assert refused.value.option == option
    assert str(refused.value) == f"Kinesis option '{option}': {message}"


def test_the_same_maps_as_starts_are_taken():
    """TRIM_HORIZON is refused above only as an end: as a start, each of those maps reads."""
    one = [("orders", None)]
    assert sp.match_streams({"orders": {"default": "TRIM_HORIZON"}}, one) == (
        {0: sp.StreamStart(default=Position.trim_horizon())},
        None,
    )
    assert sp.match_streams({"orders": "TRIM_HORIZON"}, one)[0] == {
        0: sp.StreamStart(Position.trim_horizon())
    }
    assert sp.match_streams({SHARD: "AT_SEQUENCE_NUMBER:5"}, one) == (
        {},
        sp.StreamStart(shards=((SHARD, Position.at_sequence("5")),)),
    )
    assert sp.parse_source_start('{"default": "TRIM_HORIZON", "orders": "LATEST"}', Position.latest()) == (
        Position.trim_horizon(),
        {"orders": "LATEST"},
    )
