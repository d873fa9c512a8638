"""Read the connector's lag out of a streaming query's progress.

Spark shows what the source returns from `reportLatestOffset()` as `sources[].latestOffset`, a JSON
string among other sources' offsets. These helpers find the Kinesis entries and give them back as a
dict or as rows (for a DataFrame, a log line or a dashboard), so nobody has to parse it by hand.

>>> report = {"v": 1, "batch": 7, "streams": {"arn:aws:kinesis:us-east-1:1:stream/orders": {
...     "shards": 2, "shardsBehind": 1, "shardsLagUnknown": 0, "maxMsBehindLatest": 900,
...     "avgMsBehindLatest": 450, "recordsRead": 10, "bytesRead": 100}}}
>>> progress = {"batchId": 8, "sources": [{"description": "kinesis", "latestOffset": json.dumps(report)}]}
>>> [(row["streamName"], row["maxMsBehindLatest"], row["shardsBehind"]) for row in lag_rows(progress)]
[('orders', 900, 1)]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["lag", "lag_rows"]


def _progress_dict(progress: Any) -> Mapping[str, Any] | None:
    """A `StreamingQuery` (its last progress), a `StreamingQueryProgress`, its JSON, or a dict."""
    if progress is None:
        return None
    if hasattr(progress, "lastProgress") and not isinstance(progress, Mapping):
        return _progress_dict(progress.lastProgress)
    if isinstance(progress, str):
        return json.loads(progress)
    if hasattr(progress, "json") and callable(progress.json):
        return json.loads(progress.json())
    if isinstance(progress, Mapping):
        return progress
    raise TypeError(f"expected a StreamingQuery, a StreamingQueryProgress or its JSON, not {type(progress)}")


def _report(entry: Any) -> Mapping[str, Any] | None:
    if isinstance(entry, str):
        try:
            entry = json.loads(entry)
        except ValueError:
            return None
    if isinstance(entry, Mapping) and isinstance(entry.get("streams"), Mapping) and "v" in entry:
        return entry
    return None


def lag(progress: Any) -> dict[str, dict[str, Any]]:
    """Stream ARN -> its lag figures (`shards`, `shardsBehind`, `shardsLagUnknown`, `maxMsBehindLatest`,
    `avgMsBehindLatest`, `recordsRead`, `bytesRead`, `batch`: the batch they were measured in), over
    every Kinesis source of the query. Empty before the first batch, or for a query without one."""
    data = _progress_dict(progress)
    out: dict[str, dict[str, Any]] = {}
    for source in (data or {}).get("sources") or []:
        report = _report(source.get("latestOffset"))
        if report is None:
            continue
        for arn, figures in report["streams"].items():
            out[arn] = {**figures, "batch": report.get("batch")}
    return out


def lag_rows(progress: Any) -> list[dict[str, Any]]:
    """`lag(progress)` as a list of flat rows, one per stream, with `streamArn` and `streamName`
    (`spark.createDataFrame(lag_rows(query))` makes a table of it)."""
    return [
        {"streamArn": arn, "streamName": arn.rsplit("/", 1)[-1], **figures}
        for arn, figures in sorted(lag(progress).items())
    ]
