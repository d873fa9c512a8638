"""The compact form of a shard's entry in the offset (offset format 3).

Spark writes the whole offset to the checkpoint's offset log every batch and keeps the last 100, so its
size grows with shards x batches: format 2 spent well over a hundred bytes per shard on repeated keys and
flags at their defaults (`pyspark-kinesis bench-offsets` measures both). Format 3 writes each shard as one short
string: its position first, then only the fields that differ from their defaults, each a one-letter
tag and its value; sequence numbers (up to 56 decimal digits) as base64url of their integer value; shard
ids `shardId-000000000123` as `123`. Format 2 still loads, so checkpoints written before keep working.

>>> from pyspark_kinesis.model import Position
>>> text = encode_state(Position.after("49654321098765432109876543210987654321098765432109876543"), (), 3, -1, -1, False, 0, False)
>>> text
'AAgZqUS_ZUtlxDp7x-9hL0IVko26NI0U_;t3'
>>> decode_state(text)[0].seq
'49654321098765432109876543210987654321098765432109876543'
"""

from __future__ import annotations

import base64
import re
from typing import Any

from ...errors import CheckpointFormatError
from ...model import AFTER, END, INSIDE, LATEST, TIMESTAMP, TRIM, Position

_SHARD_ID = re.compile(r"^shardId-(\d{12})$")
_PLAIN_NUMBER = re.compile(r"^(0|[1-9]\d*)$")
NO_TASK = -1


def pack_shard_id(shard_id: str) -> str:
    """`shardId-000000000123` -> `123`; any other id keeps its text behind a `~`."""
    match = _SHARD_ID.match(shard_id)
    return str(int(match.group(1))) if match else "~" + shard_id


def unpack_shard_id(text: str) -> str:
    if text.startswith("~"):
        return text[1:]
    if text.isdigit():
        return f"shardId-{int(text):012d}"
    return text


def _pack_seq(seq: str) -> str:
    """A sequence number as base64url of its integer ("=" prefix: kept as text, if it is not a plain
    number, so that it still comes back exactly)."""
    if not _PLAIN_NUMBER.match(seq):
        if any(c in seq for c in ";.+"):
            raise ValueError(f"sequence number {seq!r} cannot be written into an offset")
        return "=" + seq
    value = int(seq)
    raw = value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unpack_seq(text: str) -> str:
    if text.startswith("="):
        return text[1:]
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return str(int.from_bytes(raw, "big"))


def encode_position(position: Position) -> str:
    kind = position.kind
    if kind == TRIM:
        return "T"
    if kind == LATEST:
        return "L"
    if kind == END:
        return "E"
    if kind == TIMESTAMP:
        return f"S{position.ts_ms}"
    if kind == AFTER:
        return "A" + _pack_seq(position.seq or "")
    if kind == INSIDE:
        return f"I{position.sub}.{_pack_seq(position.seq or '')}"
    raise ValueError(f"unknown position kind {kind!r}")


def decode_position(text: str) -> Position:
    code, rest = text[:1], text[1:]
    if code == "T":
        return Position.trim_horizon()
    if code == "L":
        return Position.latest()
    if code == "E":
        return Position.shard_end()
    if code == "S":
        return Position.at_timestamp(int(rest))
    if code == "A":
        return Position.after(_unpack_seq(rest))
    if code == "I":
        sub, _, seq = rest.partition(".")
        return Position.inside(_unpack_seq(seq), int(sub))
    raise CheckpointFormatError(
        f"unknown position code in offset: {text!r}: the checkpoint was written by a newer version of "
        "pyspark-kinesis. Run that version, or start over with a new checkpointLocation."
    )


def encode_state(
    position: Position,
    parents: tuple[str, ...],
    task: int,
    max_records: int,
    max_bytes: int,
    idle: bool,
    polled_ms: int,
    closed: bool,
    tip_ms: int = 0,
) -> str:
    """One shard's offset entry: the position, then `;`-separated tagged fields that differ from their
    defaults (p parents, t task, r/b record/byte budgets, i idle, o last poll, c closed, k when a read
    found the shard at the tip at this position)."""
    parts = [encode_position(position)]
    if parents:
        parts.append("p" + "+".join(pack_shard_id(p) for p in parents))
    if task != NO_TASK:
        parts.append(f"t{task}")
    if max_records != -1:
        parts.append(f"r{max_records}")
    if max_bytes != -1:
        parts.append(f"b{max_bytes}")
    if idle:
        parts.append("i")
    if polled_ms:
        parts.append(f"o{polled_ms}")
    if closed:
        parts.append("c")
    if tip_ms:
        parts.append(f"k{tip_ms}")
    return ";".join(parts)


def decode_state(text: str) -> tuple[Position, tuple[str, ...], int, int, int, bool, int, bool, int]:
    """The inverse of `encode_state`, in its argument order."""
    head, *fields = text.split(";")
    values: dict[str, Any] = {
        "p": (),
        "t": NO_TASK,
        "r": -1,
        "b": -1,
        "i": False,
        "o": 0,
        "c": False,
        "k": 0,
    }
    for field in fields:
        tag, value = field[:1], field[1:]
        if tag == "p":
            values["p"] = tuple(unpack_shard_id(p) for p in value.split("+") if p)
        elif tag in ("t", "r", "b", "o", "k"):
            values[tag] = int(value)
        elif tag in ("i", "c"):
            values[tag] = True
        else:
            raise CheckpointFormatError(
                f"unknown field {field!r} in offset entry {text!r}: the checkpoint was written by a newer "
                "version of pyspark-kinesis. Run that version, or start over with a new checkpointLocation."
            )
    return (
        decode_position(head),
        values["p"],
        values["t"],
        values["r"],
        values["b"],
        values["i"],
        values["o"],
        values["c"],
        values["k"],
    )
