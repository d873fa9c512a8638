"""KPL aggregates at the edges of the protobuf wire format, where test_aggregation.py's round trips
(small payloads, only the fields the KPL writes) do not reach: multi-byte lengths, unknown fields of
every wire type, fields left out, over-long varints, a length past the end, the smallest framing.

Written against mutation testing (bash scripts/mutation.sh 'pyspark_kinesis.kpl.*'). The messages
are built here byte by byte from the protobuf encoding rules, or by aws-kinesis-agg's aggregator."""

from __future__ import annotations

import base64
import hashlib

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.kpl import MAGIC, Aggregate, deaggregate


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _frame(body: bytes) -> bytes:
    return MAGIC + body + hashlib.md5(body).digest()


def _reference(data: bytes) -> list[tuple[str, bytes]]:
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    record = {"SequenceNumber": "1", "PartitionKey": "p", "ApproximateArrivalTimestamp": 0, "Data": data}
    users = iter_deaggregate_records([record], data_format="Boto3")
    return [(u["kinesis"]["partitionKey"], base64.b64decode(u["kinesis"]["data"])) for u in users]


@pytest.mark.parametrize("size", [127, 128, 300, 16_383, 16_384, 20_000, 2_100_000])
def test_payloads_whose_lengths_take_several_varint_bytes(size):
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    agg = Aggregate(limit=10**8)
    assert agg.add("key", None, payload) and agg.add("other", "7", b"x")
    encoded = agg.encode()
    assert _reference(encoded) == [("key", payload), ("other", b"x")]
    assert deaggregate(encoded) == [("key", None, payload), ("other", "7", b"x")]


def test_what_aws_kinesis_agg_writes_with_long_payloads_reads_back():
    aggregator = RecordAggregator()
    rows = [("k1", b"a" * 200), ("k2", b"b" * 20_000), ("k1", b"c")]
    for key, data in rows:
        assert aggregator.add_user_record(key, data) is None  # none spilled into a finished record
    _key_of, _hash, data = aggregator.clear_and_get().get_contents()
    assert [(k, d) for k, _h, d in deaggregate(data)] == rows


def test_unknown_fields_of_every_wire_type_are_skipped():
    record = (
        _key(1, 0)
        + _varint(0)
        + _key(9, 1)  # fixed64
        + b"\x01" * 8
        + _key(10, 5)  # fixed32
        + b"\x02" * 4
        + _key(11, 0)  # a varint field no reader knows: not the explicit hash key
        + _varint(5)
        + _bytes_field(3, b"payload")
        + _bytes_field(4, b"a tag after the data")  # KPL's tags field
    )
    body = (
        _key(7, 0)  # a top-level varint before the tables: skipped, not the end
        + _varint(2**63)  # ten bytes, the longest valid varint
        + _key(8, 1)
        + b"\x03" * 8
        + _bytes_field(1, b"pk")
        + _key(9, 5)
        + b"\x04" * 4
        + _bytes_field(3, record)
    )
    assert deaggregate(_frame(body)) == [("pk", None, b"payload")]


def test_fields_left_out_take_their_protobuf_defaults():
    """A proto3-style writer leaves out a zero index and an empty payload."""
    body = _bytes_field(1, b"first") + _bytes_field(1, b"second") + _bytes_field(3, b"")
    assert deaggregate(_frame(body)) == [("first", None, b"")]


def test_an_over_long_varint_or_a_length_past_the_end_is_not_an_aggregate():
    eleven_bytes = b"\x80" * 10 + b"\x00"  # zero, padded past the ten bytes a varint may take
    record = _key(1, 0) + eleven_bytes + _bytes_field(3, b"x")
    assert deaggregate(_frame(_bytes_field(1, b"pk") + _bytes_field(3, record))) is None
    too_long = _bytes_field(1, b"pk") + _key(3, 2) + _varint(50) + b"only ten b"
    assert deaggregate(_frame(too_long)) is None


def test_the_smallest_framing_is_an_ordinary_record():
    """Magic and digest around an empty protobuf: 20 bytes a producer may well have written as data."""
    data = MAGIC + hashlib.md5(b"").digest()
    assert deaggregate(data) is None
    assert deaggregate(_frame(_bytes_field(1, b"k") + _bytes_field(3, _bytes_field(3, b"v")))) == [
        ("k", None, b"v")
    ]


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 65535, 2**21 + 5, 2**35 + 7, 2**63])
def test_a_varint_takes_its_shortcut_or_not_and_is_the_protobuf_encoding(value):
    """Varints under 2**14 take a shortcut (one- and two-byte forms); each edge is the rule's bytes."""
    from pyspark_kinesis.kpl import _write_varint

    assert _write_varint(value) == _varint(value)


def test_an_aggregate_with_multi_byte_indexes_and_lengths_is_what_the_kpl_library_reads():
    """200 keys (indexes past one byte) and a payload past 16 KiB (a three-byte length)."""
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    aggregate = Aggregate(1_000_000)
    records = [(f"k{i}", None, bytes([i % 256]) * (20_000 if i == 199 else 3)) for i in range(200)]
    for key, hash_key, data in records:
        assert aggregate.add(key, hash_key, data)
    encoded = aggregate.encode()
    record = {"SequenceNumber": "1", "PartitionKey": "k0", "ApproximateArrivalTimestamp": 0, "Data": encoded}
    read = iter_deaggregate_records([record], data_format="Boto3")
    got = [(r["kinesis"]["partitionKey"], base64.b64decode(r["kinesis"]["data"])) for r in read]
    assert got == [(key, data) for key, _h, data in records]
    assert deaggregate(encoded) == records
