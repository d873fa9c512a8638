"""What every example shares: where the streams are, and a SparkSession for running it on its own.

Run an example against AWS with your usual credentials (`--region eu-west-1`), or against a local
Kinesis (`pyspark-kinesis local start` prints its endpoint; pass it as `--endpoint-url`).
"""

from __future__ import annotations

import argparse
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

import pyspark_kinesis
from pyspark_kinesis import metrics


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--region", default="us-east-1", help="AWS region of the streams")
    p.add_argument("--endpoint-url", default=None, help="Kinesis endpoint (a local server); default: AWS")
    return p


def kinesis(reader: Any, args: argparse.Namespace) -> Any:
    """The format and the connection options every example uses, on a reader or a writer."""
    reader = reader.format(FORMAT[0]).option("region", args.region)
    return reader.option("endpointUrl", args.endpoint_url) if args.endpoint_url else reader


# The name `register` returned ("kinesis", or "pyspark_kinesis" where a platform's own source has
# "kinesis", as on Databricks Runtime).
FORMAT = [pyspark_kinesis.FORMAT]


def session(name: str) -> SparkSession:
    spark = SparkSession.builder.appName(name).getOrCreate()
    FORMAT[0] = pyspark_kinesis.register(spark)
    return spark


def summary(progress: Any) -> str:
    """One batch in a line: its rows, and how far behind the newest record its streams are."""
    figures = metrics.lag(progress)
    behind = [f["maxMsBehindLatest"] for f in figures.values() if f.get("maxMsBehindLatest") is not None]
    lag = f", {max(behind):,} ms behind the newest record" if behind else ""
    return f"batch {progress.batchId}: {progress.numInputRows:,} rows{lag}"


class BatchSummaries(StreamingQueryListener):
    """Prints `summary` for every batch of the session's queries (a batch that read nothing too)."""

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        print(summary(event.progress), flush=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


_SUMMARIZED: set[int] = set()  # sessions the listener was added to


def start(writer: Any, args: argparse.Namespace, interval: str) -> Any:
    """Start the query: with `--available-now`, once through what the stream holds, then stop;
    otherwise a micro-batch every `interval` until stopped. Each batch prints a line (`summary`)."""
    spark = SparkSession.getActiveSession()
    if spark is not None and id(spark) not in _SUMMARIZED:
        _SUMMARIZED.add(id(spark))
        spark.streams.addListener(BatchSummaries())
    if getattr(args, "available_now", False):
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=interval).start()
