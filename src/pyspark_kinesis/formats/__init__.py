"""Value formats: what a record's payload becomes on read, and where a row's payload comes from on write.

The connector moves bytes; a format is the one piece that knows what they mean, as in Flink's and
Spark's Kafka connectors. The source and the sink ask the format of the query's `valueFormat`
(`codec_of`) and hold no format code of their own:

- reading: what it must know before rows have a shape (`for_reading`, at `.load()` and again where
  Spark makes the reader: glue looks up the reader's schema version, which then travels to the
  executors inside the config, so every task decodes into one version), the Spark fields it adds
  after the Kinesis columns (`added_fields`; none: the rows are the Kinesis columns), and on the
  executors those fields' columns for a batch of Kinesis columns (`decode`);
- writing: the DataFrame column a row's value is in (`payload_column`) and its check at query start
  (`check_columns`), what it must know before a task writes (`for_writing`, with the DataFrame's
  schema), and the encoder of a row's value into a payload (`encoder`; None: the column holds the
  payload's bytes or text).

`raw` (`formats.raw`) and `glue` (`formats.glue`, the AWS Glue Schema Registry) are built in;
`register_format` adds another under its `valueFormat` name.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.types import DataType, StructField, StructType

from ..config import value_format
from ..config.aws_settings import AwsSettings
from ..config.value_format import SchemaToWrite, ValueFormat
from ..values import ValueDoesNotFit

__all__ = ["ValueCodec", "ValueDoesNotFit", "ValueEncoder", "codec_of", "register_format"]


class ValueEncoder(Protocol):
    """Encodes one row's value into a record's payload; raises `ValueDoesNotFit` for a value it cannot."""

    version_id: str  # what values are encoded with, as an error names it (glue: the schema version)

    def encode(self, value: Any) -> bytes: ...


class ValueCodec(Protocol):
    """One value format (see the module docstring)."""

    payload_column: str

    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat: ...

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]: ...

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]: ...

    def check_columns(self, fields: dict[str, DataType]) -> None: ...

    def for_writing(
        self, value: ValueFormat, aws: AwsSettings, schema: StructType, wanted: SchemaToWrite | None
    ) -> ValueFormat: ...

    def encoder(self, value: ValueFormat) -> ValueEncoder | None: ...


_CODECS: dict[str, ValueCodec] = {}


def register_format(name: str, codec: ValueCodec) -> None:
    """Make `codec` the format of `valueFormat=<name>` (the name in lower case)."""
    name = name.lower()
    _CODECS[name] = codec
    if name not in value_format.FORMAT_NAMES:
        value_format.FORMAT_NAMES.append(name)


def codec_of(value: ValueFormat) -> ValueCodec:
    """The format `value.format` names."""
    if value.format not in _CODECS:  # (a format registered first must not hide raw and glue)
        _register_built_in()
    try:
        return _CODECS[value.format]
    except KeyError:
        raise ValueError(
            f"no value format is registered as {value.format!r} (known: {sorted(_CODECS)})"
        ) from None


def _register_built_in() -> None:
    """raw and glue, on first use (glue's modules load only when a query uses it)."""
    from .glue import GlueCodec
    from .raw import RawCodec

    _CODECS.setdefault("raw", RawCodec())
    _CODECS.setdefault("glue", GlueCodec())
