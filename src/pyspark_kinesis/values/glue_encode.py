"""The sink's side of `valueFormat=glue`: a row's `value` struct encoded with a registered schema
version (Avro or JSON Schema) and framed as the registry's serializers frame records (`glue_wire`), so
that a reader with the registry's deserializers (the KCL integration, Flink's avro-glue format, this
connector's source) decodes it without knowing who wrote it.

The schema version is looked up once, when the query starts, and travels to the executors as its
definition and id: every task of a query writes the same version.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from .glue_wire import frame


class ValueDoesNotFit(ValueError):
    """A row's value that the schema version cannot encode (a missing field, a wrong type)."""


class GlueEncoder(Protocol):
    """Encodes rows' values (dicts, as Arrow's to_pylist gives a struct column) with one version."""

    version_id: str

    @property
    def field_names(self) -> list[str]: ...

    def encode(self, value: Mapping[str, Any]) -> bytes: ...


class AvroEncoder:
    """Avro binary through fastavro (the glue extra)."""

    def __init__(self, definition: str, version_id: str, compress: bool = False) -> None:
        from .avro_types import parse

        self.schema = parse(definition)
        self.version_id, self.compress = version_id, compress

    @property
    def field_names(self) -> list[str]:
        return [f["name"] for f in self.schema.get("fields", [])]

    def encode(self, value: Mapping[str, Any]) -> bytes:
        from .avro_types import fastavro

        body = io.BytesIO()
        try:
            fastavro.schemaless_writer(body, self.schema, value)
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


ENCODERS: dict[str, type[AvroEncoder] | type[JsonEncoder]] = {"AVRO": AvroEncoder, "JSON": JsonEncoder}


def encoder(data_format: str, definition: str, version_id: str) -> GlueEncoder:
    """The encoder of a registered version's data format (see ENCODERS for those the sink writes)."""
    return ENCODERS[data_format](definition, version_id)
