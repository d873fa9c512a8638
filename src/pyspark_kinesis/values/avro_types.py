"""A registered Avro schema as Spark and Arrow types, and records written with any compatible version
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


_PRIMITIVES = {
    "boolean": (pa.bool_(), "BOOLEAN"),
    "int": (pa.int32(), "INT"),
    "long": (pa.int64(), "BIGINT"),
    "float": (pa.float32(), "FLOAT"),
    "double": (pa.float64(), "DOUBLE"),
    "bytes": (pa.binary(), "BINARY"),
    "string": (pa.string(), "STRING"),
}
_LOGICAL = {
    ("int", "date"): (pa.date32(), "DATE"),
    ("long", "timestamp-millis"): (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    ("long", "timestamp-micros"): (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    ("long", "local-timestamp-millis"): (pa.timestamp("us"), "TIMESTAMP_NTZ"),
    ("long", "local-timestamp-micros"): (pa.timestamp("us"), "TIMESTAMP_NTZ"),
}


def types(schema: Any, where: str = "value", depth: int = 0) -> tuple[pa.DataType, str]:
    """(Arrow type, Spark DDL type) of an Avro schema; UnsupportedSchema naming the field otherwise."""
    if depth > 64:
        raise UnsupportedSchema(f"{where}: nested more than 64 levels deep (a recursive record?)")
    if isinstance(schema, list):
        return types(_non_null(schema, where), where, depth + 1)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        raise UnsupportedSchema(f"{where}: type '{schema}' has no Spark type (a recursive record?)")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return types(kind, where, depth + 1)
    if (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)]
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return pa.decimal128(precision, scale), f"DECIMAL({precision},{scale})"
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "enum":
        return pa.string(), "STRING"
    if kind == "fixed":
        return pa.binary(), "BINARY"
    if kind == "array":
        arrow, ddl = types(schema["items"], f"{where}[]", depth + 1)
        return pa.list_(arrow), f"ARRAY<{ddl}>"
    if kind == "map":
        arrow, ddl = types(schema["values"], f"{where}{{}}", depth + 1)
        return pa.map_(pa.string(), arrow), f"MAP<STRING, {ddl}>"
    if kind == "record":
        fields = [(f["name"], *types(f["type"], f"{where}.{f['name']}", depth + 1)) for f in schema["fields"]]
        if not fields:
            raise UnsupportedSchema(f"{where}: a record without fields has no Spark type")
        arrow_type = pa.struct([pa.field(name, arrow) for name, arrow, _ddl in fields])
        return arrow_type, "STRUCT<" + ", ".join(f"`{name}`: {ddl}" for name, _a, ddl in fields) + ">"
    raise UnsupportedSchema(f"{where}: type '{kind}' has no Spark type")


class AvroValues:
    """Decodes record bodies written with any version into the reader's schema."""

    def __init__(self, reader: Any) -> None:
        require_fastavro()
        self.reader = reader
        self.arrow, self.ddl = types(reader)

    def decode(self, body: bytes, writer: Any) -> Any:
        """One record; fastavro's resolution errors (a version the reader's schema cannot take) raise."""
        return fastavro.schemaless_reader(io.BytesIO(body), writer, self.reader)

    def column(self, values: Sequence[Any]) -> pa.Array:
        """The decoded records (None where a record has no value) as one Arrow column."""
        return pa.array(values, type=self.arrow)
