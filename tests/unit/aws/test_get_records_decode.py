"""The direct GetRecords decoder against botocore's own parser on the same bodies, and its refusals;
the vectorised scan against msgspec on generated bodies."""

from __future__ import annotations

import base64
import json
import os
import random

import botocore.session
import orjson
import pytest
from botocore.parsers import JSONParser
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_kinesis.aws.get_records import decode, decode_msgspec
from pyspark_kinesis.aws.get_records_scan import scan

SHAPE = botocore.session.get_session().get_service_model("kinesis").operation_model("GetRecords").output_shape


def _record(i: int, payload: bytes) -> dict[str, object]:
    return {
        "SequenceNumber": str(49_000_000_000_000_000_000_000_000_000_000_000_000_000_000 + i),
        "ApproximateArrivalTimestamp": 1_700_000_000.123 + i,
        "Data": base64.b64encode(payload).decode(),
        "PartitionKey": f"key-é-{i}",
        "EncryptionType": "NONE",  # a field the decoder does not know is ignored
    }


def _body(**doc: object) -> bytes:
    return orjson.dumps(doc)


def test_same_records_as_botocore() -> None:
    payloads = [b"", b"\x00\xff", os.urandom(1), os.urandom(1000), "ünï".encode()]
    body = _body(
        Records=[_record(i, p) for i, p in enumerate(payloads)],
        NextShardIterator="AAAA/+==",
        MillisBehindLatest=1234,
    )
    expected = JSONParser().parse({"body": body, "headers": {}, "status_code": 200}, SHAPE)
    assert scan(body) is not None  # this body is one the vectorised scan reads
    got = decode(body)
    seqs, keys, data, arrivals = got["Records"].lists()
    assert data == [r["Data"] for r in expected["Records"]] == payloads
    assert seqs == [r["SequenceNumber"] for r in expected["Records"]]
    assert keys == [r["PartitionKey"] for r in expected["Records"]]
    assert arrivals == [r["ApproximateArrivalTimestamp"].timestamp() for r in expected["Records"]]
    assert got["NextShardIterator"] == expected["NextShardIterator"]
    assert got["MillisBehindLatest"] == expected["MillisBehindLatest"]
    assert "ChildShards" not in got


def test_closed_shard_response() -> None:
    children = [
        {
            "ShardId": "shardId-000000000002",
            "ParentShards": ["shardId-000000000000"],
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "99"},
        },
    ]
    got = decode(_body(Records=[], MillisBehindLatest=0, ChildShards=children))
    assert len(got["Records"]) == 0
    assert "NextShardIterator" not in got  # no iterator: the shard is closed
    assert got["ChildShards"] == children


@pytest.mark.parametrize(
    "body",
    [
        _body(Records=[_record(0, b"x")], NextShardIterator="A")[:-20],  # cut off mid-body
        b"",
        _body(NextShardIterator="A", MillisBehindLatest=0),  # no Records member
        _body(Records=[{**_record(0, b"x"), "Data": "not base64!"}], NextShardIterator="A"),
        _body(Records=[{**_record(0, b"x"), "SequenceNumber": None}], NextShardIterator="A"),
    ],
)
def test_unreadable_bodies_decode_to_nothing(body: bytes) -> None:
    """{} has no "Records": the proxy asks again rather than reading "shard closed" or bad payloads."""
    assert decode(body) == {}


