"""The format "kinesis": picks the source's reader or the sink's writer, nothing else."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from .aws.process_tuning import prepare_planner_process
from .errors import surfaced
from .source.options import SourceConfig, parse_options, refuse_fan_out_for_batch_reads
from .source.readers import KinesisBatchReader, stream_reader


def _with_values(config: SourceConfig, schema: Any) -> SourceConfig:
    """The value format's look-ups made again (glue: the reader's schema), and the rows' schema
    checked against the one `.load()` gave."""
    from .source.value_columns import check_same, with_reader_schema

    config = with_reader_schema(config)
    check_same(config, schema)
    return config


class KinesisDataSource(DataSource):
    """`spark.readStream/read.format("kinesis")` and `df.writeStream/write.format("kinesis")`.

    Options, the streams and a given metadataPath are checked when Spark asks for the schema (at
    `.load()`), so a typo, a missing stream or absent credentials fail there with a short error,
    before any query starts (source/driver/preflight.py). See docs/options.md (source) and docs/sink.md (sink).
    """

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    @surfaced
    def schema(self) -> Any:
        config = parse_options(self._batch_options(), streaming=False)
        # (imported here: boto3 loads when a read is defined, not when Spark imports the package)
        from .source.driver.preflight import check_at_load

        check_at_load(config)
        from .source.value_columns import spark_schema, with_reader_schema

        return spark_schema(with_reader_schema(config))

    def _batch_options(self) -> dict[str, str]:
        options = dict(self.options)
        if not any(k.lower() == "startingposition" for k in options):
            options["startingPosition"] = "TRIM_HORIZON"  # a backfill reads the whole retention by default
        return options

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        # In the query's planner process, which Spark starts afresh for every query: its first step
        # of the connector's, before botocore loads (see process_tuning).
        prepare_planner_process()
        return stream_reader(lambda: _with_values(parse_options(self.options, streaming=True), schema))

    @surfaced
    def reader(self, schema: Any) -> DataSourceReader:
        config = parse_options(self._batch_options(), streaming=False)
        refuse_fan_out_for_batch_reads(config)
        return KinesisBatchReader(_with_values(config, schema))

    # The sink's modules load only when a query writes: every query starts a fresh planner process
    # (Spark's streaming source runner), and what it imports is paid again on every start.
    @surfaced
    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from .sink.options import parse_sink_options
        from .sink.writers import KinesisBatchWriter, prepare

        return KinesisBatchWriter(prepare(schema, parse_sink_options(self.options)))

    @surfaced
    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from .sink.options import parse_sink_options
        from .sink.writers import prepare, stream_writer

        return stream_writer(prepare(schema, parse_sink_options(self.options)))


class DefaultSource(KinesisDataSource):
    """The same source under the name "pyspark_kinesis": what Spark registers by itself, without
    `register()`, wherever the package is installed beside the driver (it looks for a `DefaultSource`
    in every module named `pyspark_*`).

    Not "kinesis": a platform may ship a JVM source by that name (Databricks Runtime does), and Spark
    resolves a format to the JVM source first, so a Python source registered statically as "kinesis"
    would be shadowed there without a word. "pyspark_kinesis" is ours alone.
    """

    @classmethod
    def name(cls) -> str:
        return "pyspark_kinesis"
