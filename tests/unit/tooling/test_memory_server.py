"""The benchmark server's answers are real GetRecords bodies: botocore's own parser and the connector's
decoder read them alike, positions and limits behave as Kinesis', and the shard's end says caught up.
(Its figures mean something only if the connector does the same work on them as on Kinesis' answers.)"""

import base64
import json

import botocore.session
from benchmarks.memory_server import MAX_BYTES, Stream, sequence_number
from botocore.parsers import create_parser

from pyspark_kinesis.aws.get_records import decode


def _body(stream: Stream, iterator: str, limit: int) -> bytes:
    return b"".join(bytes(p) for p in stream.records({"ShardIterator": iterator, "Limit": limit}))


def _botocore(body: bytes) -> dict:
    model = botocore.session.get_session().get_service_model("kinesis").operation_model("GetRecords")
    response = {"status_code": 200, "headers": {}, "body": body}
    return create_parser("json").parse(response, model.output_shape)


def test_an_answer_is_a_getrecords_body_both_parsers_read_alike():
    stream = Stream(shards=2, records=50, size=100)
    body = _body(stream, "1:10", 20)
    parsed = _botocore(body)
    assert [r["SequenceNumber"] for r in parsed["Records"]] == [sequence_number(1, p) for p in range(10, 30)]
    assert all(len(r["Data"]) == 100 for r in parsed["Records"])
    assert parsed["NextShardIterator"] == "1:30" and parsed["MillisBehindLatest"] > 0
    ours = decode(body)
    assert ours["Records"].seqs.to_pylist() == [r["SequenceNumber"] for r in parsed["Records"]]
    assert ours["Records"].data.to_pylist() == [r["Data"] for r in parsed["Records"]]
    assert ours["Records"].keys.to_pylist() == [r["PartitionKey"] for r in parsed["Records"]]


def test_the_end_of_a_shard_is_caught_up_and_iterators_follow_kinesis_positions():
    stream = Stream(shards=1, records=5, size=10)
    last = json.loads(_body(stream, "0:3", 100))
    assert len(last["Records"]) == 2 and last["MillisBehindLatest"] == 0
    assert json.loads(_body(stream, "0:5", 100)) == {
        "Records": [],
        "NextShardIterator": "0:5",
        "MillisBehindLatest": 0,
    }
    after = {"ShardId": "shardId-000000000000", "StartingSequenceNumber": sequence_number(0, 2)}
    assert stream.iterator({**after, "ShardIteratorType": "AFTER_SEQUENCE_NUMBER"})["ShardIterator"] == "0:3"
    assert stream.iterator({**after, "ShardIteratorType": "AT_SEQUENCE_NUMBER"})["ShardIterator"] == "0:2"
    assert stream.iterator({"ShardId": "shardId-000000000000", "ShardIteratorType": "LATEST"}) == {
        "ShardIterator": "0:5"
    }


def test_an_answer_keeps_kinesis_size_limit():
    size = 1_000_000
    stream = Stream(shards=1, records=15, size=size)
    records = json.loads(_body(stream, "0:0", 10_000))["Records"]
    assert len(records) == MAX_BYTES // size
    assert sum(len(base64.b64decode(r["Data"])) for r in records) <= MAX_BYTES
