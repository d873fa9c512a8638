"""What every example shares: where the streams are, and a SparkSession for running it on its own.

Run an example against AWS with your usual credentials (`--region eu-west-1`), or against a local
Kinesis (`pyspark-kinesis local start` prints its endpoint; pass it as `--endpoint-url`).
"""

from __future__ import annotations

import argparse
from typing import Any

from pyspark.sql import SparkSession

import pyspark_kinesis


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


def start(writer: Any, args: argparse.Namespace, interval: str) -> Any:
    """Start the query: with `--available-now`, once through what the stream holds, then stop;
    otherwise a micro-batch every `interval` until stopped."""
    if getattr(args, "available_now", False):
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=interval).start()
