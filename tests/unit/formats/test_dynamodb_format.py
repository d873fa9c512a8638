"""`valueFormat=dynamodb`: a table's changes from DynamoDB Streams (the connector's payload) and from
Kinesis Data Streams for DynamoDB (the table's JSON records) read into the same columns; anything else
is a valueError, never a failed task."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pyspark_kinesis.aws.dynamodb_streams import change
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.formats import codec_of, parse_value_format
from pyspark_kinesis.formats.dynamodb import FIELDS, table_of

ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-29T00:00:00.000"
AWS = AwsSettings(region="eu-west-1")

STREAMS_RECORD = {
    "eventID": "e1",
    "eventName": "MODIFY",
    "dynamodb": {
        "SequenceNumber": "100",
        "ApproximateCreationDateTime": 1.7e9,
        "Keys": {"id": {"S": "o-1"}},
        "NewImage": {"id": {"S": "o-1"}, "total": {"N": "19.990"}, "tags": {"SS": ["a"]}},
        "OldImage": {"id": {"S": "o-1"}, "total": {"N": "9.5"}},
        "SizeBytes": 41,
    },
}
# As Kinesis Data Streams for DynamoDB writes the same change (binary would be base64 text there).
KINESIS_RECORD = {
    "awsRegion": "eu-west-1",
    "eventID": "e2",
    "eventName": "REMOVE",
    "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
    "recordFormat": "application/json",
    "tableName": "orders",
    "dynamodb": {
        "ApproximateCreationDateTime": 1700000000000,
        "Keys": {"id": {"S": "o-2"}},
        "OldImage": {"id": {"S": "o-2"}, "blob": {"B": "AQI="}},
        "SizeBytes": 12,
    },
    "eventSource": "aws:dynamodb",
}


def decoded(payloads: list[bytes | None], arn: str | None = ARN) -> list[dict]:
    value = parse_value_format({"valueFormat": "dynamodb"}, writing=False)
    batch = pa.RecordBatch.from_pydict(
        {"data": pa.array(payloads, pa.binary()), "streamArn": pa.array([arn] * len(payloads), pa.string())}
    )
    arrays = codec_of(value).decode(value, AWS, batch)
    assert [f.name for f in codec_of(value).added_fields(value, frozenset())] == [f.name for f in FIELDS]
    return pa.RecordBatch.from_arrays(arrays, names=[f.name for f in FIELDS]).to_pylist()


def test_a_dynamodb_streams_change_and_a_kinesis_one_read_into_the_same_columns():
    streams_row, kinesis_row = decoded([change(STREAMS_RECORD)[1], orjson.dumps(KINESIS_RECORD)])
    assert streams_row == {
        "tableName": "orders",  # from the stream's ARN
        "eventName": "MODIFY",
        "keys": '{"id":"o-1"}',
        "newImage": '{"id":"o-1","total":19.990,"tags":["a"]}',
        "oldImage": '{"id":"o-1","total":9.5}',
        "timeToLive": False,
        "sizeBytes": 41,
        "eventId": "e1",
        "valueError": None,
    }
    assert kinesis_row == {
        "tableName": "orders",  # from the record
        "eventName": "REMOVE",
        "keys": '{"id":"o-2"}',
        "newImage": None,
        "oldImage": '{"id":"o-2","blob":"AQI="}',
        "timeToLive": True,
        "sizeBytes": 12,
        "eventId": "e2",
        "valueError": None,
    }


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b'{"eventName": "INSERT"}',
        b"[1, 2]",
        b'["INSERT", {"id": {"X": "1"}}, null, null, false, 1, "e"]',
        b'{"eventName": "INSERT", "dynamodb": {"Keys": {"id": {"N": "one"}}}}',
        b'{"eventName": "INSERT", "dynamodb": {"Keys": {"id": {"B": "%%%"}}}}',
        b"42",
        None,
    ],
)
def test_a_payload_that_is_no_change_gives_nulls_and_the_reason_not_a_failure(payload):
    (row,) = decoded([payload])
    assert row["valueError"] and row["eventName"] is None and row["newImage"] is None
    assert row["tableName"] is None


def test_the_table_comes_from_a_stream_arn_only():
    assert table_of(ARN) == "orders"
    assert table_of("arn:aws:kinesis:eu-west-1:1:stream/orders") is None
    assert table_of(None) is None


def test_the_sink_refuses_it_by_name():
    value = parse_value_format({"valueFormat": "dynamodb"}, writing=True)
    with pytest.raises(OptionError, match="dynamodb is read only"):
        codec_of(value).check_columns({})


IMAGE = StructType(
    [
        StructField("id", StringType()),
        StructField("total", DecimalType(38, 3)),
        StructField("tags", ArrayType(StringType())),
        StructField("count", LongType()),
    ]
)


def typed_rows(payloads: list[bytes], schema: StructType = IMAGE) -> list[dict]:
    value = parse_value_format({"valueFormat": "dynamodb", "imageSchema": schema.json()}, writing=False)
    codec = codec_of(value)
    fields = codec.added_fields(value, frozenset())
    assert [f.dataType for f in fields if f.name in ("newImage", "oldImage")] == [schema, schema]
    batch = pa.RecordBatch.from_pydict(
        {"data": pa.array(payloads, pa.binary()), "streamArn": pa.array([ARN] * len(payloads), pa.string())}
    )
    return pa.RecordBatch.from_arrays(
        codec.decode(value, AWS, batch), names=[f.name for f in fields]
    ).to_pylist()


def test_an_image_schema_gives_typed_images_with_exact_numbers():
    from decimal import Decimal

    (row,) = typed_rows([change(STREAMS_RECORD)[1]])
    assert row["newImage"] == {"id": "o-1", "total": Decimal("19.990"), "tags": ["a"], "count": None}
    assert row["oldImage"] == {"id": "o-1", "total": Decimal("9.500"), "tags": None, "count": None}
    assert row["valueError"] is None and row["eventName"] == "MODIFY"
    binary = StructType([StructField("id", StringType()), StructField("blob", BinaryType())])
    (removed,) = typed_rows([orjson.dumps(KINESIS_RECORD)], binary)
    assert removed["oldImage"] == {"id": "o-2", "blob": b"\x01\x02"} and removed["newImage"] is None


@pytest.mark.parametrize(
    ("total", "count", "why"),
    [
        ("1.0005", "1", "total = 1.0005 does not fit decimal(38,3) exactly"),
        ("1", "1.5", "count = 1.5 does not fit bigint exactly"),
        ("1", "9223372036854775808", "does not fit bigint exactly"),
        ("1" * 36 + ".5", "1", "does not fit decimal(38,3) exactly"),
    ],
)
def test_a_number_that_does_not_fit_its_type_is_a_value_error_never_rounded(total, count, why):
    record = {**STREAMS_RECORD, "dynamodb": {**STREAMS_RECORD["dynamodb"], "NewImage": {
        "id": {"S": "o-1"}, "total": {"N": total}, "count": {"N": count}}}}  # fmt: skip
    (row,) = typed_rows([change(record)[1]])
    assert row["newImage"] is None and row["eventName"] is None
    assert "does not fit imageSchema" in row["valueError"] and why in row["valueError"]


def test_an_image_schema_that_is_not_json_is_named_at_load():
    with pytest.raises(OptionError, match=r"imageSchema.*not a Spark struct schema in JSON"):
        parse_value_format({"valueFormat": "dynamodb", "imageSchema": "id STRING"}, writing=False)
    with pytest.raises(OptionError, match="applies to valueFormat=dynamodb only"):
        parse_value_format({"valueFormat": "raw", "imageSchema": IMAGE.json()}, writing=False)
