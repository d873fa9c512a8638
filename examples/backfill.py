"""Backfill: load a stream's retained history into Parquet in bounded batches, then keep up by
running the same command again (each run continues where the last one committed).

`trigger(availableNow=True)` reads what was in the stream when the run started, in batches of at most
`--batch-records` records (so a large history does not have to fit one batch), and stops. Scheduled
hourly, it is an incremental load with exactly-once output and no long-running cluster.

    python examples/backfill.py --stream clicks --output /data/clicks \\
        --checkpoint /chk/clicks --metadata-path /chk/clicks-kinesis --batch-records 500000
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

try:
    from examples.common import kinesis, parser, session
except ImportError:
    from common import kinesis, parser, session


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--stream", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--metadata-path", required=True)
    p.add_argument("--batch-records", type=int, default=500_000, help="records per batch at most")
    return p.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    history = (
        kinesis(spark.readStream, args)
        .option("streamName", args.stream)
        .option("startingPosition", "TRIM_HORIZON")  # the first run starts at the oldest retained record
        .option("maxRecordsPerBatch", str(args.batch_records))
        .option("metadataPath", args.metadata_path)
        .load()
    )
    return (
        history.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    parsed = arguments()  # before Spark starts: --help and bad arguments need no JVM
    query = run(session("kinesis-backfill"), parsed)
    query.awaitTermination()
    print(f"batches this run: {len(query.recentProgress)}")
