"""What the running PySpark's Python Data Source API offers, found once, so the adapters stay thin.

The connector installs into the Spark its users already run, and the Python Data Source API grew
across the 4.x line:

- PySpark 4.2 (SPARK-55304) gave Python stream readers admission control: `latestOffset(start, limit)`,
  `getDefaultReadLimit()`, `reportLatestOffset()` (lag in the query's progress) and
  `SupportsTriggerAvailableNow`. On 4.0 and 4.1 Spark calls `latestOffset()` without arguments and runs
  `trigger(availableNow=True)` / `trigger(once=True)` as one batch up to the offset that call returned.
- PySpark 4.1 added `DataSourceStreamArrowWriter` (a streaming sink fed Arrow batches); on 4.0 a streaming
  writer gets rows.

Batch limits and exact replays do not depend on any of it: the planner bounds every batch itself and a
replay reads exactly its logged range on every version (see `source.readers`).
"""

from __future__ import annotations

from typing import Any

try:  # PySpark 4.2+
    from pyspark.sql.streaming.datasource import (  # type: ignore[import-not-found,unused-ignore]
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # PySpark 4.0 / 4.1
    ADMISSION_CONTROL = False
    ReadAllAvailable = ReadLimit = ReadMaxBytes = ReadMaxRows = SupportsTriggerAvailableNow = None  # type: ignore[assignment,misc,unused-ignore]
else:
    ADMISSION_CONTROL = True

try:  # PySpark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # PySpark 4.0
    ARROW_STREAM_WRITER = False
    DataSourceStreamArrowWriter = None  # type: ignore[assignment,misc,unused-ignore]
else:
    ARROW_STREAM_WRITER = True


def arrow_type(spark_type: Any) -> Any:
    """The Arrow type Spark expects of a column of `spark_type` in the record batches a Python data
    source yields (Spark compares their schema with its own conversion: list items named as it names
    them, timestamps in UTC), through PySpark's own conversion, whose signature changed in 4.1."""
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(spark_type, timezone="UTC")  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # PySpark 4.0: timestamp_utc=True by default
        return to_arrow_type(spark_type)


__all__ = [
    "ADMISSION_CONTROL",
    "arrow_type",
    "ARROW_STREAM_WRITER",
    "DataSourceStreamArrowWriter",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
]
