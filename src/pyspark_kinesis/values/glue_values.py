"""Records framed by the Glue Schema Registry's serializers (`glue_wire`) decoded into the reader's
schema as one typed column per batch, beside the Kinesis columns.

Per record: the header names the writer's schema version, fetched once per executor process and
parsed once; the body is decoded with it into the reader's schema (`avro_types`). A JSON body needs no
writer's schema: it is fitted to the reader's JSON Schema as it is (`json_types`), a whole batch at
once by Arrow's JSON reader where that gives the same values (`json_batch`). A Protobuf body's
writer version says which of its messages the body is; the reader's message of that name parses it
(`protobuf_types`). What cannot be
decoded is never dropped: by default the task fails with an error naming the stream, shard, sequence
number and schema version (`onDecodeError=fail`); with `onDecodeError=column` the row keeps its raw
bytes in `data`, its value is null and `valueError` says why. A record without the header is an error
the same way, or with `recordsWithoutHeader=pass` a row whose value is null (no error: a stream that
mixes framed and plain records on purpose).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import CorruptRecordError, SchemaVersionNotFoundError, StreamAccessError
from . import json_batch, json_types, protobuf_types
from .avro_types import AvroValues, parse
from .glue_wire import WireError, plain_bodies, unframe

FAIL, COLUMN, PASS = "fail", "column", "pass"


@dataclass(frozen=True)
class Decoded:
    values: pa.Array  # the reader's struct type, null where a record has no value
    errors: pa.Array | None  # why, per row (onDecodeError=column); None otherwise


class GlueValues:
    """One executor process's decoder for one reader schema. `writer_definition(version_id)` returns
    a writer version's schema definition (the registry, cached per process: see `aws.glue_registry`)."""

    def __init__(
        self,
        reader_definition: str,
        writer_definition: Callable[[str], str],
        on_error: str = FAIL,
        without_header: str = FAIL,
        data_format: str = "AVRO",
        message: str | None = None,
    ) -> None:
        """`message`: Protobuf only, the reader's message (default: the first the .proto declares)."""
        # JSON bodies describe themselves: they are fitted to the reader's schema without the writer's.
        self.json = data_format == "JSON"
        self.protobuf = data_format == "PROTOBUF"
        self.codec: AvroValues | json_types.JsonValues | protobuf_types.ProtobufValues
        self.batch: json_batch.JsonBatch | None = None
        if self.json:
            self.codec = json_types.JsonValues(json_types.parse(reader_definition))
            self.batch = json_batch.JsonBatch(self.codec.strict, self.codec.arrow)
        elif self.protobuf:
            self.codec = protobuf_types.ProtobufValues(
                protobuf_types.compile_proto(reader_definition), message
            )
        else:
            self.codec = AvroValues(parse(reader_definition))
        self.writer_definition = writer_definition
        self.on_error, self.without_header = on_error, without_header
        self._writers: dict[str, Any] = {}

    def _writer(self, version_id: str) -> Any:
        if self.json:
            return None
        writer = self._writers.get(version_id)
        if writer is None and self.protobuf:
            # Which message a body is: the writer's .proto numbers its messages (see protobuf_types).
            writer = self._writers[version_id] = protobuf_types.compile_proto(
                self.writer_definition(version_id)
            )
        if writer is None:
            assert isinstance(self.codec, AvroValues)
            writer = parse(self.writer_definition(version_id))
            # The reader's own version (most records): fastavro skips schema resolution only for the
            # very same object, and resolving a schema against an equal copy cost a quarter of the decode.
            if writer == self.codec.reader:
                writer = self.codec.reader
            self._writers[version_id] = writer
        return writer

    def decode(self, data: pa.Array, where: Callable[[int], str]) -> Decoded:
        """The values of a batch's `data` column; `where(i)` names row i (stream, shard, sequence
        number) for errors."""
        if self.batch is not None:
            decoded = self._json_batch(data)
            if decoded is not None:
                return decoded
        values: list[Any] = []
        errors: list[str | None] = []
        for index, payload in enumerate(data.to_pylist()):
            value, error = self._one(payload, index, where)
            values.append(value)
            errors.append(error)
        column = self.codec.column(values)
        return Decoded(column, pa.array(errors, type=pa.string()) if self.on_error == COLUMN else None)

    def _json_batch(self, data: pa.Array) -> Decoded | None:
        """JSON bodies decoded as one batch (`json_batch`), when every record has its header (or
        passes without one) and the batch decodes without an error; None otherwise, for the
        per-record path, which says which record does not decode."""
        assert self.batch is not None
        rows: list[int | None] | None = None  # per row, its body's index; None: a null value
        bodies = plain_bodies(data)
        if bodies is None:
            # Some record is null, compressed or without the header: unframed one by one.
            found: list[bytes] = []
            rows = []
            for payload in data.to_pylist():
                try:
                    body = None if payload is None else unframe(payload).body
                except WireError:
                    if self.without_header != PASS:
                        return None
                    body = None
                rows.append(None if body is None else len(found))
                if body is not None:
                    found.append(body)
            bodies = pa.array(found, type=pa.binary())
        values = self.batch.decode(bodies)
        if values is None:
            return None
        if rows is not None and len(rows) != len(bodies):
            values = values.take(pa.array(rows, type=pa.int64()))
        errors = pa.nulls(len(data), pa.string()) if self.on_error == COLUMN else None
        return Decoded(values, errors)

    def _one(self, payload: bytes | None, index: int, where: Callable[[int], str]) -> tuple[Any, str | None]:
        if payload is None:
            return None, None
        try:
            framed = unframe(payload)
        except WireError as exc:
            if self.without_header == PASS:
                return None, None
            return self._failed(f"no Glue Schema Registry header ({exc})", index, where)
        try:
            writer = self._writer(framed.schema_version)
        except SchemaVersionNotFoundError as exc:  # the header names a version the registry lacks
            return self._failed(str(exc), index, where)
        except StreamAccessError:
            # Throttling, a broken connection, a credentials refresh: not the record's fault. Turning it
            # into a null value with a valueError would keep a record that decodes fine as an error
            # for good; the task fails instead (botocore has retried) and Spark retries it.
            raise
        except Exception as exc:  # a registered definition that does not parse: the record's writer's
            return self._failed(str(exc), index, where)
        try:
            return self.codec.decode(framed.body, writer), None
        except Exception as exc:  # fastavro raises many kinds for a body or version it cannot read
            text = f"written with schema version {framed.schema_version}, it does not decode into the reader's schema ({type(exc).__name__}: {exc})"
            return self._failed(text, index, where)

    def _failed(self, text: str, index: int, where: Callable[[int], str]) -> tuple[Any, str]:
        if self.on_error == COLUMN:
            return None, text
        raise CorruptRecordError(
            f"{where(index)}: {text}. Set onDecodeError=column to keep such records as raw bytes with the "
            "reason in valueError."
        )
