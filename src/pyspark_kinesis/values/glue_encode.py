"""The sink's side of `valueFormat=glue`: a row's `value` struct encoded with a registered schema
version (Avro, JSON Schema or Protobuf) and framed as the registry's serializers frame records (`glue_wire`), so
that a reader with the registry's deserializers (the KCL integration, Flink's avro-glue format, this
connector's source) decodes it without knowing who wrote it.

The schema version is looked up once, when the query starts, and travels to the executors as its
definition and id: every task of a query writes the same version.
"""

from __future__ import annotations

import decimal
import io
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from . import ValueDoesNotFit  # (defined in the package: see there)
from .glue_wire import frame


class GlueEncoder(Protocol):
    """Encodes rows' values (dicts, as Arrow's to_pylist gives a struct column) with one version."""

    version_id: str

    @property
    def field_names(self) -> list[str]: ...

    def encode(self, value: Mapping[str, Any]) -> bytes: ...


class AvroEncoder:
    """Avro binary through fastavro (the glue extra)."""

    def __init__(self, definition: str, version_id: str, compress: bool = False) -> None:
        from .avro_types import parse, writer_converter

        self.schema = parse(definition)
        self.version_id, self.compress = version_id, compress
        self.prepare = writer_converter(self.schema)  # (logical types: Spark's values as fastavro's)

    @property
    def field_names(self) -> list[str]:
        return [f["name"] for f in self.schema.get("fields", [])]

    def encode(self, value: Mapping[str, Any]) -> bytes:
        from .avro_types import fastavro

        body = io.BytesIO()
        try:
            fastavro.schemaless_writer(
                body, self.schema, value if self.prepare is None else self.prepare(value)
            )
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise ValueDoesNotFit(f"{type(exc).__name__}: {exc}") from None
        return frame(self.version_id, body.getvalue(), self.compress)


def _without_nulls(value: Any) -> Any:
    """A JSON Schema field that may be absent is not always one that may be null (`{"type": "string"}`
    allows no null): an unset field is left out of its object rather than written as null."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class JsonEncoder:
    """JSON text (orjson: timestamps and dates as ISO-8601 strings, as `format: date-time/date` wants),
    checked against the version by decoding it as the source would: a record the sink writes is one the
    source (and any reader of that version) takes, or the row fails naming the field."""

    def __init__(self, definition: str, version_id: str, compress: bool = False) -> None:
        from pyspark.sql.types import StructType

        from .avro_types import UnsupportedSchema
        from .json_types import JsonValues, parse

        self.schema = parse(definition)
        self.values = JsonValues(self.schema)
        if not isinstance(self.values.spark, StructType):
            raise UnsupportedSchema(
                f"the sink writes column 'value', a struct, and the schema's root is "
                f"{self.values.spark.simpleString()}, not an object"
            )
        self.version_id, self.compress = version_id, compress

    @property
    def field_names(self) -> list[str]:
        return list(self.values.spark.fieldNames())  # type: ignore[attr-defined]

    def encode(self, value: Mapping[str, Any]) -> bytes:
        from .json_types import DoesNotFit

        try:
            body = orjson.dumps(_without_nulls(dict(value)), option=orjson.OPT_UTC_Z)
            self.values.decode(body, None)
        except (DoesNotFit, orjson.JSONEncodeError) as exc:
            raise ValueDoesNotFit(str(exc)) from None
        return frame(self.version_id, body, self.compress)


class ProtobufEncoder:
    """Protobuf (the glue-protobuf extra): the value as the message `message` names (default: the first
    the .proto declares), behind the registry's index of that message, as its serializers write it.
    Enums are given by value name (as the source reads them), timestamps as datetimes, uint64 as
    decimals or ints; a null field is left unset."""

    def __init__(
        self, definition: str, version_id: str, compress: bool = False, message: str | None = None
    ) -> None:
        from google.protobuf import message_factory

        from .protobuf_types import compile_proto

        compiled = compile_proto(definition)
        self.descriptor = compiled.message(message)
        self.message_class = message_factory.GetMessageClass(self.descriptor)
        self.index = _varint(compiled.indexed.index(self.descriptor.full_name))
        self.version_id, self.compress = version_id, compress

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.descriptor.fields]

    def encode(self, value: Mapping[str, Any]) -> bytes:
        try:
            message = self.message_class()
            _fill(message, value)
            body = self.index + message.SerializeToString()
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ValueDoesNotFit(f"{type(exc).__name__}: {exc}") from None
        return frame(self.version_id, body, self.compress)


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _scalar(field: Any, value: Any) -> Any:
    if field.enum_type is not None and isinstance(value, str):
        named = field.enum_type.values_by_name.get(value)
        if named is None:
            raise ValueError(f"{field.name}: '{value}' is not a value of {field.enum_type.full_name}")
        return named.number
    if isinstance(value, decimal.Decimal):
        return int(value)
    return value


def _put(field: Any, target: Any, value: Any) -> None:
    """A message-typed `value` into the submessage `target`."""
    if field.message_type.full_name == "google.protobuf.Timestamp":
        target.FromDatetime(value)
    else:
        target.SetInParent()
        _fill(target, value)


def _fill(message: Any, value: Mapping[str, Any]) -> None:
    for field in message.DESCRIPTOR.fields:
        given = value.get(field.name)
        if given is None:
            continue
        kind = field.message_type
        if kind is not None and kind.GetOptions().map_entry:
            entries, key_field, value_field = (
                getattr(message, field.name),
                kind.fields_by_name["key"],
                kind.fields_by_name["value"],
            )
            for key, item in given.items() if isinstance(given, Mapping) else given:
                key = _scalar(key_field, key)
                if value_field.message_type is not None:
                    _put(value_field, entries[key], item)
                else:
                    entries[key] = _scalar(value_field, item)
        elif field.is_repeated:
            container = getattr(message, field.name)
            for item in given:
                if kind is not None:
                    _put(field, container.add(), item)
                else:
                    container.append(_scalar(field, item))
        elif kind is not None:
            _put(field, getattr(message, field.name), given)
        else:
            setattr(message, field.name, _scalar(field, given))


ENCODERS: dict[str, type[AvroEncoder] | type[JsonEncoder] | type[ProtobufEncoder]] = {
    "AVRO": AvroEncoder,
    "JSON": JsonEncoder,
    "PROTOBUF": ProtobufEncoder,
}


def encoder(data_format: str, definition: str, version_id: str, message: str | None = None) -> GlueEncoder:
    """The encoder of a registered version's data format (see ENCODERS for those the sink writes);
    `message`: Protobuf only (protobufMessageName)."""
    if data_format == "PROTOBUF":
        return ProtobufEncoder(definition, version_id, message=message)
    return ENCODERS[data_format](definition, version_id)
