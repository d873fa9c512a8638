"""pyspark-kinesis: an exactly-once Amazon Kinesis Data Streams source for Spark Structured Streaming."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def register(spark: Any) -> None:
    """Register the 'kinesis' format with a SparkSession."""
    from .datasource import KinesisDataSource

    spark.dataSource.register(KinesisDataSource)


__all__ = ["__version__", "register"]
