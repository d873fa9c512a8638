"""JSON Schema, as the Glue Schema Registry holds it for JSON data, mapped onto Spark types, and JSON
record bodies decoded into them.

JSON describes itself, so a body is read whatever schema version wrote it and then fitted to the
reader's schema: fields the reader does not have are left out (a newer writer added them), fields it
has that the body lacks are null (an older writer, or an optional field), unless the reader's schema
requires them. A value of another type than the reader's is never coerced (Arrow would truncate 1.5
into an integer column): the record does not fit, and `glue_values` reports it as it reports an Avro
record its reader cannot take.

Supported: `object` with `properties` (and `required`), `array` with `items`, `string` (`format`
`date-time` and `date` as timestamp and date), `integer`, `number`, `boolean`, a type list with
`"null"`, and `$ref` to `#/definitions/...` or `#/$defs/...` (not recursive). Anything else is an
`UnsupportedSchema` naming the field, at `.load()`.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..spark_features import arrow_type
from .avro_types import UnsupportedSchema

MAX_DEPTH = 32


def parse(definition: str) -> dict[str, Any]:
    try:
        schema = orjson.loads(definition)
    except orjson.JSONDecodeError as exc:
        raise UnsupportedSchema(f"not valid JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise UnsupportedSchema("a JSON Schema must be an object")
    return schema


def _resolve(node: dict[str, Any], root: dict[str, Any], where: str) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    for prefix in ("#/definitions/", "#/$defs/"):
        if isinstance(ref, str) and ref.startswith(prefix):
            found = root.get(prefix[2:-1], {}).get(ref[len(prefix) :])
            if isinstance(found, dict):
                return found
    raise UnsupportedSchema(f"{where}: $ref {ref!r} is not a definition of this schema")


def _kind(node: dict[str, Any], where: str) -> tuple[str, bool]:
    """The node's one non-null type, and whether null is allowed too."""
    kind = node.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) != 1:
            raise UnsupportedSchema(f"{where}: a type list {kind} of several types has no Spark type")
        return others[0], "null" in kind
    if kind is None and "properties" in node:
        return "object", False
    if not isinstance(kind, str):
        raise UnsupportedSchema(
            f"{where}: no single 'type' (oneOf, anyOf and untyped values have no Spark type)"
        )
    return kind, False


def spark_type(
    schema: dict[str, Any],
    root: dict[str, Any] | None = None,
    where: str = "value",
    depth: int = 0,
    strict: bool = False,
) -> DataType:
    """The Spark type of a JSON Schema node. Every field is nullable for Spark (a record that does not
    decode has a null value, whose flattened fields are null too); `strict` marks the required ones
    not nullable, which is what `fit` checks a body against."""
    root = schema if root is None else root
    if depth > MAX_DEPTH:
        raise UnsupportedSchema(f"{where}: nested deeper than {MAX_DEPTH} levels (a recursive $ref?)")
    node = _resolve(schema, root, where)
    kind, _nullable = _kind(node, where)
    if kind == "object":
        properties = node.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise UnsupportedSchema(f"{where}: an object without 'properties' has no fixed Spark type")
        required = set(node.get("required", []))
        fields = []
        for name, child in properties.items():
            child_type = spark_type(child, root, f"{where}.{name}", depth + 1, strict)
            nullable = not strict or name not in required or _kind(_resolve(child, root, where), where)[1]
            fields.append(StructField(name, child_type, nullable))
        return StructType(fields)
    if kind == "array":
        items = node.get("items")
        if not isinstance(items, dict):
            raise UnsupportedSchema(f"{where}: an array needs one 'items' schema")
        return ArrayType(spark_type(items, root, f"{where}[]", depth + 1, strict))
    if kind == "string":
        return {"date-time": TimestampType(), "date": DateType()}.get(node.get("format", ""), StringType())
    simple = {"integer": LongType(), "number": DoubleType(), "boolean": BooleanType()}
    if kind in simple:
        return simple[kind]
    raise UnsupportedSchema(f"{where}: type '{kind}' has no Spark type")


class DoesNotFit(ValueError):
    """A JSON value of another shape than the reader's schema."""


def _timestamp(text: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def fit(value: Any, kind: DataType, where: str) -> Any:
    """`value` as Arrow takes it for `kind`; DoesNotFit naming the field otherwise."""
    if value is None:
        return None
    if isinstance(kind, StructType):
        if not isinstance(value, dict):
            raise DoesNotFit(f"{where} is {type(value).__name__}, not an object")
        out = {}
        for field in kind.fields:
            item = value.get(field.name)
            if item is None and not field.nullable:
                raise DoesNotFit(f"{where}.{field.name} is required and missing")
            out[field.name] = fit(item, field.dataType, f"{where}.{field.name}")
        return out
    if isinstance(kind, ArrayType):
        if not isinstance(value, list):
            raise DoesNotFit(f"{where} is {type(value).__name__}, not an array")
        return [fit(item, kind.elementType, f"{where}[{i}]") for i, item in enumerate(value)]
    try:
        if isinstance(kind, LongType) and isinstance(value, int) and not isinstance(value, bool):
            if -(2**63) <= value < 2**63:
                return value
        elif isinstance(kind, DoubleType) and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        elif (isinstance(kind, BooleanType) and isinstance(value, bool)) or (
            isinstance(kind, StringType) and isinstance(value, str)
        ):
            return value
        elif isinstance(kind, TimestampType) and isinstance(value, str):
            return _timestamp(value)
        elif isinstance(kind, DateType) and isinstance(value, str):
            return datetime.date.fromisoformat(value)
    except ValueError:
        pass
    raise DoesNotFit(f"{where} is {value!r}, not a {kind.simpleString()}")


class JsonValues:
    """Decodes JSON record bodies into the reader's schema (the writer's version is not needed)."""

    def __init__(self, reader: dict[str, Any]) -> None:
        self.spark = spark_type(reader)
        self.strict = spark_type(reader, strict=True)
        self.arrow = arrow_type(self.spark)

    def decode(self, body: bytes, writer: Any) -> Any:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise DoesNotFit(f"the body is not JSON ({exc})") from None
        return fit(value, self.strict, "value")

    def column(self, values: Sequence[Any]) -> pa.Array:
        return pa.array(values, type=self.arrow)
