"""The connector's response parser takes Kinesis's GetRecords bodies only: DynamoDB Streams' GetRecords
answer has an output shape of the same name, and the Kinesis decoder made it an empty result."""

from __future__ import annotations

import botocore.session
import orjson

from pyspark_kinesis.aws.response_parser import ParserFactory


def parse(service: str, body: dict) -> dict:
    model = botocore.session.get_session().get_service_model(service)
    shape = model.operation_model("GetRecords").output_shape
    parser = ParserFactory().create_parser("json")
    return parser.parse({"body": orjson.dumps(body), "headers": {}, "status_code": 200}, shape)


def test_a_dynamodb_streams_answer_is_parsed_by_botocore():
    record = {"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {"id": {"S": "a"}}}}
    parsed = parse("dynamodbstreams", {"Records": [record], "NextShardIterator": "it"})
    assert parsed["Records"] == [record] and parsed["NextShardIterator"] == "it"


def test_a_kinesis_answer_is_the_connectors_decoder():
    parsed = parse("kinesis", {"Records": [], "NextShardIterator": "it", "MillisBehindLatest": 0})
    assert len(parsed["Records"]) == 0 and not isinstance(parsed["Records"], list)  # Arrow columns
    assert parsed["NextShardIterator"] == "it"
