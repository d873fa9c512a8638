"""JSON Schemas as Spark types (src/pyspark_kinesis/values/json_types.py), beside test_glue_json.py's
records: every refusal word for word with the path it names, definitions by `$ref`, null in a type
list, the nesting bound, and which fields the strict type marks required."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_kinesis.values.avro_types import UnsupportedSchema
from pyspark_kinesis.values.json_types import MAX_DEPTH, parse, spark_type
from tests.unit.parser_words import orjson_words


def test_a_definition_that_is_not_a_json_object_is_refused():
    with pytest.raises(UnsupportedSchema) as bad:
        parse("{nope")
    assert str(bad.value) == f"not valid JSON ({orjson_words('{nope')})"
    with pytest.raises(UnsupportedSchema) as listed:
        parse("[1]")
    assert str(listed.value) == "a JSON Schema must be an object"
    assert parse('{"type": "string"}') == {"type": "string"}


def test_definitions_are_found_under_both_keywords_and_a_missing_one_is_named():
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/definitions/when"},
            "b": {"$ref": "#/$defs/day"},
            "c": {"type": ["null", "string"]},
        },
        "definitions": {"when": {"type": "string", "format": "date-time"}},
        "$defs": {"day": {"type": "string", "format": "date"}},
    }
    assert spark_type(schema) == StructType(
        [StructField("a", TimestampType()), StructField("b", DateType()), StructField("c", StringType())]
    )
    with pytest.raises(UnsupportedSchema) as missing:
        spark_type({"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}})
    assert str(missing.value) == "value.a: $ref '#/$defs/none' is not a definition of this schema"
    with pytest.raises(UnsupportedSchema, match=r"^value.a: \$ref 'other.json#/x' is not a definition"):
        spark_type({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}})


def test_properties_without_a_type_are_an_object_and_a_string_format_decides_its_type():
    schema = {"properties": {"n": {"type": "integer"}, "s": {"type": "string", "format": "email"}}}
    assert spark_type(schema) == StructType([StructField("n", LongType()), StructField("s", StringType())])


def test_strict_marks_required_fields_not_nullable_unless_their_type_allows_null():
    schema = {
        "type": "object",
        "required": ["must", "maybe"],
        "properties": {
            "must": {"type": "integer"},
            "maybe": {"type": ["integer", "null"]},
            "free": {"type": "integer"},
            "rows": {
                "type": "array",
                "items": {"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}},
            },
        },
    }
    strict = spark_type(schema, strict=True)
    assert [(f.name, f.nullable) for f in strict.fields] == [
        ("must", False),
        ("maybe", True),
        ("free", True),
        ("rows", True),
    ]
    assert strict["rows"].dataType == ArrayType(StructType([StructField("x", StringType(), False)]))
    assert all(f.nullable for f in spark_type(schema).fields)


def test_nesting_is_bounded():
    recursive = {
        "$ref": "#/definitions/node",
        "definitions": {"node": {"type": "object", "properties": {"next": {"$ref": "#/definitions/node"}}}},
    }
    with pytest.raises(UnsupportedSchema) as refused:
        spark_type(recursive)
    assert str(refused.value) == (
        f"value{'.next' * (MAX_DEPTH + 1)}: nested deeper than {MAX_DEPTH} levels (a recursive $ref?)"
    )
    deep: dict = {"type": "integer"}
    for _ in range(MAX_DEPTH):
        deep = {"type": "array", "items": deep}
    assert spark_type(deep) is not None  # (MAX_DEPTH levels: taken)


CASES = [
    (
        "several types",
        {"type": ["string", "integer"]},
        "value: a type list ['string', 'integer'] of several types has no Spark type",
    ),
    (
        "no type",
        {"oneOf": [{"type": "string"}]},
        "value: no single 'type' (oneOf, anyOf and untyped values have no Spark type)",
    ),
    (
        "an object without properties",
        {"type": "object"},
        "value: an object without 'properties' has no fixed Spark type",
    ),
    (
        "an object with empty properties",
        {"type": "object", "properties": {}},
        "value: an object without 'properties' has no fixed Spark type",
    ),
    (
        "an array without items",
        {"type": "object", "properties": {"a": {"type": "array"}}},
        "value.a: an array needs one 'items' schema",
    ),
    (
        "a type without a Spark type, in an array",
        {"type": "array", "items": {"type": "null"}},
        "value[]: type 'null' has no Spark type",
    ),
]


@pytest.mark.parametrize(("schema", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_schema_without_a_spark_type_is_refused_naming_the_path(schema, message):
    with pytest.raises(UnsupportedSchema) as refused:
        spark_type(schema)
    assert str(refused.value) == message