def _same(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    if "Records" in got:
        assert got["Records"].lists() == expected["Records"].lists()
        assert got["Records"].payload_bytes == expected["Records"].payload_bytes
    for key in ("NextShardIterator", "MillisBehindLatest", "ChildShards"):
        assert got.get(key) == expected.get(key)


_KEYS = st.text(min_size=1, max_size=12)  # any Unicode: quotes and backslashes leave the body to msgspec


@st.composite
def _bodies(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A GetRecords body in the many shapes a server may send; and whether it is one the scan must read
    itself."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    count = draw(st.integers(0, 12))
    encryption = draw(st.booleans())
    one_order = draw(st.booleans())  # a server writes every record's members in one order
    order = ["SequenceNumber", "ApproximateArrivalTimestamp", "Data", "PartitionKey", "EncryptionType"]
    rng.shuffle(order)
    records = []
    for i in range(count):
        record = {
            "SequenceNumber": str(draw(st.integers(0, 10**56))),
            "ApproximateArrivalTimestamp": draw(
                st.sampled_from([1_700_000_000.123 + i, 1.7e9, 1_700_000_000, 1.441215410867e9])
            ),
            "Data": base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))).decode(),
            "PartitionKey": draw(_KEYS),
        }
        if encryption:
            record["EncryptionType"] = draw(st.sampled_from(["NONE", "KMS"]))
        items = list(record.items())
        if one_order:
            items.sort(key=lambda item: order.index(item[0]))
        else:
            rng.shuffle(items)
        records.append(dict(items))
    top = [("Records", records)]
    if draw(st.booleans()):
        top.append(("NextShardIterator", draw(st.sampled_from(["AAAA/+==", "x" * 60]))))
    if draw(st.booleans()):
        top.append(("MillisBehindLatest", draw(st.integers(0, 10**9))))
    if draw(st.booleans()):
        top.append(("ChildShards", None))  # kinesis-local sends it as null on open shards
    rng.shuffle(top)
    doc = dict(top)
    style = draw(st.sampled_from(["orjson", "spaced", "ascii"]))
    if style == "orjson":
        body = orjson.dumps(doc)
    elif style == "spaced":
        body = json.dumps(doc, ensure_ascii=False).encode()
    else:
        body = json.dumps(doc, separators=(",", ":")).encode()  # non-ASCII keys become \u escapes
    # The scan must read compact bodies without escapes whose records list their members in one order.
    return body, style != "spaced" and b"\\" not in body and (one_order or count <= 1)


def _same_as_botocore(got: dict, body: bytes) -> None:
    """`got` holds what botocore's own parser reads from `body` (the reference, not another of ours)."""
    expected = JSONParser().parse({"body": body, "headers": {}, "status_code": 200}, SHAPE)
    seqs, keys, data, arrivals = got["Records"].lists()
    assert seqs == [r["SequenceNumber"] for r in expected["Records"]]
    assert keys == [r["PartitionKey"] for r in expected["Records"]]
    assert data == [r["Data"] for r in expected["Records"]]
    reference = [r["ApproximateArrivalTimestamp"].timestamp() for r in expected["Records"]]
    assert all(abs(a - b) < 1e-5 for a, b in zip(arrivals, reference, strict=True))
    assert got.get("NextShardIterator") == expected.get("NextShardIterator")
    assert got.get("MillisBehindLatest") == expected.get("MillisBehindLatest")


@settings(max_examples=300, deadline=None)
@given(_bodies())
def test_scan_and_msgspec_read_what_botocore_reads(case: tuple[bytes, bool]) -> None:
    body, scannable = case
    if scannable:
        assert scan(body) is not None, body
    got = decode(body)
    _same_as_botocore(got, body)
    _same(got, decode_msgspec(body))


def test_every_prefix_of_a_body_is_refused() -> None:
    """A body cut anywhere (even right after a record's '}') decodes to {}, not to fewer records."""
    records = [_record(i, os.urandom(i * 3)) for i in range(3)]
    for body in (
        _body(Records=records, NextShardIterator="AAAA", MillisBehindLatest=5),
        _body(MillisBehindLatest=5, NextShardIterator="AAAA", Records=records),
        _body(Records=[], MillisBehindLatest=0),
    ):
        assert decode(body) != {}
        for cut in range(len(body)):
            assert decode(body[:cut]) == {}, body[:cut]


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.replace(b'"Data":"', b'"Data":"*', 1),  # not base64
        lambda b: b.replace(b'"Data":"', b'"Data":"=AAA', 1),  # padding inside a value
        lambda b: b.replace(b'"Data":"', b'"Data":"AA', 1),  # not whole 4-character groups
        lambda b: b.replace(b'"ApproximateArrivalTimestamp":', b'"ApproximateArrivalTimestamp":x', 1),
        lambda b: b.replace(b'"PartitionKey":"', b'"PartitionKey":"\xff', 1),  # not UTF-8
        lambda b: b.replace(b'"Records":[', b'"Records":[{"Data":"AAAA"},', 1),  # a record short of members
    ],
)
def test_damaged_bodies_are_refused(change) -> None:
    """Not read by the scan, and not read at all: {} makes the proxy ask again, where botocore's parser
    would hand over undecoded or partial records."""
    body = change(_body(Records=[_record(i, b"abc") for i in range(3)], NextShardIterator="A"))
    assert scan(body) is None
    assert decode(body) == {}


