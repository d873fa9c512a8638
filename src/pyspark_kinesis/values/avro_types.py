"""A registered Avro schema as a Spark type (and the Arrow type Spark expects of it), and records written with any compatible version
decoded into it.

The reader's schema (the version the user picks, at `.load()`) decides the columns; every record is
decoded by fastavro with its writer's schema (the version its header names) resolved against the
reader's, by Avro's own resolution rules: a field the writer did not have takes the reader's default,
a field the reader does not have is skipped, an int widens to a long... So a stream written by several
compatible versions comes out in one shape, and a record no rule maps is an error naming its version,
never a silently wrong row.

Only types Spark has a column for are mapped; the rest (a union of several non-null types, a
recursive record) is an error at `.load()` naming the field.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..spark_api import arrow_type

try:
    import fastavro
except ImportError:  # pragma: no cover - the [glue] extra
    fastavro = None  # type: ignore[assignment]


class UnsupportedSchema(ValueError):
    """A schema (or a field of it) with no Spark column type."""


def require_fastavro() -> None:
    if fastavro is None:
        raise ImportError(
            "valueFormat=glue with Avro schemas needs fastavro: pip install 'pyspark-kinesis[glue]'"
        )


def parse(definition: str | dict[str, Any]) -> Any:
    """A registered schema definition (JSON text or parsed), with its named types inlined."""
    require_fastavro()
    import orjson

    schema = orjson.loads(definition) if isinstance(definition, str) else definition
    try:
        return fastavro.parse_schema(schema, expand=True)
    except Exception as exc:  # fastavro raises several kinds for a bad schema
        raise UnsupportedSchema(f"not a valid Avro schema ({exc})") from None


def _non_null(branches: list[Any], where: str) -> Any:
    rest = [b for b in branches if b != "null"]
    if len(rest) != 1:
        raise UnsupportedSchema(
            f"{where}: a union of {', '.join(map(_name, rest))} has no Spark type (only a type and null map)"
        )
    return rest[0]


def _name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
_LOGICAL: dict[tuple[str, str], DataType] = {
    ("int", "date"): DateType(),
    ("long", "timestamp-millis"): TimestampType(),
    ("long", "timestamp-micros"): TimestampType(),
    ("long", "local-timestamp-millis"): TimestampNTZType(),
    ("long", "local-timestamp-micros"): TimestampNTZType(),
}


def spark_type(schema: Any, where: str = "value", depth: int = 0) -> DataType:
    """The Spark type of an Avro schema; UnsupportedSchema naming the field otherwise."""
    if depth > 64:
        raise UnsupportedSchema(f"{where}: nested more than 64 levels deep (a recursive record?)")
    if isinstance(schema, list):
        return spark_type(_non_null(schema, where), where, depth + 1)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        raise UnsupportedSchema(f"{where}: type '{schema}' has no Spark type (a recursive record?)")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return spark_type(kind, where, depth + 1)
    if (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)]
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "enum":
        return StringType()
    if kind == "fixed":
        return BinaryType()
    if kind == "array":
        return ArrayType(spark_type(schema["items"], f"{where}[]", depth + 1))
    if kind == "map":
        return MapType(StringType(), spark_type(schema["values"], f"{where}{{}}", depth + 1))
    if kind == "record":
        fields = [
            StructField(f["name"], spark_type(f["type"], f"{where}.{f['name']}", depth + 1))
            for f in schema["fields"]
        ]
        if not fields:
            raise UnsupportedSchema(f"{where}: a record without fields has no Spark type")
        return StructType(fields)
    raise UnsupportedSchema(f"{where}: type '{kind}' has no Spark type")


class AvroValues:
    """Decodes record bodies written with any version into the reader's schema."""

    def __init__(self, reader: Any) -> None:
        require_fastavro()
        self.reader = reader
        self.spark = spark_type(reader)
        self.arrow = arrow_type(self.spark)  # exactly what Spark expects of the column (see spark_api)

    def decode(self, body: bytes, writer: Any) -> Any:
        """One record; fastavro's resolution errors (a version the reader's schema cannot take) raise."""
        return fastavro.schemaless_reader(io.BytesIO(body), writer, self.reader)

    def column(self, values: Sequence[Any]) -> pa.Array:
        """The decoded records (None where a record has no value) as one Arrow column."""
        return pa.array(values, type=self.arrow)
