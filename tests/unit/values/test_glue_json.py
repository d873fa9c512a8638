"""valueFormat=glue with JSON Schema: the Spark type a registered JSON Schema makes, records of two
versions fitted to the reader's, and values of another type refused, never coerced."""

from __future__ import annotations

import datetime
import uuid

import orjson
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_kinesis.errors import CorruptRecordError
from pyspark_kinesis.values import json_types
from pyspark_kinesis.values.avro_types import UnsupportedSchema
from pyspark_kinesis.values.glue_values import GlueValues

V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "price": {"type": "number"},
        "at": {"type": "string", "format": "date-time"},
    },
    "required": ["id", "item"],
}
V2 = {  # a field added (optional), one via a definition
    **V1,
    "properties": {
        **V1["properties"],
        "tags": {"$ref": "#/definitions/tags"},
        "day": {"type": ["string", "null"], "format": "date"},
    },
    "definitions": {"tags": {"type": "array", "items": {"type": "string"}}},
}
V1_ID, V2_ID = str(uuid.uuid4()), str(uuid.uuid4())
DEFINITIONS = {V1_ID: orjson.dumps(V1).decode(), V2_ID: orjson.dumps(V2).decode()}


def framed(version_id: str, record: dict | list | bytes) -> bytes:
    """The registry's framing, built here: header version 3, no compression, the version's UUID."""
    body = record if isinstance(record, bytes) else orjson.dumps(record)
    return bytes([3, 0]) + uuid.UUID(version_id).bytes + body


def where(index: int) -> str:
    return f"stream 'orders', shard shardId-000000000000, row {index}"


def decoder(reader: str, **policy) -> GlueValues:
    return GlueValues(DEFINITIONS[reader], DEFINITIONS.__getitem__, data_format="JSON", **policy)


def test_a_json_schema_maps_to_a_spark_struct():
    assert json_types.spark_type(V2, strict=True) == StructType(
        [
            StructField("id", LongType(), False),
            StructField("item", StringType(), False),
            StructField("price", DoubleType()),
            StructField("at", TimestampType()),
            StructField("tags", ArrayType(StringType())),
            StructField("day", DateType()),
        ]
    )
    assert json_types.spark_type({"type": "boolean"}) == BooleanType()
    assert all(f.nullable for f in json_types.spark_type(V2).fields)  # Spark's: a value may be null


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "object"}, "value: an object without 'properties'"),
        (
            {"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}]}}},
            "value.x: no single 'type'",
        ),
        ({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}}, "value.x: a type list"),
        (
            {"type": "object", "properties": {"x": {"$ref": "#/definitions/nope"}}},
            "value.x: $ref '#/definitions/nope'",
        ),
        ({"type": "array"}, "value: an array needs one 'items' schema"),
        ({"type": "object", "properties": {"x": {"type": "null"}}}, "value.x: type 'null' has no Spark type"),
    ],
)
def test_schemas_without_a_spark_type_are_refused_naming_the_field(schema, words):
    with pytest.raises(UnsupportedSchema) as caught:
        json_types.spark_type(schema)
    assert words in str(caught.value)


def test_records_of_two_versions_fit_the_readers_schema():
    data = pa.array(
        [
            framed(V1_ID, {"id": 1, "item": "a", "price": 2, "at": "2026-11-24T10:00:00Z"}),
            framed(V2_ID, {"id": 2, "item": "b", "tags": ["x"], "day": "2026-11-24", "extra": True}),
            None,
        ],
        type=pa.binary(),
    )
    newer = decoder(V2_ID).decode(data, where).values.to_pylist()
    assert newer == [
        {
            "id": 1,
            "item": "a",
            "price": 2.0,
            "at": datetime.datetime(2026, 11, 24, 10, 0, tzinfo=datetime.UTC),
            "tags": None,
            "day": None,
        },
        {"id": 2, "item": "b", "price": None, "at": None, "tags": ["x"], "day": datetime.date(2026, 11, 24)},
        None,
    ]
    older = decoder(V1_ID).decode(data, where).values.to_pylist()  # the newer fields left out
    assert [r and sorted(r) for r in older] == [["at", "id", "item", "price"]] * 2 + [None]