def test_a_member_moved_to_the_previous_record_is_not_read_as_aligned() -> None:
    """Record 1's SequenceNumber written into record 0 instead: the member names still form a grid,
    but a row no longer starts at a record's '{'. msgspec refuses the body (record 1 lacks a member)."""
    body = _body(Records=[_record(0, b"abc"), _record(1, b"abc")], NextShardIterator="A")
    seq1 = b'"SequenceNumber":"' + _record(1, b"")["SequenceNumber"].encode() + b'",'
    assert body.count(seq1) == 1
    body = body.replace(b"{" + seq1, b"{").replace(b'"NONE"},{', b'"NONE",' + seq1[:-1] + b"},{", 1)
    assert scan(body) is None
    assert decode(body) == decode_msgspec(body) == {}


def test_unknown_members_are_left_to_msgspec() -> None:
    body = _body(Records=[{**_record(0, b"x"), "NewField": "v"}], NextShardIterator="A", Later=1)
    assert scan(body) is None
    assert decode(body)["Records"].lists()[2] == [b"x"]


def test_a_record_without_a_partition_key_decodes_with_a_null_one():
    """Records put with the service's AUTO record distribution come back without PartitionKey."""
    body = (
        b'{"Records":[{"SequenceNumber":"1","ApproximateArrivalTimestamp":1.5,"Data":"YQ=="},'
        b'{"SequenceNumber":"2","ApproximateArrivalTimestamp":1.6,"Data":"Yg==","PartitionKey":"k"}],'
        b'"NextShardIterator":"it","MillisBehindLatest":0}'
    )
    records = decode(body)["Records"]
    assert records.keys.to_pylist() == [None, "k"]
    assert records.data.to_pylist() == [b"a", b"b"]


@pytest.mark.parametrize("behind", [999_999, 1_000_000, 86_400_000, 604_800_000])
def test_a_large_millis_behind_latest_comes_through_the_scan(behind: int) -> None:
    """A shard a day or a week behind (local servers never lag that far): the vectorised scan reads the
    figure whole, never as 0 (which would take a shard far behind for one at the tip)."""
    body = _body(Records=[_record(0, b"x")], NextShardIterator="AAAA", MillisBehindLatest=behind)
    assert scan(body) is not None
    assert decode(body)["MillisBehindLatest"] == behind


def test_the_clients_parser_decodes_getrecords_itself_and_leaves_other_calls_to_botocore() -> None:
    """The parser factory registered on the connector's clients (aws/client.py): the JSON protocol's
    parser hands GetRecords bodies to `decode` and every other output to botocore's parser."""
    from pyspark_kinesis.aws.get_records import Records
    from pyspark_kinesis.aws.response_parser import ParserFactory

    factory = ParserFactory()
    parser = factory.create_parser("json")
    body = _body(Records=[_record(0, b"abc")], NextShardIterator="it", MillisBehindLatest=0)
    response = {"body": body, "headers": {}, "status_code": 200}
    parsed = parser.parse(response, SHAPE)
    assert isinstance(parsed["Records"], Records) and parsed["NextShardIterator"] == "it"
    model = botocore.session.get_session().get_service_model("kinesis")
    summary_shape = model.operation_model("DescribeStreamSummary").output_shape
    summary = {"StreamDescriptionSummary": {"StreamName": "s", "OpenShardCount": 2}}
    other = parser.parse({"body": orjson.dumps(summary), "headers": {}, "status_code": 200}, summary_shape)
    assert other["StreamDescriptionSummary"]["OpenShardCount"] == 2
    assert not isinstance(factory.create_parser("query"), JSONParser)  # (other protocols: botocore's own)
