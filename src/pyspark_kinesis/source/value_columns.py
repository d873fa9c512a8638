"""The source's rows: the Kinesis columns `kinesisColumns` keeps, then the value format's (`formats`).
Here: the Spark schema Spark plans with, the check that the reader Spark makes agrees with it, and
each batch's columns on the executors (the format decodes from the whole batch first, then the rows
keep what the options name: Spark does not push a query's column pruning to Python sources, and each
column costs the JVM a conversion per row).

The format's look-ups (glue: the reader's schema version) happen where Spark asks for the schema
(`.load()`) and again where it makes the reader; the two schemas must agree (a "latest version"
registered in between would give the tasks another shape than the plan), or the query fails with a
clear error instead of producing rows Spark would reject.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..config.value_format import ValueFormat
from ..errors import OptionError
from ..formats import codec_of
from ..spark_features import arrow_type
from .options import SourceConfig
from .schema import KINESIS_COLUMNS, SPARK_SCHEMA

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
_TAKEN = frozenset(f.name.lower() for f in BASE.fields)


def with_reader_schema(config: SourceConfig) -> SourceConfig:
    """The config with what its value format must know before rows have a shape (glue: the reader's
    schema version, looked up once)."""
    value = codec_of(config.value).for_reading(config.value, config.streams[0].aws)
    return config if value is config.value else replace(config, value=value)


def spark_schema(config: SourceConfig) -> StructType | str:
    """What the source's rows look like: the Kinesis columns kept, then the value format's."""
    return _schema_of(config.value, config.kinesis_columns)


def _schema_of(value: ValueFormat, kept: tuple[str, ...]) -> StructType | str:
    added = codec_of(value).added_fields(value, _TAKEN)
    if not added and kept == KINESIS_COLUMNS:
        return SPARK_SCHEMA
    return StructType([*(f for f in BASE.fields if f.name in kept), *added])


def check_same(config: SourceConfig, schema: Any) -> None:
    """The schema Spark planned with (from `.load()`) is the one the reader's look-up gives now."""
    if not isinstance(schema, StructType):
        return
    now = spark_schema(config)
    if isinstance(now, StructType) and now != schema:
        raise OptionError(
            "schemaVersionNumber",
            "the latest version of the schema changed between .load() and the query's start",
            "Start the query again (it plans with the new version), or pin schemaVersionNumber.",
        )


def with_values(batch: pa.RecordBatch, config: SourceConfig) -> pa.RecordBatch:
    """A batch of all Kinesis columns as the rows are declared (`spark_schema`): the Kinesis columns
    kept, then the value format's columns."""
    value, kept = config.value, config.kinesis_columns
    added = codec_of(value).decode(value, config.streams[0].aws, batch)
    if not added and kept == KINESIS_COLUMNS:
        return batch
    columns = [batch.column(name) for name in kept]
    return pa.RecordBatch.from_arrays([*columns, *added], schema=_arrow_schema(value, kept))


@functools.lru_cache(maxsize=8)
def _arrow_schema(value: ValueFormat, kept: tuple[str, ...]) -> pa.Schema:
    """The Arrow schema of the rows, as Spark converts `spark_schema` (once per process, not per batch)."""
    schema = _schema_of(value, kept)
    assert isinstance(schema, StructType)
    return pa.schema([pa.field(f.name, arrow_type(f.dataType)) for f in schema.fields])
