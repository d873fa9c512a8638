"""Typed table from Glue Schema Registry records: a stream whose producers serialize with the AWS Glue
Schema Registry (the KPL/KCL integration, Flink's avro-glue format, Lambda) read into Parquet with the
record's fields as columns, whatever compatible version of the schema each producer wrote with.

The columns come from the schema version the query starts with (`--schema-version` pins one; by default
the latest); records written with older or newer compatible versions are decoded into it. A record that
cannot be decoded is kept with its raw bytes in `data` and the reason in `valueError`.

    python examples/glue_typed_table.py --stream orders --registry shop --schema orders \\
        --output /data/orders --checkpoint /chk/orders --metadata-path /chk/orders-kinesis
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

try:
    from examples.common import kinesis, parser, session, start
except ImportError:
    from common import kinesis, parser, session, start


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--stream", required=True)
    p.add_argument("--registry", required=True, help="the Glue Schema Registry's name")
    p.add_argument("--schema", required=True, help="the schema's name in the registry")
    p.add_argument(
        "--schema-version", type=int, default=None, help="the version to read into (default: latest)"
    )
    p.add_argument(
        "--registry-endpoint-url", default=None, help="Glue endpoint (a local server); default: AWS"
    )
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--metadata-path", required=True)
    p.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    return p.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    reader = (
        kinesis(spark.readStream, args)
        .option("streamName", args.stream)
        .option("startingPosition", "TRIM_HORIZON")
        .option("metadataPath", args.metadata_path)
        .option("valueFormat", "glue")
        .option("schemaRegistryName", args.registry)
        .option("schemaName", args.schema)
        .option("valueColumns", "flatten")  # the record's fields as top-level columns
        .option("onDecodeError", "column")  # undecodable records kept, with the reason
    )
    if args.schema_version:
        reader = reader.option("schemaVersionNumber", str(args.schema_version))
    if args.registry_endpoint_url:
        reader = reader.option("schemaRegistryEndpointUrl", args.registry_endpoint_url)
    table = reader.load().drop("streamArn")
    writer = (
        table.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    return start(writer, args, "10 seconds")


if __name__ == "__main__":
    parsed = arguments()  # before Spark starts: --help and bad arguments need no JVM
    run(session("kinesis-glue-typed-table"), parsed).awaitTermination()
