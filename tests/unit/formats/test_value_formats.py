"""The value-format seam (src/pyspark_kinesis/formats): a third format is one module-sized class and its
registration, and the source and sink then read and write with it without a line of their own, its own
options included. The toy format here reads a record's payload as text into a column `text` and writes
a row's `text` column as a payload, with two options of its own: `textEncoding` (utf-8 | latin-1) and
`textStrip` (trim whitespace on read); raw and glue are the built-in formats (glue against a registry:
tests/integration)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pytest
from pyspark.sql.types import DataType, StringType, StructField, StructType

from pyspark_kinesis import formats
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.config.declared import BOOL, Option
from pyspark_kinesis.config.value_format import ValueFormat
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.sink import writers
from pyspark_kinesis.sink.options import parse_sink_options
from pyspark_kinesis.source import value_columns
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.schema import SPARK_SCHEMA

ENCODING = Option(
    "textEncoding", "text: the payload's encoding.", default="utf-8", choices=("utf-8", "latin-1")
)
STRIP = Option("textStrip", "text: trim whitespace around read text.", default=False, kind=BOOL)


@dataclass(frozen=True)
class TextSettings:
    encoding: str = "utf-8"
    strip: bool = False


class TextEncoder:
    def __init__(self, encoding: str) -> None:
        self.version_id = encoding

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise formats.ValueDoesNotFit(f"{value!r} is not text")
        return value.encode(self.version_id)


class TextCodec:
    """The toy format: payloads are text."""

    payload_column = "text"
    read_options = (ENCODING, STRIP)
    write_options = (ENCODING,)
    looked_up = 0

    def settings(self, opts: Mapping[str, str], *, writing: bool) -> TextSettings:
        return TextSettings(ENCODING.parse(opts), False if writing else STRIP.parse(opts))

    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat:
        TextCodec.looked_up += 1
        return value

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]:
        assert "data" in taken and "shardid" in taken  # the Kinesis columns, for clashes
        return [StructField("text", StringType())]

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]:
        text = [b.decode(value.settings.encoding) for b in batch.column("data").to_pylist()]
        return [pa.array([t.strip() for t in text] if value.settings.strip else text, pa.string())]

    def check_columns(self, fields: dict[str, DataType]) -> None:
        if not isinstance(fields.get("text"), StringType):
            raise OptionError("valueFormat", "text writes column 'text' (a string)", "Select it AS text.")

    def for_writing(self, value: ValueFormat, aws: AwsSettings, schema: StructType) -> ValueFormat:
        return value

    def encoder(self, value: ValueFormat) -> TextEncoder:
        return TextEncoder(value.settings.encoding)


@pytest.fixture
def text_format(monkeypatch):
    """The toy format registered for one test only."""
    monkeypatch.setattr(formats, "_CODECS", dict(formats._CODECS))
    formats.register_format("Text", TextCodec())


def kinesis_batch(payloads: list[bytes]) -> pa.RecordBatch:
    n = len(payloads)
    return pa.record_batch(
        {
            "data": pa.array(payloads, pa.binary()),
            "streamName": ["s"] * n,
            "shardId": ["shardId-000000000000"] * n,
            "partitionKey": ["k"] * n,
            "sequenceNumber": [str(i) for i in range(n)],
            "subSequenceNumber": pa.array([0] * n, pa.int64()),
            "approximateArrivalTimestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            "streamArn": ["arn:aws:kinesis:us-east-1:123456789012:stream/s"] * n,
        }
    )


def test_a_registered_format_is_read_with_its_columns_after_the_kinesis_ones(text_format):
    config = parse_options({"streamName": "s", "region": "us-east-1", "valueFormat": "text"}, streaming=False)
    assert config.value.format == "text"
    config = value_columns.with_reader_schema(config)
    assert TextCodec.looked_up >= 1
    schema = value_columns.spark_schema(config)
    assert isinstance(schema, StructType)
    assert [f.name for f in schema.fields] == [*(f.name for f in value_columns.BASE.fields), "text"]
    rows = value_columns.with_values(kinesis_batch([b"hello", "h\u00e9".encode()]), config)
    assert rows.column("text").to_pylist() == ["hello", "h\u00e9"]
    assert rows.schema.names == schema.names


def test_a_registered_format_writes_its_payload_column_through_its_encoder(text_format):
    config = parse_sink_options({"streamName": "s", "region": "us-east-1", "valueFormat": "text"})
    good = StructType([StructField("text", StringType()), StructField("partitionKey", StringType())])
    writers.check_schema(good, config)
    with pytest.raises(OptionError, match="'text'"):
        writers.check_schema(StructType([StructField("data", StringType())]), config)
    rows = pa.record_batch({"text": ["a\u00e9", "b"], "partitionKey": ["k1", "k2"]})
    entries = [entry for _row, entry in writers._RowEntries(config, 0).of(iter([rows]))]
    assert [(e.data, e.partition_key) for e in entries] == [("a\u00e9".encode(), "k1"), (b"b", "k2")]


def test_raw_adds_nothing_and_an_unknown_format_is_an_option_error():
    raw = parse_options({"streamName": "s", "region": "us-east-1"}, streaming=False)
    assert value_columns.spark_schema(raw) == SPARK_SCHEMA
    batch = kinesis_batch([b"x"])
    assert value_columns.with_values(batch, raw) is batch
    with pytest.raises(OptionError, match="valueFormat"):
        parse_options({"streamName": "s", "region": "us-east-1", "valueFormat": "text"}, streaming=False)


def test_the_glue_options_belong_to_glue_only(text_format):
    with pytest.raises(OptionError, match=r"schemaName.*glue only"):
        parse_options(
            {"streamName": "s", "region": "us-east-1", "valueFormat": "text", "schemaName": "x"},
            streaming=False,
        )


def test_kinesis_columns_keeps_the_named_ones_in_the_rows_order_before_the_formats(text_format):
    """kinesisColumns: the rows carry only the Kinesis columns named (Spark does not prune a Python
    source's columns), in the rows' order whatever order they were named in; a format's columns come
    after, decoded from the whole batch (the toy format reads `data` even when the rows leave it out)."""
    options = {"streamName": "s", "region": "us-east-1", "kinesisColumns": " partitionKey, DATA "}
    raw = parse_options(options, streaming=False)
    assert raw.kinesis_columns == ("data", "partitionKey")
    schema = value_columns.spark_schema(raw)
    assert isinstance(schema, StructType) and schema.names == ["data", "partitionKey"]
    rows = value_columns.with_values(kinesis_batch([b"a", b"b"]), raw)
    assert rows.schema.names == ["data", "partitionKey"] and rows.column("data").to_pylist() == [b"a", b"b"]
    text = parse_options({**options, "kinesisColumns": "shardId", "valueFormat": "text"}, streaming=False)
    assert value_columns.spark_schema(text).names == ["shardId", "text"]
    rows = value_columns.with_values(kinesis_batch([b"hi"]), text)
    assert rows.to_pylist() == [{"shardId": "shardId-000000000000", "text": "hi"}]


def test_kinesis_columns_names_only_kinesis_columns():
    with pytest.raises(OptionError, match=r"'kinesisColumns'.*'value' is not a Kinesis column"):
        parse_options(
            {"streamName": "s", "region": "us-east-1", "kinesisColumns": "data,value"}, streaming=False
        )
    every = parse_options({"streamName": "s", "region": "us-east-1", "kinesisColumns": " "}, streaming=False)
    assert value_columns.spark_schema(every) == SPARK_SCHEMA


def test_a_format_registered_before_any_use_leaves_raw_and_glue_there(monkeypatch):
    monkeypatch.setattr(formats, "_CODECS", {})
    formats.register_format("text", TextCodec())
    assert formats.codec_of(ValueFormat()).payload_column == "data"  # raw
    assert formats.codec_of(ValueFormat(format="glue")).payload_column == "value"
    assert isinstance(formats.codec_of(ValueFormat(format="text")), TextCodec)


def test_a_registered_formats_own_options_are_known_parsed_documented_and_its_own(text_format):
    """A format's options need no line outside its module: the source and the sink take them (and
    only with their format), its settings travel in the config, `pyspark-kinesis options` lists them."""
    from pyspark_kinesis.sink.options import sink_options
    from pyspark_kinesis.source.options import known_options

    assert {"textEncoding", "textStrip"} <= set(known_options()) and "textEncoding" in sink_options()
    assert "textStrip" not in sink_options()  # (a read-only option of the format)
    options = {"streamName": "s", "region": "us-east-1", "valueFormat": "text"}
    config = parse_options({**options, "TEXTencoding": "LATIN-1", "textStrip": "true"}, streaming=False)
    assert config.value == ValueFormat("text", TextSettings("latin-1", True))
    rows = value_columns.with_values(kinesis_batch([" caf\xe9 ".encode("latin-1")]), config)
    assert rows.column("text").to_pylist() == ["caf\xe9"]
    sink = parse_sink_options({**options, "textEncoding": "latin-1"})
    entries = writers._RowEntries(sink, 0).of(
        iter([pa.record_batch({"text": ["\xe9"], "partitionKey": ["k"]})])
    )
    assert [entry.data for _row, entry in entries] == [b"\xe9"]
    with pytest.raises(OptionError, match=r"'textEncoding'.*'utf-16' is not utf-8 or latin-1"):
        parse_options({**options, "textEncoding": "utf-16"}, streaming=False)
    with pytest.raises(OptionError, match=r"'textStrip'.*applies to valueFormat=text only"):
        parse_options({"streamName": "s", "region": "us-east-1", "textStrip": "true"}, streaming=False)
    with pytest.raises(OptionError, match=r"'textStrip': this option is not known to the kinesis sink"):
        parse_sink_options({**options, "textStrip": "true"})


def test_the_cli_lists_a_registered_formats_options(text_format):
    pytest.importorskip("typer")
    from typer.testing import CliRunner

    from pyspark_kinesis.cli.app import app

    listed = CliRunner().invoke(app, ["options", "--markdown"], env={"COLUMNS": ""})
    assert listed.exit_code == 0, listed.output
    assert "| `textEncoding` | utf-8 | text: the payload's encoding. |" in listed.stdout
