"""Exact starting positions: `startingPosition` as a JSON map of stream -> shard -> position.

A pipeline restored from another system's checkpoint (a KCL lease table, a Flink savepoint, AWS's JVM
connector) knows, per shard, the last sequence number it processed; a single LATEST/TRIM_HORIZON/
timestamp for the whole stream would read records again or skip them. So `startingPosition` may also be
a JSON object:

    {"default": "LATEST",
     "orders": {"shardId-000000000001": "AFTER_SEQUENCE_NUMBER:4960...",
                "shardId-000000000002": "AT_SEQUENCE_NUMBER:4960...",
                "default": "TRIM_HORIZON"}}

Keys are "default" (the position of every stream and shard not named) and streams by the name or ARN
the source names them with; a stream's value is a position for all its shards or an object of shard ids
(and its own "default"). A source of one stream may name its shards at the top level. A `streams` entry
may carry the same per-shard object as its own startingPosition. Only here are sequence numbers
positions: AT_SEQUENCE_NUMBER:<n> and AFTER_SEQUENCE_NUMBER:<n>, for one named shard each.

A batch read's `endingPosition` takes the same map (`ENDING`): there AT_SEQUENCE_NUMBER:n stops
before n and AFTER_SEQUENCE_NUMBER:n after it, and TRIM_HORIZON is no end.

What the named positions mean for shards that are not named (a shard split or merged since the
checkpoint was taken) is the lineage rule's to decide at query start (`source.driver.lineage`).
This module only parses: no listing, no network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import OptionError
from ..model import Position
from .option_values import parse_position

DEFAULT_KEY = "default"
ENDING = "endingPosition"  # batch reads: the same map, read as where each shard's read stops
_SHARD_ID = re.compile(r"^shardId-\d{12}$")
_SEQUENCE = re.compile(r"^\d{1,128}$")
_SEQUENCE_KINDS = ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER")
_EXAMPLE = (
    '{"default": "LATEST", "orders": {"shardId-000000000001": "AFTER_SEQUENCE_NUMBER:4960...", '
    '"default": "TRIM_HORIZON"}}'
)

ShardStarts = tuple[tuple[str, Position], ...]  # (shard id, position), sorted: a frozen, hashable map


@dataclass(frozen=True)
class StreamStart:
    """One stream's starting positions as the options give them: a default (None: the source's) and
    the named shards."""

    default: Position | None = None
    shards: ShardStarts = ()


def is_json_map(text: str) -> bool:
    return text.strip().startswith("{")


def parse_shard_position(option: str, text: str, *, ending: bool = False) -> Position:
    """A named shard's position: the stream-wide forms, or AT_/AFTER_SEQUENCE_NUMBER:<sequence number>.
    As an end (`ending`), AT_SEQUENCE_NUMBER:n stops before n and AFTER_SEQUENCE_NUMBER:n after it: the
    same positions, read as "where the read is" when it stops."""
    value = text.strip()
    kind, _colon, seq = value.partition(":")
    if kind.strip().upper() in _SEQUENCE_KINDS:
        seq = seq.strip()
        if not _SEQUENCE.match(seq):
            raise OptionError(
                option,
                f"'{value}' has no sequence number after the colon",
                f"Write it like {kind.strip().upper()}:49654219758254213958104739577931476735848126163521945602.",
            )
        return (
            Position.at_sequence(seq) if kind.strip().upper() == _SEQUENCE_KINDS[0] else Position.after(seq)
        )
    return _stream_wide(option, value, ending=ending)


def _stream_wide(option: str, value: str, *, ending: bool = False) -> Position:
    kind = value.partition(":")[0].strip().upper()
    if kind in _SEQUENCE_KINDS:
        raise OptionError(
            option,
            f"'{value}': a sequence number belongs to one shard",
            'Name the shard it belongs to: {"shardId-000000000001": "' + kind + ':<sequence number>"}.',
        )
    return parse_position(option, value, allow_trim=not ending)


def _loads(option: str, text: str) -> dict[str, Any]:
    """A map option's JSON; callers pass only text that starts with '{' (`is_json_map`), so what
    parses is an object."""
    try:
        value: dict[str, Any] = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise OptionError(
            option, f"is not valid JSON ({exc})", f"Write a JSON object, e.g. {_EXAMPLE}."
        ) from None
    return value


def _text(option: str, value: Any) -> str:
    if not isinstance(value, str):
        raise OptionError(option, f"is {value!r}, not a string", 'Quote the position: "TRIM_HORIZON".')
    return value


def parse_stream_start(option: str, value: Any, *, ending: bool = False) -> StreamStart:
    """One stream's positions: a position string, a JSON object (as text or parsed) of shard ids and
    "default"."""
    if isinstance(value, str) and not is_json_map(value):
        return StreamStart(default=_stream_wide(option, value, ending=ending))
    shards_map = _loads(option, value) if isinstance(value, str) else value
    if not isinstance(shards_map, dict):
        raise OptionError(option, f"is {value!r}, not a position or an object", f"Write it like {_EXAMPLE}.")
    default: Position | None = None
    shards: dict[str, Position] = {}
    for key, item in shards_map.items():
        where = f"{option}.{key}"
        if key == DEFAULT_KEY:
            default = _stream_wide(where, _text(where, item), ending=ending)
        elif _SHARD_ID.match(str(key)):
            shards[key] = parse_shard_position(where, _text(where, item), ending=ending)
        else:
            raise OptionError(
                where,
                "is neither a shard id nor 'default'",
                "Name shards by their full id, like shardId-000000000001 (`pyspark-kinesis streams describe` "
                "lists them).",
            )
    return StreamStart(default=default, shards=tuple(sorted(shards.items())))


def parse_source_start(
    text: str, fallback: Position, option: str = "startingPosition"
) -> tuple[Position, dict[str, Any]]:
    """The top-level startingPosition (or endingPosition, same shape): (the default position, `fallback`
    when a map names none; the per-stream values by the key the user wrote, still unparsed: which
    stream a key names is known once the streams are)."""
    ending = option == ENDING
    if not is_json_map(text):
        return _stream_wide(option, text, ending=ending), {}
    value = _loads(option, text)
    default = fallback
    if DEFAULT_KEY in value:
        where = f"{option}.{DEFAULT_KEY}"
        default = _stream_wide(where, _text(where, value[DEFAULT_KEY]), ending=ending)
    return default, {k: v for k, v in value.items() if k != DEFAULT_KEY}


def match_streams(
    per_stream: Mapping[str, Any], names: list[tuple[str, str | None]], option: str = "startingPosition"
) -> tuple[dict[int, StreamStart], StreamStart | None]:
    """Which stream each key of the top-level map names: `names` holds each stream's (name, ARN as
    given or None), in the source's order. Returns the parsed positions by stream index, and those of
    shard ids written at the top level (allowed when the source reads one stream)."""
    by_index: dict[int, StreamStart] = {}
    top_shards: dict[str, Any] = {}
    for key, value in per_stream.items():
        hits = [i for i, (name, arn) in enumerate(names) if key in (name, arn)]
        where = f"{option}.{key}"
        if not hits and _SHARD_ID.match(key):
            top_shards[key] = value
            continue
        if not hits:
            known = ", ".join(arn or name for name, arn in names)
            raise OptionError(
                where, "names no stream this source reads", f"Use one of: {known} (or 'default')."
            )
        if len(hits) > 1:
            raise OptionError(
                where,
                "names several streams of this source (same name, other regions or accounts)",
                f"Name the streams by ARN{', or set startingPosition in each streams entry' if option != ENDING else ''}.",
            )
        if hits[0] in by_index:
            raise OptionError(where, "names a stream already named by another key", "Name each stream once.")
        by_index[hits[0]] = parse_stream_start(where, value, ending=option == ENDING)
    if not top_shards:
        return by_index, None
    if len(names) != 1 or by_index:
        raise OptionError(
            f"{option}.{next(iter(top_shards))}",
            "names a shard at the top level, where only a source of one stream, not named there, may",
            'Nest the shards under their stream: {"orders": {"shardId-000000000001": "..."}}.',
        )
    return by_index, parse_stream_start(option, top_shards, ending=option == ENDING)
