"""The sink's PutRecords calls encoded and their answers decoded by the connector (aws/put_body.py):
the request is byte for byte what botocore's serializer would send but for the JSON's spelling (same
headers, same parsed body), the answer the same dict botocore's parser makes, and a botocore that does
not fit, or PYSPARK_KINESIS_STOCK_BOTOCORE=1, keeps botocore's own."""

from __future__ import annotations

import json
from typing import Any

import botocore.session
import pytest

from pyspark_kinesis.aws import client as clients
from pyspark_kinesis.aws import put_body
from pyspark_kinesis.aws.response_parser import ParserFactory
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.switches import STOCK_BOTOCORE

RECORDS: list[dict[str, Any]] = [
    {"Data": b"\x00\xffbytes", "PartitionKey": "k1"},
    {"Data": "t\u00e9xt", "PartitionKey": "k2", "ExplicitHashKey": "340282366920938463463374607431768211455"},
    {"Data": b""},  # (no key: a stream with AUTO record distribution)
]


def stock_client() -> Any:
    return botocore.session.get_session().create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=botocore.config.Config(parameter_validation=False),
    )


@pytest.mark.parametrize(
    "target", [{"StreamName": "s"}, {"StreamARN": "arn:aws:kinesis:us-east-1:1:stream/s"}]
)
def test_a_put_records_request_is_botocores_own(target):
    stock = stock_client()
    operation = stock.meta.service_model.operation_model("PutRecords")
    parameters = {**target, "Records": RECORDS}
    expected = stock._serializer.serialize_to_request(parameters, operation)
    fast = stock_client()
    assert put_body.encode_put_records(fast)
    got = fast._serializer.serialize_to_request(parameters, operation)
    assert json.loads(got["body"]) == json.loads(expected["body"])
    assert {k: v for k, v in got.items() if k != "body"} == {k: v for k, v in expected.items() if k != "body"}
    other = stock.meta.service_model.operation_model("ListShards")
    assert fast._serializer.serialize_to_request({"StreamName": "s"}, other) == (
        stock._serializer.serialize_to_request({"StreamName": "s"}, other)
    )


def test_a_put_records_answer_is_what_botocore_parses(monkeypatch):
    body = json.dumps(
        {
            "FailedRecordCount": 1,
            "Records": [
                {"SequenceNumber": "4" * 56, "ShardId": "shardId-000000000001"},
                {"SequenceNumber": "5" * 56, "ShardId": "shardId-000000000002", "ErrorCode": None},
                {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded"},
            ],
            "EncryptionType": "KMS",
            "ExtraNull": None,
        }
    ).encode()
    response = {"status_code": 200, "headers": {"x-amzn-requestid": "r-1"}, "body": body}
    shape = stock_client().meta.service_model.operation_model("PutRecords").output_shape
    expected = botocore.parsers.JSONParser().parse(dict(response), shape)
    parser = ParserFactory().create_parser("json")
    assert parser.parse(dict(response), shape) == expected
    monkeypatch.setenv(STOCK_BOTOCORE.key, "1")
    assert parser.parse(dict(response), shape) == expected


def test_the_sink_client_encodes_its_calls_unless_stock_botocore_is_asked_for(monkeypatch):
    settings = AwsSettings(
        region="us-east-1", endpoint_url="http://127.0.0.1:9", access_key_id="a", secret_key="b"
    )
    monkeypatch.setattr(clients, "_clients", {})
    sink = clients.kinesis_client(settings, agent="sink")
    assert isinstance(sink._serializer, put_body.PutRecordsSerializer)
    reader = clients.kinesis_client(settings, agent="reader")
    assert not isinstance(reader._serializer, put_body.PutRecordsSerializer)  # (validated as botocore does)
    monkeypatch.setattr(clients, "_clients", {})
    monkeypatch.setenv(STOCK_BOTOCORE.key, "1")
    stock = clients.kinesis_client(settings, agent="sink")
    assert type(stock._serializer).__name__ == "ParamValidationDecorator"


def test_a_client_whose_serializer_is_not_as_expected_is_left_alone():
    class Odd:
        pass

    odd = Odd()
    assert not put_body.encode_put_records(odd)
    validating = botocore.session.get_session().create_client(
        "kinesis", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    assert not put_body.encode_put_records(validating)  # (its records must reach the validator)
