"""Read the connector's lag out of a streaming query's progress, and publish it.

Spark shows what the source returns from `reportLatestOffset()` as `sources[].latestOffset`, a JSON
string among other sources' offsets. These helpers find the Kinesis entries and give them back as a
dict or as rows (for a DataFrame, a log line or a dashboard), so nobody has to parse it by hand;
`LagListener` publishes them on every progress to CloudWatch and/or as Prometheus text.

>>> report = {"v": 1, "batch": 7, "streams": {"arn:aws:kinesis:us-east-1:1:stream/orders": {
...     "shards": 2, "shardsBehind": 1, "shardsLagUnknown": 0, "maxMsBehindLatest": 900,
...     "avgMsBehindLatest": 450, "recordsRead": 10, "bytesRead": 100}}}
>>> progress = {"batchId": 8, "sources": [{"description": "kinesis", "latestOffset": json.dumps(report)}]}
>>> [(row["streamName"], row["maxMsBehindLatest"], row["shardsBehind"]) for row in lag_rows(progress)]
[('orders', 900, 1)]
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from .errors import CheckpointFormatError
from .source.driver.lag import LagTracker
from .source.state.batch_log import BatchEndLog
from .source.state.offsets import SourceOffset

__all__ = ["LagListener", "RecordedLag", "lag", "lag_rows", "prometheus_text"]

log = logging.getLogger(__name__)
# (figure in the report, CloudWatch metric name and unit, Prometheus metric name, help text)
FIGURES = (
    (
        "maxMsBehindLatest",
        "MaxMillisBehindLatest",
        "Milliseconds",
        "max_ms_behind_latest",
        "Largest MillisBehindLatest of the stream's shards",
    ),
    (
        "avgMsBehindLatest",
        "AvgMillisBehindLatest",
        "Milliseconds",
        "avg_ms_behind_latest",
        "Average MillisBehindLatest of the stream's shards",
    ),
    ("shardsBehind", "ShardsBehind", "Count", "shards_behind", "Shards whose last read was not at the tip"),
    ("shards", "Shards", "Count", "shards", "Shards of the stream in the query's offset"),
    ("recordsRead", "RecordsRead", "Count", "records_read", "Records read from the stream by the last batch"),
    ("bytesRead", "BytesRead", "Bytes", "bytes_read", "Payload bytes read from the stream by the last batch"),
    (
        "shardsWithDataLoss",
        "ShardsWithDataLoss",
        "Count",
        "shards_with_data_loss",
        "Shards whose read in the last batch went on past records lost to retention (failOnDataLoss=false)",
    ),
)


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


def _parsed(entry: Any) -> Any:
    if isinstance(entry, str):
        try:
            return json.loads(entry)
        except ValueError:
            return None
    return entry


def _report(entry: Any) -> Mapping[str, Any] | None:
    """A lag report (see `source.driver.lag`), not an offset: on PySpark 4.0/4.1 `latestOffset` in the
    progress is the source's offset itself, which also has "v" and "streams"."""
    entry = _parsed(entry)
    if not (isinstance(entry, Mapping) and isinstance(entry.get("streams"), Mapping) and "v" in entry):
        return None
    return entry if all(isinstance(f, Mapping) and "shards" in f for f in entry["streams"].values()) else None


