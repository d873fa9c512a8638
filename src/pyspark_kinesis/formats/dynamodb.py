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

import functools
from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.types import BooleanType, DataType, LongType, StringType, StructField, StructType

from ..config.aws_settings import AwsSettings
from ..config.declared import Option
from ..config.value_format import ValueFormat
from ..errors import OptionError
from ..spark_features import arrow_type
from ..values.dynamodb_images import change_row, fitted, item_json, item_plain
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


IMAGES = ("newImage", "oldImage")


def _typed(image: StructType, batch: pa.RecordBatch) -> list[pa.Array]:
    """The added columns with the images as structs of `image` (see `values.dynamodb_images.fitted`)."""
    payloads = batch.column("data").to_pylist()
    arns = (
        batch.column("streamArn").to_pylist() if "streamArn" in batch.schema.names else [None] * len(payloads)
    )
    columns: list[list[Any]] = [[] for _ in FIELDS]
    for payload, arn in zip(payloads, arns, strict=True):
        row, error = row_of(payload, table_of(arn))
        if row is not None:
            try:
                images = [
                    None if typed is None else fitted(item_plain(typed), image, name)
                    for typed, name in zip(_typed_images(payload), IMAGES, strict=True)
                ]
            except ValueError as exc:
                row, error = None, f"does not fit imageSchema: {exc}"
            else:
                row = (*row[:3], *images, *row[5:])
        for column, cell in zip(columns, (*(row or (None,) * len(_TYPES)), error), strict=True):
            column.append(cell)
    kinds = (*_TYPES[:3], arrow_type(image), arrow_type(image), *_TYPES[5:], pa.string())
    return [pa.array(column, type=kind) for column, kind in zip(columns, kinds, strict=True)]


def _typed_images(payload: bytes) -> tuple[Any, Any]:
    """(NewImage, OldImage) in DynamoDB's typed form, from either kind of payload (`row_of` read it
    already: it is a change)."""
    parsed = orjson.loads(payload)
    if isinstance(parsed, list):
        return parsed[2], parsed[3]
    body = parsed["dynamodb"]
    return body.get("NewImage"), body.get("OldImage")


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


IMAGE_SCHEMA = Option(
    "imageSchema",
    "dynamodb: newImage and oldImage as typed structs of this Spark schema, given as JSON "
    "(StructType.json(), e.g. of StructType([StructField('id', StringType()), StructField('total', "
    "DecimalType(38, 2))])) instead of JSON text; a number is fitted exactly or the change's valueError says why.",
)


@functools.lru_cache(maxsize=8)
def image_type(text: str) -> StructType:
    """imageSchema's struct (parsed where it is used: a JSON schema needs no JVM, unlike DDL)."""
    try:
        parsed = StructType.fromJson(orjson.loads(text))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise OptionError(
            "imageSchema",
            f"is not a Spark struct schema in JSON ({str(exc)[:120]})",
            "Give StructType([...]).json(), e.g. from df.schema.json().",
        ) from None
    return parsed


class DynamoChangeCodec:
    """A table's changes into columns; nothing to look up, nothing to write."""

    payload_column = "data"
    read_options: tuple[Option, ...] = (IMAGE_SCHEMA,)
    write_options: tuple[Option, ...] = ()

    def settings(self, opts: Mapping[str, str], *, writing: bool) -> str | None:
        """The image schema's JSON text (checked here, at `.load()`), or None: images as JSON text."""
        text = (opts.get("imageSchema") or "").strip()
        if writing or not text:
            return None
        image_type(text)
        return text

    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat:
        return value

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]:
        if value.settings is None:
            return list(FIELDS)
        typed = image_type(value.settings)
        return [StructField(f.name, typed) if f.name in IMAGES else f for f in FIELDS]

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]:
        """The added columns of a batch of Kinesis columns, in `FIELDS` order."""
        if value.settings is not None:
            return _typed(image_type(value.settings), batch)
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
