"""ETL: JSON order events from a Kinesis stream into Parquet, partitioned by day, exactly once.

The Parquet sink keeps its own log of committed files and the source replays a failed batch with
exactly the same records, so a crash at any point leaves each event in the table once. With
`--available-now` the query reads what is in the stream and stops (a scheduled job); without it, it
runs until stopped.

    python examples/etl_to_parquet.py --stream orders --output /data/orders \\
        --checkpoint /chk/orders --metadata-path /chk/orders-kinesis [--available-now]
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

try:
    from examples.common import kinesis, parser, session, start
except ImportError:  # run as a script: python examples/etl_to_parquet.py
    from common import kinesis, parser, session, start

ORDER = "order_id STRING, customer STRING, amount DOUBLE"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--stream", required=True)
    p.add_argument("--output", required=True, help="Parquet folder")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--metadata-path", required=True, help="durable folder for the source's batch ends")
    p.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    return p.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    events = (
        kinesis(spark.readStream, args)
        .option("streamName", args.stream)
        .option("startingPosition", "TRIM_HORIZON")
        .option("metadataPath", args.metadata_path)
        .load()
    )
    orders = events.select(
        F.from_json(F.col("data").cast("string"), ORDER).alias("order"),
        "approximateArrivalTimestamp",
        "shardId",
        "sequenceNumber",
    ).select(
        "order.*",
        F.to_date("approximateArrivalTimestamp").alias("day"),
        "approximateArrivalTimestamp",
        "shardId",
        "sequenceNumber",
    )
    writer = (
        orders.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy("day")
    )
    return start(writer, args, "10 seconds")


if __name__ == "__main__":
    parsed = arguments()  # before Spark starts: --help and bad arguments need no JVM
    run(session("kinesis-etl-to-parquet"), parsed).awaitTermination()
