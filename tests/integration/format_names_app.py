"""A Spark session in its own process (the test suite's session cannot take another jar): with
`jar`, a JVM data source named "kinesis" is on its classpath, as Databricks Runtime has one. It
reads under the name Spark registered by itself (installed `pyspark_*` packages), registers the format, reads a
stream in batch and streaming mode and writes with the sink under the name it got, and prints what
happened as JSON.
Usage: python format_names_app.py '<json config>'"""

from __future__ import annotations

import json
import os
import sys


def attempt(what: dict, key: str, action) -> None:
    try:
        what[key] = action()
    except Exception as exc:  # what the user would see, first lines
        what[key] = f"error: {exc.__class__.__name__}: {str(exc)[:600]}"


def main() -> None:
    cfg = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import pyspark_kinesis

    if cfg.get("remote"):
        spark = SparkSession.builder.remote(cfg["remote"]).getOrCreate()
    else:
        builder = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
        if cfg.get("jar"):
            builder = builder.config("spark.jars", cfg["jar"])
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    out: dict = {}
    options = {"streamName": cfg["stream"], "region": "us-east-1", "endpointUrl": cfg["endpoint"]}
    # Before register(): the name Spark registered by itself (the package's DefaultSource)
    attempt(
        out,
        "static",
        lambda: sorted(
            r["data"].decode()
            for r in spark.read.format("pyspark_kinesis").options(**options).load().select("data").collect()
        ),
    )
    fmt = pyspark_kinesis.register(spark)
    out["name"] = fmt
    attempt(out, "explicit", lambda: pyspark_kinesis.register(spark, name="kinesis"))
    batch = spark.read.format(fmt).options(**options).load()
    out["batch"] = sorted(r["data"].decode() for r in batch.select("data").collect())
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
    out["streamed"] = sorted(r["data"] for r in spark.read.parquet(cfg["out"]).collect())
    (
        batch.selectExpr("data", "partitionKey")
        .write.format(fmt)
        .options(streamName=cfg["target"], region="us-east-1", endpointUrl=cfg["endpoint"])
        .mode("append")
        .save()
    )
    spark.stop()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
