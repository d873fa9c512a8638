"""The sink's side of `valueFormat=glue`: a row's `value` struct encoded with a registered Avro schema
version and framed as the registry's serializers frame records (`glue_wire`), so that a reader with
the registry's deserializers (the KCL integration, Flink's avro-glue format, this connector's source)
decodes it without knowing who wrote it.

The schema version is looked up once, when the query starts, and travels to the executors as its
definition and id: every task of a query writes the same version.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from .avro_types import fastavro, parse
from .glue_wire import frame


class ValueDoesNotFit(ValueError):
    """A row's value that the schema version cannot encode (a missing field, a wrong type)."""


class GlueEncoder:
    """Encodes rows' values (dicts, as Arrow's to_pylist gives a struct column) with one version."""

    def __init__(self, definition: str, version_id: str, compress: bool = False) -> None:
        self.schema = parse(definition)
        self.version_id, self.compress = version_id, compress

    @property
    def field_names(self) -> list[str]:
        return [f["name"] for f in self.schema.get("fields", [])]

    def encode(self, value: Mapping[str, Any]) -> bytes:
        body = io.BytesIO()
        try:
            fastavro.schemaless_writer(body, self.schema, value)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise ValueDoesNotFit(f"{type(exc).__name__}: {exc}") from None
        return frame(self.version_id, body.getvalue(), self.compress)
