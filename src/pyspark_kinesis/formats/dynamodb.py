"""`valueFormat=dynamodb`: a record is one change of a DynamoDB item, and the rows say what changed.

Two ways bring a table's changes to this connector, and both read into the same columns:
- DynamoDB Streams (`aws.dynamodb_streams`): the connector makes each stream record one payload, a JSON
  array of the change's parts in DynamoDB's typed form (`aws.dynamodb_streams.change`);
- Kinesis Data Streams for DynamoDB: the table writes each change into a Kinesis stream as a JSON
  object (`eventName`, `tableName`, `dynamodb.Keys/NewImage/OldImage/SizeBytes`, `userIdentity`).

The added columns: `tableName`, `eventName` (INSERT, MODIFY, REMOVE), `keys`, `newImage` and `oldImage`
(JSON text of plain values, every digit of a number kept: `values.dynamodb_images`; null where the
stream's view type leaves them out), `timeToLive` (the item was deleted by Time to Live), `sizeBytes`,
`eventId` and `valueError`. A record that is not a change (anyone who may put records into a Kinesis
stream can write one) gives nulls and the reason in `valueError`: it never stops the query.
Read only: the sink writes payloads, not table changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.types import BooleanType, DataType, LongType, StringType, StructField, StructType

from ..config.aws_settings import AwsSettings
from ..config.declared import Option
from ..config.value_format import ValueFormat
from ..errors import OptionError
from ..values.dynamodb_images import change_row, item_json
from . import ValueEncoder

FIELDS = (
    StructField("tableName", StringType()),
    StructField("eventName", StringType()),
    StructField("keys", StringType()),
    StructField("newImage", StringType()),
    StructField("oldImage", StringType()),
    StructField("timeToLive", BooleanType()),
    StructField("sizeBytes", LongType()),
    StructField("eventId", StringType()),
    StructField("valueError", StringType()),
)
_TYPES = (
    pa.string(),
    pa.string(),
    pa.string(),
    pa.string(),
    pa.string(),
    pa.bool_(),
    pa.int64(),
    pa.string(),
)
TTL_PRINCIPAL = "dynamodb.amazonaws.com"
Row = tuple[Any, ...]


def table_of(stream_arn: str | None) -> str | None:
    """The table a DynamoDB stream ARN names (arn:aws:dynamodb:REGION:ACCOUNT:table/T/stream/LABEL)."""
    if not stream_arn or ":dynamodb:" not in stream_arn or "/stream/" not in stream_arn:
        return None
    return stream_arn.split(":table/", 1)[-1].split("/stream/", 1)[0]


def _kinesis_record(document: dict[str, Any]) -> Row:
    """A change as Kinesis Data Streams for DynamoDB writes it (one JSON object per record)."""
    body = document.get("dynamodb")
    if not isinstance(body, dict) or not isinstance(document.get("eventName"), str):
        raise ValueError("a JSON object without eventName and dynamodb: not a DynamoDB change")
    identity = document.get("userIdentity") or {}
    by_ttl = identity.get("type", identity.get("Type")) == "Service" and TTL_PRINCIPAL in (
        identity.get("principalId"),
        identity.get("PrincipalId"),
    )
    size = body.get("SizeBytes")
    return (
        document.get("tableName"),
        document["eventName"],
        item_json(body.get("Keys")),
        item_json(body.get("NewImage")),
        item_json(body.get("OldImage")),
        bool(by_ttl),
        int(size) if isinstance(size, int) else None,
        document.get("eventID"),
    )


def row_of(payload: bytes | None, table: str | None) -> tuple[Row | None, str | None]:
    """(the change's columns but valueError, None) or (None, why the payload is not a change)."""
    if payload is None:
        return None, "no payload"
    try:
        if payload[:1] == b"[":
            name, keys, new, old, by_ttl, size, event_id = change_row(payload)
            return (table, name, keys, new, old, by_ttl, size, event_id), None
        document = orjson.loads(payload)
        if not isinstance(document, dict):
            raise ValueError("not a DynamoDB change")
        return _kinesis_record(document), None
    except (ValueError, TypeError, orjson.JSONDecodeError) as exc:
        return None, f"not a DynamoDB change: {str(exc)[:200]}"


class DynamoChangeCodec:
    """A table's changes into columns; nothing to look up, nothing to write."""

    payload_column = "data"
    read_options: tuple[Option, ...] = ()
    write_options: tuple[Option, ...] = ()

    def settings(self, opts: Mapping[str, str], *, writing: bool) -> None:
        return None

    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat:
        return value

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]:
        return list(FIELDS)

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]:
        """The added columns of a batch of Kinesis columns, in `FIELDS` order."""
        payloads = batch.column("data").to_pylist()
        arns = (
            batch.column("streamArn").to_pylist()
            if "streamArn" in batch.schema.names
            else [None] * len(payloads)
        )
        columns: list[list[Any]] = [[] for _ in FIELDS]
        tables: dict[str | None, str | None] = {}
        for payload, arn in zip(payloads, arns, strict=True):
            table = tables[arn] if arn in tables else tables.setdefault(arn, table_of(arn))
            row, error = row_of(payload, table)
            for column, cell in zip(columns, (*(row or (None,) * len(_TYPES)), error), strict=True):
                column.append(cell)
        return [
            pa.array(column, type=kind) for column, kind in zip(columns, (*_TYPES, pa.string()), strict=True)
        ]

    def check_columns(self, fields: dict[str, DataType]) -> None:
        raise OptionError(
            "valueFormat",
            "dynamodb is read only: the sink writes payloads, not a table's changes",
            "Write with valueFormat=raw (or glue).",
        )

    def for_writing(self, value: ValueFormat, aws: AwsSettings, schema: StructType) -> ValueFormat:
        raise AssertionError("refused by check_columns")  # pragma: no cover

    def encoder(self, value: ValueFormat) -> ValueEncoder | None:
        raise AssertionError("refused by check_columns")  # pragma: no cover