@pytest.mark.parametrize(
    ("record", "words"),
    [
        ({"id": 1.5, "item": "a"}, "value.id is 1.5, not a bigint"),  # Arrow alone would truncate it to 1
        ({"id": True, "item": "a"}, "value.id is True, not a bigint"),
        ({"id": 1}, "value.item is required and missing"),
        ({"id": 1, "item": "a", "at": "yesterday"}, "value.at is 'yesterday', not a timestamp"),
        ({"id": 1, "item": "a", "tags": "x"}, "value.tags is str, not an array"),
        (b'{"id": 18446744073709551615, "item": "a"}', "value.id is 18446744073709551615, not a bigint"),
        (b'{"id": 1180591620717411303424, "item": "a"}', "not a bigint"),  # orjson reads it as a float
        ([1, 2], "value is list, not an object"),
    ],
)
def test_a_value_of_another_type_is_refused_naming_the_field_and_version(record, words):
    data = pa.array([framed(V2_ID, record)], type=pa.binary())
    with pytest.raises(CorruptRecordError) as caught:
        decoder(V2_ID).decode(data, where)
    assert words in str(caught.value) and V2_ID in str(caught.value) and "row 0" in str(caught.value)
    kept = decoder(V2_ID, on_error="column").decode(data, where)
    assert kept.values.to_pylist() == [None] and words in kept.errors.to_pylist()[0]


def test_a_body_that_is_not_json_is_refused():
    data = pa.array([bytes([3, 0]) + uuid.UUID(V1_ID).bytes + b"{not json"], type=pa.binary())
    kept = decoder(V1_ID, on_error="column").decode(data, where)
    assert "the body is not JSON" in kept.errors.to_pylist()[0]


# -- the sink's side ---------------------------------------------------------------------------------
def test_the_json_encoder_writes_what_a_json_parser_and_both_versions_read_back():
    from pyspark_kinesis.values.glue_encode import encoder

    writer = encoder("JSON", DEFINITIONS[V2_ID], V2_ID)
    assert writer.field_names == ["id", "item", "price", "at", "tags", "day"]
    at = datetime.datetime(2026, 11, 24, 10, 0, 1, 500000, tzinfo=datetime.UTC)
    value = {"id": 7, "item": "x", "price": None, "at": at, "tags": ["a"], "day": datetime.date(2026, 11, 25)}
    payload = writer.encode(value)
    assert payload[:2] == bytes([3, 0]) and str(uuid.UUID(bytes=payload[2:18])) == V2_ID
    # An unset field is left out, not written as null: {"type": "number"} allows no null.
    assert orjson.loads(payload[18:]) == {
        "id": 7,
        "item": "x",
        "at": "2026-11-24T10:00:01.500000Z",
        "tags": ["a"],
        "day": "2026-11-25",
    }
    data = pa.array([payload], type=pa.binary())
    assert decoder(V2_ID).decode(data, where).values.to_pylist() == [{**value, "price": None}]
    assert decoder(V1_ID).decode(data, where).values.to_pylist() == [
        {"id": 7, "item": "x", "price": None, "at": at}
    ]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"item": "x"}, "value.id is required and missing"),
        ({"id": None, "item": "x"}, "value.id is required and missing"),
        ({"id": 1, "item": 2}, "value.item is 2, not a string"),
        ({"id": 1, "item": "x", "tags": "a"}, "value.tags is str, not an array"),
        ({"id": 1, "item": "x", "price": b"\x00"}, "not JSON serializable"),
    ],
)
def test_the_json_encoder_refuses_a_value_the_version_does_not_take(value, words):
    from pyspark_kinesis.values.glue_encode import ValueDoesNotFit, encoder

    with pytest.raises(ValueDoesNotFit) as caught:
        encoder("JSON", DEFINITIONS[V2_ID], V2_ID).encode(value)
    assert words in str(caught.value)


def test_the_json_encoder_needs_an_object_schema():
    from pyspark_kinesis.values.glue_encode import encoder

    with pytest.raises(UnsupportedSchema, match="root is array<string>, not an object"):
        encoder("JSON", '{"type": "array", "items": {"type": "string"}}', V1_ID)
