"""The direct GetRecords decoder against botocore's own parser on the same bodies, and its refusals."""

from __future__ import annotations

import base64
import os

import botocore.session
import orjson
import pytest
from botocore.parsers import JSONParser

from pyspark_kinesis.aws.get_records import decode

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
    got = decode(body)
    records = got["Records"]
    assert records.data == [r["Data"] for r in expected["Records"]] == payloads
    assert records.seqs == [r["SequenceNumber"] for r in expected["Records"]]
    assert records.keys == [r["PartitionKey"] for r in expected["Records"]]
    assert records.arrivals == [r["ApproximateArrivalTimestamp"].timestamp() for r in expected["Records"]]
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
