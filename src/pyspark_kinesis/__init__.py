"""pyspark-kinesis: an exactly-once Amazon Kinesis Data Streams source and sink for Spark Structured Streaming.

Public API: `register` (the format "kinesis"), `KinesisDataSource`, the errors the connector raises,
and the `assign` module (shard-to-task assigners, usable without Spark). Everything under `source`,
`sink`, `config`, `aws` and `tools` is internal and may change between versions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    CheckpointMismatchError,
    DataLossError,
    KinesisConnectorError,
    OptionError,
    SinkWriteError,
    StreamAccessError,
)

if TYPE_CHECKING:
    from .datasource import KinesisDataSource

__version__ = "0.1.0"

__all__ = [
    # registering the format "kinesis"
    "KinesisDataSource",
    "register",
    # errors
    "CheckpointMismatchError",
    "DataLossError",
    "KinesisConnectorError",
    "OptionError",
    "SinkWriteError",
    "StreamAccessError",
    # version
    "__version__",
]


def register(spark: Any) -> None:
    """Register the format "kinesis" with a SparkSession.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session whose ``readStream``/``read``/``writeStream``/``write`` should know the format.

    Examples
    --------
    >>> import pyspark_kinesis
    >>> pyspark_kinesis.register(spark)  # doctest: +SKIP
    >>> df = spark.readStream.format("kinesis").option("streamName", "orders").load()  # doctest: +SKIP
    """
    from .datasource import KinesisDataSource

    spark.dataSource.register(KinesisDataSource)


def __getattr__(name: str) -> Any:
    # The data source class pulls in pyspark: loaded when asked for, so that `import pyspark_kinesis`
    # (the CLI, the assigners) stays light.
    if name == "KinesisDataSource":
        from .datasource import KinesisDataSource

        return KinesisDataSource
    raise AttributeError(f"module 'pyspark_kinesis' has no attribute {name!r}")
