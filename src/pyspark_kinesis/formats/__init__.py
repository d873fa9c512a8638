"""Value formats: what a record's payload becomes on read, and where a row's payload comes from on write.

The connector moves bytes; a format is the one piece that knows what they mean, as in Flink's and
Spark's Kafka connectors. The source and the sink ask the format of the query's `valueFormat`
(`codec_of`) and hold no format code of their own:

- options: the options it takes on read and on write (`read_options`, `write_options`, declared like
  every other option, so the unknown-option check, the docs' tables and `pyspark-kinesis options` know
  them), and its own frozen settings parsed from them (`settings`; they travel in `ValueFormat`);
- reading: what it must know before rows have a shape (`for_reading`, at `.load()` and again where
  Spark makes the reader: glue looks up the reader's schema version, which then travels to the
  executors inside the config, so every task decodes into one version), the Spark fields it adds
  after the Kinesis columns (`added_fields`; none: the rows are the Kinesis columns), and on the
  executors those fields' columns for a batch of Kinesis columns (`decode`);
- writing: the DataFrame column a row's value is in (`payload_column`) and its check at query start
  (`check_columns`), what it must know before a task writes (`for_writing`, with the DataFrame's
  schema), and the encoder of a row's value into a payload (`encoder`; None: the column holds the
  payload's bytes or text).

`raw` (`formats.raw`), `glue` (`formats.glue`, the AWS Glue Schema Registry) and `dynamodb`
(`formats.dynamodb`, a DynamoDB table's changes, read only) are built in;
`register_format` adds another under its `valueFormat` name: a new format is one module and one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.types import DataType, StructField, StructType

from ..config.aws_settings import AwsSettings
from ..config.declared import Option
from ..config.value_format import READ_FORMAT, WRITE_FORMAT, ValueFormat, choice
from ..errors import OptionError
from ..values import ValueDoesNotFit

__all__ = [
    "ValueCodec",
    "ValueDoesNotFit",
    "ValueEncoder",
    "codec_of",
    "parse_value_format",
    "register_format",
    "value_options",
]


class ValueEncoder(Protocol):
    """Encodes one row's value into a record's payload; raises `ValueDoesNotFit` for a value it cannot."""

    version_id: str  # what values are encoded with, as an error names it (glue: the schema version)

    def encode(self, value: Any) -> bytes: ...


class ValueCodec(Protocol):
    """One value format (see the module docstring)."""

    payload_column: str
    read_options: tuple[Option, ...]
    write_options: tuple[Option, ...]

    def settings(self, opts: Mapping[str, str], *, writing: bool) -> Any: ...

    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat: ...

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]: ...

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]: ...

    def check_columns(self, fields: dict[str, DataType]) -> None: ...

    def for_writing(self, value: ValueFormat, aws: AwsSettings, schema: StructType) -> ValueFormat: ...

    def encoder(self, value: ValueFormat) -> ValueEncoder | None: ...


_CODECS: dict[str, ValueCodec] = {}


def register_format(name: str, codec: ValueCodec) -> None:
    """Make `codec` the format of `valueFormat=<name>` (the name in lower case)."""
    _CODECS[name.lower()] = codec


def codec_of(value: ValueFormat) -> ValueCodec:
    """The format `value.format` names."""
    try:
        return _codecs()[value.format]
    except KeyError:
        raise ValueError(
            f"no value format is registered as {value.format!r} (known: {sorted(_CODECS)})"
        ) from None


def value_options(*, writing: bool) -> tuple[Option, ...]:
    """`valueFormat` and every registered format's own options (an option two formats share, once)."""
    declared = {o.key: o for codec in _codecs().values() for o in _own(codec, writing)}
    return (WRITE_FORMAT if writing else READ_FORMAT, *declared.values())


def parse_value_format(opts: Mapping[str, str], *, writing: bool) -> ValueFormat:
    """The format `valueFormat` names, with the settings it parses from its own options; an option of
    another format is refused (it would silently do nothing)."""
    codecs = _codecs()
    name = choice(opts, "valueFormat", tuple(codecs))
    own = {o.key for o in _own(codecs[name], writing)}
    for other, codec in codecs.items():
        foreign = [o.key for o in _own(codec, writing) if o.key in opts and o.key not in own]
        if foreign:
            raise OptionError(
                foreign[0], f"applies to valueFormat={other} only", f"Set valueFormat={other}, or remove it."
            )
    return ValueFormat(name, codecs[name].settings(opts, writing=writing))


def _own(codec: ValueCodec, writing: bool) -> tuple[Option, ...]:
    return codec.write_options if writing else codec.read_options


def _codecs() -> dict[str, ValueCodec]:
    """The registered formats, raw first (valueFormat's default), the built-in ones registered on first use
    (a format registered before must not hide them; glue's registry code loads only when a query uses
    it)."""
    if "raw" not in _CODECS or "glue" not in _CODECS or "dynamodb" not in _CODECS:
        from .dynamodb import DynamoChangeCodec
        from .glue import GlueCodec
        from .raw import RawCodec

        _CODECS.setdefault("raw", RawCodec())
        _CODECS.setdefault("glue", GlueCodec())
        _CODECS.setdefault("dynamodb", DynamoChangeCodec())
        _CODECS.update({k: _CODECS.pop(k) for k in list(_CODECS) if k != "raw"})  # raw first
    return _CODECS
