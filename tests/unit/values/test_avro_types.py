"""Avro schemas as Spark types (src/pyspark_kinesis/values/avro_types.py): what each schema becomes, and
every refusal word for word with the path of the field it names (a user reads it at `.load()`), the
nesting bound, and the -nanos values fastavro may hand back as datetimes."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DecimalType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from pyspark_kinesis.values import avro_types
from pyspark_kinesis.values.avro_types import UnsupportedSchema, spark_type


def nested_arrays(levels: int, inner: object = "int") -> object:
    schema = inner
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def test_nesting_is_followed_64_levels_deep_and_refused_below():
    assert spark_type(nested_arrays(64)) == nested_type(64)
    with pytest.raises(UnsupportedSchema) as refused:
        spark_type(nested_arrays(65))
    assert str(refused.value) == f"value{'[]' * 65}: nested more than 64 levels deep (a recursive record?)"


def nested_type(levels: int) -> object:
    kind: object = IntegerType()
    for _ in range(levels):
        kind = ArrayType(kind)
    return kind


def test_unions_and_wrapped_types_count_as_levels_too():
    union = ["null", "int"]
    for _ in range(32):
        union = ["null", {"type": union}]  # (each union and each wrapped type: one level)
    with pytest.raises(UnsupportedSchema, match="nested more than 64 levels deep"):
        spark_type(union)
    assert spark_type({"type": {"type": {"type": "string"}}}) == StringType()


def test_records_maps_arrays_decimals_enums_and_fixed_map_to_spark_types():
    schema = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "string"}}},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38}},
            {
                "name": "rate",
                "type": {"type": "fixed", "size": 8, "logicalType": "decimal", "precision": 9, "scale": 4},
            },
            {"name": "state", "type": {"type": "enum", "name": "S", "symbols": ["A"]}},
            {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 4}},
        ],
    }
    assert spark_type(schema) == StructType(
        [
            StructField("tags", MapType(StringType(), ArrayType(StringType()))),
            StructField("price", DecimalType(38, 0)),
            StructField("rate", DecimalType(9, 4)),
            StructField("state", StringType()),
            StructField("raw", BinaryType()),
        ]
    )


CASES = [
    ("a name that is no type", "Order", "value: type 'Order' has no Spark type (a recursive record?)"),
    (
        "a decimal wider than Spark's",
        {"type": "bytes", "logicalType": "decimal", "precision": 39},
        "value: a decimal of 39 digits has no Spark type (Spark's decimals hold at most 38)",
    ),
    (
        "a big-decimal",
        {"type": "bytes", "logicalType": "big-decimal"},
        "value: big-decimal (each value has its own scale) has no Spark type",
    ),
    (
        "a record without fields, inside a record",
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": "inner", "type": {"type": "record", "name": "E", "fields": []}}],
        },
        "value.inner: a record without fields has no Spark type",
    ),
    (
        "a type Avro does not have, in an array in a map",
        {"type": "map", "values": {"type": "array", "items": {"type": "tuple"}}},
        "value{}[]: type 'tuple' has no Spark type",
    ),
    (
        "a named type used by name, in a union",
        {"type": "record", "name": "R", "fields": [{"name": "next", "type": ["null", "R"]}]},
        "value.next: type 'R' has no Spark type (a recursive record?)",
    ),
]


@pytest.mark.parametrize(("schema", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_schema_without_a_spark_type_is_refused_naming_the_field(schema, message):
    with pytest.raises(UnsupportedSchema) as refused:
        spark_type(schema)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("value", "nanos"),
    [
        (datetime.datetime(1970, 1, 2, 0, 0, 1, 5, tzinfo=datetime.UTC), (86_400 + 1) * 10**9 + 5_000),
        (datetime.datetime(1970, 1, 1, 0, 0, 0, 7), 7_000),  # (naive: its own epoch)
        (datetime.datetime(1969, 12, 31, 23, 59, 59, tzinfo=datetime.UTC), -(10**9)),
        (123, 123),
    ],
)
def test_nanos_from_a_datetime_or_a_count(value, nanos):
    assert avro_types._nanos(value) == nanos
