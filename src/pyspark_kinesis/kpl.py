"""The KPL aggregated record format, both ways: many user records in one Kinesis record.

What the KPL writes and the KCL, aws-kinesis-agg and this project read: a 4-byte magic, a protobuf
`AggregatedRecord` (a table of partition keys, a table of explicit hash keys, and the records, each
pointing into the tables and carrying its payload), and the MD5 of the protobuf. Each user record keeps
the Kinesis record's sequence number and gets a sub-sequence number (its index), which is how a
source offset can end *inside* an aggregate.

The protobuf is three fields deep, so it is read and written here directly, with the written size
known exactly as records are added (a Kinesis record's limit counts the payload and the partition
key). aws-kinesis-agg's deaggregator rewrites sys.path on import and re-encodes every payload in base64
(it targets Lambda events), which costs more than the parse itself; the tests check both directions
against it. The source de-aggregates (`deaggregate`), the sink packs (`Aggregate`).

>>> agg = Aggregate(limit=1024)
>>> agg.add("k1", None, b"one") and agg.add("k2", "42", b"two")
True
>>> record = agg.encode()
>>> deaggregate(record)
[('k1', None, b'one'), ('k2', '42', b'two')]
>>> len(record) + len(agg.partition_key) == agg.size
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST = 16  # the MD5 of the protobuf, after it

# -- reading ---------------------------------------------------------------------------------------


class _Malformed(Exception):
    pass


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
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


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field number, wire type, value) of one protobuf message; value is int or bytes."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
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
    if len(data) <= len(MAGIC) + DIGEST or not data.startswith(MAGIC):
        return None
    body = data[len(MAGIC) : -DIGEST]
    if hashlib.md5(body).digest() != data[-DIGEST:]:
        return None
    try:
        keys: list[str] = []
        hash_keys: list[str] = []
        raw_records: list[bytes] = []
        for number, _wire, value in _fields(body):
            if not isinstance(value, bytes):
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
                if number == 1 and isinstance(value, int):
                    key_index = value
                elif number == 2 and isinstance(value, int):
                    hash_index = value
                elif number == 3 and isinstance(value, bytes):
                    payload = value
            out.append((keys[key_index], hash_keys[hash_index] if hash_index is not None else None, payload))
        return out
    except (_Malformed, IndexError, UnicodeDecodeError):
        return None


# -- writing ---------------------------------------------------------------------------------------


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# The sink's aggregated path writes four to six varints per user record, nearly all under 2**14 (tags,
# indexes, lengths); encoding each in a loop was a fifth of its CPU, so the one- and two-byte ones
# take a shortcut.
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def _write_varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    return _encode_varint(value)


_KEY_INDEX_TAG, _HASH_INDEX_TAG = _ONE_BYTE[1 << 3], _ONE_BYTE[2 << 3]  # (varint fields 1 and 2)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _ONE_BYTE[number << 3 | 2] + _write_varint(len(payload)) + payload


def _record(key_index: int, hash_index: int | None, data: bytes) -> bytes:
    body = _KEY_INDEX_TAG + _write_varint(key_index)
    if hash_index is not None:
        body += _HASH_INDEX_TAG + _write_varint(hash_index)
    return body + _field(3, data)


class Aggregate:
    """One aggregated record being filled. `add` refuses (returns False) a user record that would take
    the Kinesis record past `limit` bytes (payload plus partition key), unless the aggregate is empty:
    a single record too large for the limit is the caller's to refuse, as without aggregation."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._keys: dict[str, int] = {}
        self._hash_keys: dict[str, int] = {}
        self._parts: list[bytes] = []  # encoded fields of the protobuf, in order of addition
        self._body_size = 0
        self.count = 0

    @property
    def partition_key(self) -> str:
        """The Kinesis record's partition key: its first user record's (KPL's choice too)."""
        return next(iter(self._keys), "")

    @property
    def size(self) -> int:
        """Bytes the Kinesis record counts against its limit: encoded record plus partition key."""
        return len(MAGIC) + self._body_size + DIGEST + len(self.partition_key.encode())

    def _fields_for(self, key: str, hash_key: str | None, data: bytes) -> list[bytes]:
        fields = []
        key_index = self._keys.get(key, len(self._keys))
        if key not in self._keys:
            fields.append(_field(1, key.encode()))
        hash_index = None
        if hash_key is not None:
            hash_index = self._hash_keys.get(hash_key, len(self._hash_keys))
            if hash_key not in self._hash_keys:
                fields.append(_field(2, hash_key.encode()))
        fields.append(_field(3, _record(key_index, hash_index, data)))
        return fields

    def add(self, key: str, hash_key: str | None, data: bytes) -> bool:
        fields = self._fields_for(key, hash_key, data)
        grown = sum(len(f) for f in fields)
        first_key = len(key.encode()) if not self._keys else 0
        if self.count and self.size + grown + first_key > self.limit:
            return False
        self._parts.extend(fields)
        self._body_size += grown
        self._keys.setdefault(key, len(self._keys))
        if hash_key is not None:
            self._hash_keys.setdefault(hash_key, len(self._hash_keys))
        self.count += 1
        return True

    def encode(self) -> bytes:
        """The Kinesis record's data. The protobuf's fields may come in any order (a reader collects the
        tables before resolving indexes), so they are written in the order they were added."""
        body = b"".join(self._parts)
        return MAGIC + body + hashlib.md5(body).digest()
