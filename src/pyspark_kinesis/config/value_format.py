"""The `valueFormat` option and the parsed value format: its name, and the frozen settings its format
(`formats`) parsed from the format's own options. Nothing here knows a format's options: a format
declares them beside its code, so a new format is one module and its registration (`formats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError
from .declared import Option

RAW = "raw"

READ_FORMAT = Option(
    "valueFormat",
    "raw (the payload in data) | glue (AWS Glue Schema Registry framed records decoded into typed columns) "
    "| dynamodb (a DynamoDB table's changes, from Kinesis Data Streams for DynamoDB: tableName, eventName, "
    "keys, newImage, oldImage as exact JSON, timeToLive, sizeBytes, eventId, valueError).",
    shown="raw",
)
WRITE_FORMAT = Option(
    "valueFormat",
    "raw (the payload from column data) | glue (column value, a struct, encoded with a registered "
    "Avro, JSON Schema or Protobuf version and framed as the AWS Glue Schema Registry's serializers frame records).",
    shown="raw",
)


@dataclass(frozen=True)
class ValueFormat:
    """The payload's format: its `valueFormat` name and what the format parsed from its own options
    (and, once looked up, learned: glue's schema version). Frozen and hashable: it travels to the
    executors inside the config and keys per-process caches there."""

    format: str = RAW
    settings: Any = None  # the format's own frozen value (None: a format without options)


def choice(opts: Mapping[str, str], name: str, allowed: tuple[str, ...], upper: bool = False) -> str:
    """The option's value among `allowed` (the first by default), in the case `allowed` is written in."""
    value = (opts.get(name) or allowed[0]).strip()
    value = value.upper() if upper else value.lower()
    if value not in allowed:
        raise OptionError(
            name, f"'{value}' is not one of {', '.join(allowed)}", f"Use {' or '.join(allowed)}."
        )
    return value
