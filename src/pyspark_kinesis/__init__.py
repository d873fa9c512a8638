"""pyspark-kinesis: an exactly-once Amazon Kinesis Data Streams source and sink for Spark Structured Streaming.

Public API: `register` (the format "kinesis"), `KinesisDataSource`, the errors the connector raises,
and the `assign` module (shard-to-task assigners, usable without Spark). Everything under `source`,
`sink`, `config`, `aws`, `values` and `cli` is internal and may change between versions.

Importing the package is light (the errors only): every Spark session imports it when it first looks
for Python data sources, and the command-line tools need no PySpark.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .errors import (
    CheckpointMismatchError,
    CorruptRecordError,
    DataLossError,
    KinesisConnectorError,
    OptionError,
    SinkWriteError,
    StreamAccessError,
)
from .switches import LOG_LEVEL

if TYPE_CHECKING:
    from .datasource import DefaultSource, KinesisDataSource


def _version() -> str:
    """The installed distribution's version: pyproject.toml is the one place it is written. Read when
    `__version__` is first asked for, not at import: looking a distribution up scans every entry of
    sys.path (about 50 ms in Spark's planner process, which every streaming query starts afresh)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark-kinesis")
    except PackageNotFoundError:  # (a source tree on sys.path, not installed)
        return "0+unknown"


__all__ = [
    # registering the format "kinesis"
    "DefaultSource",
    "FALLBACK_FORMAT",
    "FORMAT",
    "KinesisDataSource",
    "register",
    # errors
    "CheckpointMismatchError",
    "CorruptRecordError",
    "DataLossError",
    "KinesisConnectorError",
    "OptionError",
    "SinkWriteError",
    "StreamAccessError",
    # version
    "__version__",
]


def _configure_logging() -> None:
    """The connector logs with `logging` under "pyspark_kinesis". Its code runs in Python processes
    Spark starts (the driver-side planner, executor workers), where nothing configures logging and only
    warnings would show: with PYSPARK_KINESIS_LOG_LEVEL set (INFO, DEBUG...; executors get it through
    spark.executorEnv.*), those lines go to the process's stderr, which Spark keeps in its logs."""
    level = LOG_LEVEL.value().upper()
    logger = logging.getLogger(__name__)
    if not level or logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.getLevelName(level) if level in logging.getLevelNamesMapping() else logging.INFO)


_configure_logging()


FORMAT = "kinesis"
# Where another data source already has "kinesis" (Databricks Runtime ships its own Kinesis source under
# that name): the name `register` falls back to.
FALLBACK_FORMAT = "pyspark_kinesis"


def register(spark: Any, name: str | None = None) -> str:
    """Register the connector's format with a SparkSession, and return the name it is registered under.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session whose ``readStream``/``read``/``writeStream``/``write`` should know the format (a
        Spark Connect session too).
    name : str, optional
        The format name to register. By default "kinesis", or "pyspark_kinesis" where another data
        source already has "kinesis" (Databricks Runtime's own Kinesis source): which one, and why, is
        logged. A name given here is registered exactly, or refused with an error naming the source
        that has it.

    Returns
    -------
    str
        The name to pass to ``format(...)``: write queries with it, and they run under either name.

    Examples
    --------
    >>> import pyspark_kinesis
    >>> fmt = pyspark_kinesis.register(spark)  # doctest: +SKIP
    >>> df = spark.readStream.format(fmt).option("streamName", "orders").load()  # doctest: +SKIP
    """
    source = _data_source()  # (before touching the session: without PySpark 4 it says so first)
    from .registration import register_as

    return register_as(spark, source, name, FORMAT, FALLBACK_FORMAT)


def _data_source() -> type:
    """The data source class, or an error that says which PySpark is needed: PySpark is not a
    requirement of the package (the runtime brings its own, see pyproject.toml)."""
    try:
        from .datasource import KinesisDataSource
    except ImportError as exc:
        if not (exc.name or "").startswith("pyspark") or (exc.name or "").startswith("pyspark_kinesis"):
            raise
        raise ImportError(needs_pyspark(exc)) from exc
    return KinesisDataSource


def needs_pyspark(exc: ImportError) -> str:
    try:
        import pyspark

        found = f"this Python has PySpark {getattr(pyspark, '__version__', '(unknown version)')}"
    except ImportError:
        found = "this Python has no PySpark"
    return (
        "pyspark-kinesis needs PySpark 4.0 or later (its Python Data Source API with streaming readers), and "
        f"{found} (importing {exc.name} failed). On a Spark 4 runtime (EMR emr-spark-8, Databricks Runtime 18, "
        "a Spark 4 image) run the job there; where PySpark comes from pip, `pip install 'pyspark-kinesis[spark]'`."
    )


def __getattr__(name: str) -> Any:
    # The data source class pulls in pyspark: loaded when asked for, so that `import pyspark_kinesis`
    # (the CLI, the assigners, Spark's look for Python data sources) stays light. `DefaultSource` is
    # what Spark registers on its own, without `register()`, wherever the package is installed beside
    # the driver (pyspark/sql/worker/lookup_data_sources.py: every module named pyspark_*).
    if name == "__version__":
        globals()["__version__"] = version = _version()
        return version
    if name == "KinesisDataSource":
        return _data_source()
    if name == "DefaultSource":  # (named "pyspark_kinesis": see datasource.DefaultSource)
        try:
            _data_source()
            from .datasource import DefaultSource
        except ImportError as exc:  # Spark's look (`hasattr`) must go on to the other packages
            raise AttributeError(f"pyspark_kinesis.DefaultSource cannot load: {exc}") from exc
        return DefaultSource
    raise AttributeError(f"module 'pyspark_kinesis' has no attribute {name!r}")
