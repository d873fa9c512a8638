"""KPL aggregated records, written: many user records in one Kinesis record.

The format (what the KPL writes and the KCL, aws-kinesis-agg and this project's source read): a 4-byte
magic, a protobuf `AggregatedRecord` (a table of partition keys, a table of explicit hash keys, and the
records, each pointing into the tables and carrying its payload), and the MD5 of the protobuf. The
protobuf is three fields deep, so it is written here directly, with its size known exactly as records
are added (a Kinesis record's limit counts the payload and the partition key). The source's
`deaggregation` reads it back, and the tests check both against aws-kinesis-agg.

>>> agg = Aggregate(limit=1024)
>>> agg.add("k1", None, b"one") and agg.add("k2", "42", b"two")
True
>>> record = agg.encode()
>>> from pyspark_kinesis.source.deaggregation import deaggregate
>>> deaggregate(record)
[('k1', None, b'one'), ('k2', '42', b'two')]
>>> len(record) + len(agg.partition_key) == agg.size
True
"""

from __future__ import annotations

import hashlib

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST = 16


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _record(key_index: int, hash_index: int | None, data: bytes) -> bytes:
    body = _varint(1 << 3) + _varint(key_index)
    if hash_index is not None:
        body += _varint(2 << 3) + _varint(hash_index)
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
