"""A Spark Connect client in its own process (a remote session cannot share a process with the test
suite's classic SparkSession): reads under the name the server registered by itself, registers the
format, reads a stream in batch and streaming mode,
writes with the sink, and prints what it got as JSON.
Usage: python connect_client.py '<json config>'"""

from __future__ import annotations

import json
import sys


def main() -> None:
    cfg = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession

    import pyspark_kinesis

    spark = SparkSession.builder.remote(cfg["remote"]).getOrCreate()
    options = {"streamName": cfg["stream"], "region": "us-east-1", "endpointUrl": cfg["endpoint"]}
    # Before register(): the name the server registered by itself (the package's DefaultSource)
    static = spark.read.format("pyspark_kinesis").options(**options).load()
    static_rows = [r["data"].decode() for r in static.select("data").collect()]
    fmt = pyspark_kinesis.register(spark)
    batch = spark.read.format(fmt).options(**options).load()
    batch_rows = [r["data"].decode() for r in batch.select("data").collect()]
    query = (
        spark.readStream.format(fmt)
        .options(**options, startingPosition="TRIM_HORIZON", metadataPath=cfg["meta"])
        .load()
        .selectExpr("CAST(data AS STRING) AS data")
        .writeStream.format("parquet")
        .option("path", cfg["out"])
        .option("checkpointLocation", cfg["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    streamed = [r["data"] for r in spark.read.parquet(cfg["out"]).collect()]
    (
        batch.selectExpr("data", "partitionKey")
        .write.format(fmt)
        .options(streamName=cfg["target"], region="us-east-1", endpointUrl=cfg["endpoint"])
        .mode("append")
        .save()
    )
    spark.stop()
    print(json.dumps({"name": fmt, "static": static_rows, "batch": batch_rows, "streamed": streamed}))


if __name__ == "__main__":
    main()
