"""The source's columns when records are Glue Schema Registry framed (`valueFormat=glue`): the reader's
schema looked up once when the query is planned, the Spark schema it makes, and each batch's records
decoded into it on the executors (`values.glue_values`).

The lookup happens where Spark asks for the schema (`.load()`) and again where it makes the reader; the
two must agree (a "latest version" registered in between would give the tasks another shape than the
plan), or the query fails with a clear error instead of producing rows Spark would reject. The reader's
definition then travels to the executors inside the config: every task decodes into one version.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..aws import glue_registry
from ..config.value_format import COLUMN, FLATTEN, ValueFormat
from ..errors import OptionError
from ..spark_features import arrow_type
from ..values import json_types, protobuf_types
from ..values.avro_types import UnsupportedSchema, parse, spark_type
from ..values.glue_values import GlueValues
from .options import SourceConfig
from .schema import SPARK_SCHEMA

BASE = StructType(
    [
        StructField("data", BinaryType()),
        StructField("streamName", StringType()),
        StructField("shardId", StringType()),
        StructField("partitionKey", StringType()),
        StructField("sequenceNumber", StringType()),
        StructField("subSequenceNumber", LongType()),
        StructField("approximateArrivalTimestamp", TimestampType()),
        StructField("streamArn", StringType()),
    ]
)


def with_reader_schema(config: SourceConfig) -> SourceConfig:
    """The config with the reader's schema looked up (valueFormat=glue); unchanged otherwise."""
    value = config.value
    if not value.decoded or value.reader_definition is not None:
        return config
    ref = glue_registry.RegistryRef(value.version_id, value.registry, value.schema, value.version_number)
    found = glue_registry.reader_schema(config.streams[0].aws, value.endpoint_url, ref)
    option = "schemaVersionId" if value.version_id else "schemaName"
    if found.data_format not in ("AVRO", "JSON", "PROTOBUF"):
        raise OptionError(
            option,
            f"{ref.describe()} is a {found.data_format} schema; the connector decodes AVRO, JSON and PROTOBUF",
            "Read the records with valueFormat=raw and decode data yourself.",
        )
    if value.message is not None and found.data_format != "PROTOBUF":
        raise OptionError(
            "protobufMessageName",
            f"applies to Protobuf schemas, and {ref.describe()} is {found.data_format}",
            "Remove it.",
        )
    resolved = replace(value, reader_definition=found.definition, data_format=found.data_format)
    try:
        _reader_type(resolved)
    except UnsupportedSchema as exc:
        raise OptionError(
            option, f"{ref.describe()}: {exc}", "Change the schema, or read with valueFormat=raw."
        ) from None
    return replace(config, value=resolved)


def _reader_type(value: ValueFormat) -> DataType:
    assert value.reader_definition is not None, "with_reader_schema() first"
    if value.data_format == "JSON":
        return json_types.spark_type(json_types.parse(value.reader_definition))
    if value.data_format == "PROTOBUF":
        compiled = protobuf_types.compile_proto(value.reader_definition)
        return protobuf_types.spark_type(compiled.message(value.message))
    return spark_type(parse(value.reader_definition))


def spark_schema(config: SourceConfig) -> StructType | str:
    """What the source's rows look like: the Kinesis columns, then the decoded value."""
    return _schema_of(config.value)


def _schema_of(value: ValueFormat) -> StructType | str:
    if not value.decoded:
        return SPARK_SCHEMA
    decoded = _reader_type(value)
    fields = list(BASE.fields)
    if value.columns == FLATTEN and isinstance(decoded, StructType):
        taken = {f.name.lower() for f in fields} | {"valueerror"}
        clash = [f.name for f in decoded.fields if f.name.lower() in taken]
        if clash:
            raise OptionError(
                "valueColumns",
                f"flatten: the record's field {clash[0]} has the name of a Kinesis column",
                "Use valueColumns=struct (the record in one column `value`).",
            )
        fields += decoded.fields
    else:
        fields.append(StructField("value", decoded))
    if value.on_error == COLUMN:
        fields.append(StructField("valueError", StringType()))
    return StructType(fields)


def check_same(config: SourceConfig, schema: Any) -> None:
    """The schema Spark planned with (from `.load()`) is the one the reader's lookup gives now."""
    if not config.value.decoded or not isinstance(schema, StructType):
        return
    now = spark_schema(config)
    if isinstance(now, StructType) and now != schema:
        raise OptionError(
            "schemaVersionNumber",
            "the latest version of the schema changed between .load() and the query's start",
            "Start the query again (it plans with the new version), or pin schemaVersionNumber.",
        )


@functools.lru_cache(maxsize=8)
def _decoder(value: ValueFormat, settings: Any) -> GlueValues:
    """One decoder per reader schema and executor process (writer versions cached inside)."""
    assert value.reader_definition is not None
    return GlueValues(
        value.reader_definition,
        lambda version: glue_registry.schema_version(settings, value.endpoint_url, version).definition,
        value.on_error,
        value.without_header,
        value.data_format,
        value.message,
    )


def with_values(batch: pa.RecordBatch, config: SourceConfig) -> pa.RecordBatch:
    """A batch of Kinesis columns with the decoded value columns added, as `spark_schema` declares."""
    value = config.value
    decoder = _decoder(value, config.streams[0].aws)
    names, shards, seqs = (batch.column(n) for n in ("streamName", "shardId", "sequenceNumber"))

    def where(i: int) -> str:
        return f"Kinesis stream '{names[i]}', shard {shards[i]}, sequence number {seqs[i]}"

    decoded = decoder.decode(batch.column("data"), where)
    arrays = list(batch.columns)
    values = decoded.values
    if value.columns == FLATTEN and isinstance(values, pa.StructArray):
        arrays += values.flatten()
    else:
        arrays.append(values)
    if decoded.errors is not None:
        arrays.append(decoded.errors)
    return pa.RecordBatch.from_arrays(arrays, schema=_arrow_schema(value))


@functools.lru_cache(maxsize=8)
def _arrow_schema(value: ValueFormat) -> pa.Schema:
    """The Arrow schema of the rows, as Spark converts `spark_schema` (once per process, not per batch)."""
    schema = _schema_of(value)
    assert isinstance(schema, StructType)
    return pa.schema([pa.field(f.name, arrow_type(f.dataType)) for f in schema.fields])