class RecordedLag:
    """PySpark 4.0/4.1 put no lag in the progress (`reportLatestOffset()` reaches Spark from 4.2): the
    same figures, computed the planner's way from the batch-end records under `metadataPath` of the
    batch each progress names (its `endOffset`). One per listener; it keeps each query's last figures,
    as the planner does, so a shard not read in a batch keeps the figure of the batch that last read it."""

    def __init__(self, metadata_path: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.log = BatchEndLog.open(metadata_path, storage_options)
        self._trackers: dict[str, LagTracker] = {}

    def reports(self, progress: Any) -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        for source in (_progress_dict(progress) or {}).get("sources") or []:
            data = _parsed(source.get("endOffset"))
            if not isinstance(data, Mapping) or "token" not in data:  # (a lag report has no token)
                continue
            try:
                offset = SourceOffset.from_json(dict(data))
            except (CheckpointFormatError, KeyError, TypeError, ValueError):
                continue  # another source's offset
            ends = {}
            for task in offset.tasks():
                record = self.log.read(offset.token, offset.batch, task)
                if record is not None:
                    ends.update(record.shards)
            tracker = self._trackers.setdefault(offset.token, LagTracker())
            tracker.update(offset.batch, ends, {key: list(shards) for key, shards in offset.streams.items()})
            report = tracker.report()
            if report is not None:
                out.append(report)
        return out


def lag(progress: Any, recorded: RecordedLag | None = None) -> dict[str, dict[str, Any]]:
    """Stream ARN -> its lag figures (`shards`, `shardsBehind`, `shardsLagUnknown`, `maxMsBehindLatest`,
    `avgMsBehindLatest`, `recordsRead`, `bytesRead`, `shardsWithDataLoss`, `batch`: the batch they were
    measured in), over every Kinesis source of the query. Empty before the first batch, or for a query
    without one. On PySpark 4.0/4.1, whose progress carries no lag, from the batch-end records through
    `recorded`."""
    data = _progress_dict(progress)
    reports: list[Mapping[str, Any]] = [
        r for r in (_report(s.get("latestOffset")) for s in (data or {}).get("sources") or []) if r
    ]
    if not reports and recorded is not None and data is not None:
        reports = list(recorded.reports(data))
    out: dict[str, dict[str, Any]] = {}
    for report in reports:
        for arn, figures in report["streams"].items():
            out[arn] = {**figures, "batch": report.get("batch")}
    return out


def lag_rows(progress: Any, recorded: RecordedLag | None = None) -> list[dict[str, Any]]:
    """`lag(progress)` as a list of flat rows, one per stream, with `streamArn` and `streamName`
    (`spark.createDataFrame(lag_rows(query))` makes a table of it)."""
    return [
        {"streamArn": arn, "streamName": arn.rsplit("/", 1)[-1], **figures}
        for arn, figures in sorted(lag(progress, recorded).items())
    ]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(rows_by_query: Mapping[str, list[dict[str, Any]]]) -> str:
    """Query name -> `lag_rows(...)`, in Prometheus' text exposition format (gauges named
    `pyspark_kinesis_<figure>`, labelled by query, stream and stream ARN).

    >>> print(prometheus_text({"etl": [{"streamArn": "arn:x/orders", "streamName": "orders", "shardsBehind": 1}]}))
    # HELP pyspark_kinesis_shards_behind Shards whose last read was not at the tip
    # TYPE pyspark_kinesis_shards_behind gauge
    pyspark_kinesis_shards_behind{query="etl",stream="orders",stream_arn="arn:x/orders"} 1
    <BLANKLINE>
    """
    lines: list[str] = []
    for key, _cw, _unit, name, help_text in FIGURES:
        samples = [
            f'pyspark_kinesis_{name}{{query="{_label(query)}",stream="{_label(row["streamName"])}",'
            f'stream_arn="{_label(row["streamArn"])}"}} {row[key]}'
            for query, rows in sorted(rows_by_query.items())
            for row in rows
            if row.get(key) is not None
        ]
        if samples:
            lines += [
                f"# HELP pyspark_kinesis_{name} {help_text}",
                f"# TYPE pyspark_kinesis_{name} gauge",
                *samples,
            ]
    return "\n".join(lines) + "\n" if lines else ""


class LagListener(StreamingQueryListener):
    """Publishes each Kinesis stream's lag on every progress of every query of the session:
    to CloudWatch (`cloudwatch_namespace`; dimensions StreamName and Query) and/or to a Prometheus
    text file (`prometheus_file`, replaced atomically: point node_exporter's textfile collector at
    its folder); `text()` gives the same text for a scrape endpoint of your own.

    `spark.streams.addListener(LagListener(cloudwatch_namespace="PySparkKinesis"))`. It runs on
    Spark's listener thread in the driver: a failure to publish is logged, never raised.
    """

    def __init__(
        self,
        *,
        cloudwatch_namespace: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        prometheus_file: str | None = None,
        metadata_path: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        """`metadata_path` (and its `storage_options`): the queries' metadataPath, for PySpark 4.0/4.1,
        where the progress carries no lag and the figures come from its batch-end records."""
        self.namespace = cloudwatch_namespace
        self.recorded = RecordedLag(metadata_path, storage_options) if metadata_path else None
        self.region = (
            region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        )
        self.endpoint_url = endpoint_url
        self.prometheus_file = prometheus_file
        self.latest: dict[str, list[dict[str, Any]]] = {}  # query name (or id) -> its last lag rows
        self.published = 0  # progress events published (for tests and health checks)
        self._lock = threading.Lock()
        self._client: Any = None

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            self.publish(event.progress)
        except Exception as exc:  # never let a metrics outage reach the query
            log.warning("LagListener could not publish the lag: %s: %s", exc.__class__.__name__, exc)

    def publish(self, progress: Any) -> None:
        rows = lag_rows(progress, self.recorded)
        if not rows:
            return
        data = _progress_dict(progress) or {}
        query = str(data.get("name") or data.get("id") or "query")
        with self._lock:
            self.latest[query] = rows
            if self.namespace:
                self._put_cloudwatch(query, rows)
            if self.prometheus_file:
                self._write_prometheus()
            self.published += 1

    def text(self) -> str:
        with self._lock:
            return prometheus_text(self.latest)

    def _put_cloudwatch(self, query: str, rows: list[dict[str, Any]]) -> None:
        from .aws.cloudwatch import cloudwatch_client, put_metrics

        if self._client is None:
            self._client = cloudwatch_client(self.region, self.endpoint_url)
        data = [
            {
                "MetricName": metric,
                "Unit": unit,
                "Value": float(row[key]),
                "Dimensions": [
                    {"Name": "StreamName", "Value": row["streamName"]},
                    {"Name": "Query", "Value": query},
                ],
            }
            for row in rows
            for key, metric, unit, _name, _help in FIGURES
            if row.get(key) is not None
        ]
        put_metrics(self._client, self.namespace or "", data)

    def _write_prometheus(self) -> None:
        path = self.prometheus_file or ""
        folder = os.path.dirname(os.path.abspath(path))
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".lag-", suffix=".prom.tmp")
        with os.fdopen(handle, "w") as out:
            out.write(prometheus_text(self.latest))
        os.replace(temporary, path)
