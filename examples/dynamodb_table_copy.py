"""A Parquet copy of a DynamoDB table kept current from the table's stream (a type 1 slowly changing
dimension: one row per item, as the item is now).

Each micro-batch folds the table's changes into the copy: the latest change of each item in the batch
(by its sequence number: an item's changes are in one shard lineage, parents read before children)
replaces the item's row, and a REMOVE deletes it. A replayed batch brings the same changes and
leaves the copy as it was, so the copy is exact however the query is stopped and started.

    python examples/dynamodb_table_copy.py --table orders --output /data/orders-copy \\
        --checkpoint /chk/orders-copy --metadata-path /chk/orders-copy-stream [--available-now]

Locally: `pyspark-kinesis local start --kind dynamodb` (moto's server: pip install 'moto[server]')
serves DynamoDB and its streams and prints how to create a table with a stream; pass its endpoint as
`--endpoint-url`.
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

try:
    from examples.common import kinesis, parser, session, start
except ImportError:  # run as a script: python examples/dynamodb_table_copy.py
    from common import kinesis, parser, session, start


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--table", required=True, help="the DynamoDB table (its stream must be enabled)")
    p.add_argument("--output", required=True, help="the copy's Parquet folder")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--metadata-path", required=True, help="durable folder for the source's batch ends")
    p.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    return p.parse_args(argv)


def latest_per_item(changes: DataFrame) -> DataFrame:
    """The last change of each item among `changes` (sequence numbers compare as numbers: by length, then
    digits)."""
    order = Window.partitionBy("keys").orderBy(
        F.length("sequenceNumber").desc(), F.col("sequenceNumber").desc()
    )
    return changes.withColumn("n", F.row_number().over(order)).where("n = 1").drop("n")


def fold(output: str):
    """The foreachBatch function that folds a batch of changes into the copy at `output`."""

    def apply(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        last = latest_per_item(batch.select("keys", "eventName", "newImage", "sequenceNumber"))
        kept = last.where("eventName != 'REMOVE'").select("keys", F.col("newImage").alias("item"))
        if os.path.exists(output):
            current = spark.read.parquet(output).join(last.select("keys"), "keys", "left_anti")
            kept = current.unionByName(kept)
        # (cut from the files it was read from, so that they can be overwritten)
        kept.localCheckpoint(eager=True).write.mode("overwrite").parquet(output)

    return apply


def run(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    changes = (
        kinesis(spark.readStream, args)
        .option("service", "dynamodb")
        .option("streamName", args.table)
        .option("startingPosition", "TRIM_HORIZON")
        .option("metadataPath", args.metadata_path)
        .load()
    )
    writer = changes.writeStream.foreachBatch(fold(args.output)).option("checkpointLocation", args.checkpoint)
    return start(writer, args, "10 seconds")


if __name__ == "__main__":
    parsed = arguments()  # before Spark starts: --help and bad arguments need no JVM
    run(session("dynamodb-table-copy"), parsed).awaitTermination()
