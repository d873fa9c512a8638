"""Several streams in one query, each with its own region or account: one table, a column per origin.

Each `--stream` is a name, an ARN, or NAME@REGION; `--role-arn` (optional, once per stream, in the same
order) reads that stream through an assumed role (cross-account). The rows carry `streamName` and
`streamArn`, so one query replaces one per stream; output goes to Parquet partitioned by stream.

    python examples/several_streams.py --stream orders@us-east-1 --stream orders@eu-west-1 \\
        --output /data/orders-all --checkpoint /chk/all --metadata-path /chk/all-kinesis
"""

from __future__ import annotations

import argparse
import json

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

try:
    from examples.common import kinesis, parser, session, start
except ImportError:
    from common import kinesis, parser, session, start


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--stream", action="append", required=True, help="NAME, ARN or NAME@REGION (repeat)")
    p.add_argument("--role-arn", action="append", default=[], help="role per stream, same order (optional)")
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--metadata-path", required=True)
    p.add_argument("--available-now", action="store_true")
    return p.parse_args(argv)


def stream_specs(args: argparse.Namespace) -> list[dict[str, str]]:
    specs = []
    for index, text in enumerate(args.stream):
        name, _, region = text.partition("@") if not text.startswith("arn:") else (text, "", "")
        spec = {"streamName": name, "startingPosition": "TRIM_HORIZON"}
        if region:
            spec["region"] = region
        if index < len(args.role_arn) and args.role_arn[index]:
            spec["roleArn"] = args.role_arn[index]
        specs.append(spec)
    return specs


def run(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    events = (
        kinesis(spark.readStream, args)
        .option("streams", json.dumps(stream_specs(args)))
        .option("metadataPath", args.metadata_path)
        .load()
    )
    writer = (
        events.selectExpr(
            "CAST(data AS STRING) AS payload", "streamName", "streamArn", "approximateArrivalTimestamp"
        )
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy("streamName")
    )
    return start(writer, args, "10 seconds")


if __name__ == "__main__":
    parsed = arguments()  # before Spark starts: --help and bad arguments need no JVM
    run(session("kinesis-several-streams"), parsed).awaitTermination()
