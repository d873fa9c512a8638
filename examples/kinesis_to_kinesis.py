"""Read a stream, clean and enrich each event, write it to another stream with the Kinesis sink.

Events keep their partition key, so per-key order carries over to the output stream. The sink is
at-least-once (a retried task writes again): each output event carries `source_seq`, the input's
shard and sequence number, for consumers that deduplicate (see docs/sink.md).

    python examples/kinesis_to_kinesis.py --source raw-orders --target clean-orders \\
        --checkpoint /chk/clean --metadata-path /chk/clean-kinesis
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

try:
    from examples.common import kinesis, parser, session, start
except ImportError:
    from common import kinesis, parser, session, start

ORDER = "order_id STRING, customer STRING, amount DOUBLE"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--source", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--metadata-path", required=True)
    p.add_argument("--available-now", action="store_true")
    return p.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    events = (
        kinesis(spark.readStream, args)
        .option("streamName", args.source)
        .option("startingPosition", "TRIM_HORIZON")
        .option("metadataPath", args.metadata_path)
        .load()
    )
    order = F.from_json(F.col("data").cast("string"), ORDER)
    clean = (
        events.select(order.alias("o"), "partitionKey", "shardId", "sequenceNumber")
        .where(F.col("o.order_id").isNotNull() & (F.col("o.amount") > 0))  # drop malformed and empty orders
        .select(
            F.to_json(
                F.struct(
                    "o.order_id",
                    F.upper("o.customer").alias("customer"),
                    F.round("o.amount", 2).alias("amount"),
                    F.concat_ws("/", "shardId", "sequenceNumber").alias("source_seq"),
                )
            ).alias("data"),
            "partitionKey",
        )
    )
    writer = (
        kinesis(clean.writeStream, args)
        .option("streamName", args.target)
        .option("checkpointLocation", args.checkpoint)
    )
    return start(writer, args, "5 seconds")


if __name__ == "__main__":
    parsed = arguments()  # before Spark starts: --help and bad arguments need no JVM
    run(session("kinesis-to-kinesis"), parsed).awaitTermination()
