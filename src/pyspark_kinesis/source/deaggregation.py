"""Unpacking KPL aggregated records into their user records.

The KPL packs many user records into one Kinesis record: a 4-byte magic, a protobuf
`AggregatedRecord`, and an MD5 of the protobuf. Each user record keeps the Kinesis record's sequence
number and gets a sub-sequence number (its index), which is how offsets can end *inside* an
aggregate. The protobuf is three fields deep, so it is read here directly: aws-kinesis-agg's
deaggregator rewrites sys.path on import and re-encodes every payload in base64 (it targets Lambda
events), which costs more than the parse itself. That library is used by the tests to build
aggregates, so this reader is checked against the reference writer.
"""

from __future__ import annotations

import hashlib

MAGIC = b"\xf3\x89\x9a\xc2"
_DIGEST = 16


class _Malformed(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Malformed
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """Yield (field number, wire type, value) of one protobuf message; value is int or bytes."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise _Malformed
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise _Malformed


def deaggregate(data: bytes) -> list[tuple[str, str | None, bytes]] | None:
    """(partition key, explicit hash key, payload) of each user record, or None when `data` is not a
    well-formed KPL aggregate (then it is an ordinary record and is passed through unchanged)."""
    if len(data) <= len(MAGIC) + _DIGEST or not data.startswith(MAGIC):
        return None
    body = data[len(MAGIC) : -_DIGEST]
    if hashlib.md5(body).digest() != data[-_DIGEST:]:
        return None
    try:
        keys: list[str] = []
        hash_keys: list[str] = []
        raw_records: list[bytes] = []
        for number, wire, value in _fields(body):
            if wire != 2:
                continue
            if number == 1:
                keys.append(value.decode("utf-8"))
            elif number == 2:
                hash_keys.append(value.decode("utf-8"))
            elif number == 3:
                raw_records.append(value)
        out: list[tuple[str, str | None, bytes]] = []
        for raw in raw_records:
            key_index, hash_index, payload = 0, None, b""
            for number, _wire, value in _fields(raw):
                if number == 1:
                    key_index = value
                elif number == 2:
                    hash_index = value
                elif number == 3:
                    payload = value
            out.append((keys[key_index], hash_keys[hash_index] if hash_index is not None else None, payload))
        return out
    except (_Malformed, IndexError, UnicodeDecodeError):
        return None
