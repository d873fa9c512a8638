"""A registered Avro schema as a Spark type (and the Arrow type Spark expects of it), and records written with any compatible version
decoded into it.

The reader's schema (the version the user picks, at `.load()`) decides the columns; every record is
decoded by fastavro with its writer's schema (the version its header names) resolved against the
reader's, by Avro's own resolution rules: a field the writer did not have takes the reader's default,
a field the reader does not have is skipped, an int widens to a long... So a stream written by several
compatible versions comes out in one shape, and a record no rule maps is an error naming its version,
never a silently wrong row.

Every logical type the Avro specification defines is mapped to a Spark type that holds its values
exactly (docs/options.md has the table): `uuid` as a string; `date`; `time-millis` and `time-micros`
as a day-time interval since midnight; `timestamp-*` as timestamps, `local-timestamp-*` as
timestamps without a time zone, and their `-nanos` forms as the count of nanoseconds (a long: Spark's
timestamps hold microseconds); `decimal` (bytes or fixed) as a decimal of its precision and scale
(at most 38 digits, Spark's limit); `duration` as a struct of its months, days and milliseconds.
What has no Spark column (a union of several non-null types, a recursive record, a decimal of more
than 38 digits, `big-decimal`, whose scale each value carries) is an error at `.load()` naming the
field.
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DayTimeIntervalType,
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

from ..spark_features import arrow_type

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
_DURATION = StructType(
    [StructField(name, LongType()) for name in ("months", "days", "milliseconds")]
)  # (each an unsigned 32-bit count: a long holds it)
_LOGICAL: dict[tuple[str, str], DataType] = {
    ("int", "date"): DateType(),
    ("long", "timestamp-millis"): TimestampType(),
    ("long", "timestamp-micros"): TimestampType(),
    ("long", "timestamp-nanos"): LongType(),
    ("long", "local-timestamp-millis"): TimestampNTZType(),
    ("long", "local-timestamp-micros"): TimestampNTZType(),
    ("long", "local-timestamp-nanos"): LongType(),
    ("string", "uuid"): StringType(),
    ("fixed", "uuid"): StringType(),
    ("int", "time-millis"): DayTimeIntervalType(),
    ("long", "time-micros"): DayTimeIntervalType(),
    ("fixed", "duration"): _DURATION,
}
MAX_DECIMAL_DIGITS = 38  # Spark's DecimalType


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
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision > MAX_DECIMAL_DIGITS:
            raise UnsupportedSchema(
                f"{where}: a decimal of {precision} digits has no Spark type (Spark's decimals hold at most "
                f"{MAX_DECIMAL_DIGITS})"
            )
        return DecimalType(precision, scale)
    if logical == "big-decimal":
        raise UnsupportedSchema(f"{where}: big-decimal (each value has its own scale) has no Spark type")
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
        self.arrow = arrow_type(self.spark)  # exactly what Spark expects of the column (see spark_features)
        self.convert = converter(reader)  # None: fastavro's values are already what Arrow takes

    def decode(self, body: bytes, writer: Any) -> Any:
        """One record; fastavro's resolution errors (a version the reader's schema cannot take) raise."""
        value = fastavro.schemaless_reader(io.BytesIO(body), writer, self.reader)
        return value if self.convert is None or value is None else self.convert(value)

    def column(self, values: Sequence[Any]) -> pa.Array:
        """The decoded records (None where a record has no value) as one Arrow column."""
        return pa.array(values, type=self.arrow)


# -- fastavro's values of the logical types as Arrow takes them for their Spark types ------------------
def _since_midnight(value: Any) -> Any:
    if isinstance(value, datetime.time):
        return datetime.timedelta(
            hours=value.hour, minutes=value.minute, seconds=value.second, microseconds=value.microsecond
        )
    return datetime.timedelta(microseconds=int(value))  # (a raw count, as fastavro may hand it)


def _uuid_text(value: Any) -> Any:
    return str(uuid.UUID(bytes=bytes(value))) if isinstance(value, bytes | bytearray) else str(value)


def _duration(value: Any) -> dict[str, int]:
    months, days, millis = struct.unpack("<III", bytes(value))
    return {"months": months, "days": days, "milliseconds": millis}


def _nanos(value: Any) -> int:
    if isinstance(value, datetime.datetime):  # (a fastavro that decodes -nanos to datetimes)
        epoch = datetime.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        delta = value - epoch
        return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    return int(value)


_CONVERT: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("string", "uuid"): _uuid_text,
    ("fixed", "uuid"): _uuid_text,
    ("int", "time-millis"): _since_midnight,
    ("long", "time-micros"): _since_midnight,
    ("fixed", "duration"): _duration,
    ("long", "timestamp-nanos"): _nanos,
    ("long", "local-timestamp-nanos"): _nanos,
}


# ...and back, for the sink: a Spark value of those types as fastavro's writer takes it.
def _time_of_day(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        micros = value // datetime.timedelta(microseconds=1)
        return (datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=micros)).time()
    return value


def _uuid_bytes(value: Any) -> Any:
    return uuid.UUID(value).bytes if isinstance(value, str) else value


def _duration_bytes(value: Any) -> Any:
    if isinstance(value, dict):
        return struct.pack("<III", value["months"], value["days"], value["milliseconds"])
    return value


_UNCONVERT: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("fixed", "uuid"): _uuid_bytes,
    ("int", "time-millis"): _time_of_day,
    ("long", "time-micros"): _time_of_day,
    ("fixed", "duration"): _duration_bytes,
}


def converter(schema: Any, depth: int = 0, table: dict | None = None) -> Callable[[Any], Any] | None:
    """A function that turns fastavro's value for `schema` into what Arrow takes for its Spark type (or
    with `table=_UNCONVERT`, a Spark value into what fastavro's writer takes), or None where there is
    nothing to turn (most schemas: no cost per record)."""
    table = _CONVERT if table is None else table
    if depth > 64 or isinstance(schema, str):
        return None
    if isinstance(schema, list):
        inner = [c for c in (converter(b, depth + 1, table) for b in schema if b != "null") if c is not None]
        return _nullable(inner[0]) if inner else None
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, dict | list):
        return converter(kind, depth + 1, table)
    if (kind, logical) in table:
        return _nullable(table[(kind, logical)])
    if kind == "array":
        item = converter(schema["items"], depth + 1, table)
        return None if item is None else _nullable(lambda values: [item(v) for v in values])
    if kind == "map":
        value = converter(schema["values"], depth + 1, table)
        if table is _UNCONVERT:  # Arrow hands a map column's values over as (key, value) pairs
            turn = value or (lambda v: v)
            return _nullable(lambda m: {k: turn(v) for k, v in (m.items() if isinstance(m, dict) else m)})
        return None if value is None else _nullable(lambda m: {k: value(v) for k, v in m.items()})
    if kind == "record":
        fields = [(f["name"], converter(f["type"], depth + 1, table)) for f in schema["fields"]]
        todo = [(name, c) for name, c in fields if c is not None]
        if not todo:
            return None

        def record(value: dict[str, Any]) -> dict[str, Any]:
            value = dict(value)  # (a row's value is not changed in place)
            for name, convert in todo:
                if name in value:
                    value[name] = convert(value[name])
            return value

        return _nullable(record)
    return None


def _nullable(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


def writer_converter(schema: Any) -> Callable[[Any], Any] | None:
    """For the sink: a Spark value of `schema`'s type as fastavro's writer takes it (None: as it is)."""
    return converter(schema, 0, _UNCONVERT)
