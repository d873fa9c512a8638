"""The demo pipeline: local Kinesis -> pyspark-kinesis -> transform -> Parquet, with a checkpoint.

It starts kinesis-local on a free loopback port, creates a stream, puts sample orders, and runs a
Structured Streaming query twice with Trigger.AvailableNow (putting more orders in between), to show
that the second run resumes exactly where the first stopped. Then it prints what arrived.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from .output import console


def _put_orders(kinesis: Any, stream: str, first: int, count: int) -> None:
    rng = random.Random(first)
    for start in range(first, first + count, 250):
        records = []
        for n in range(start, min(start + 250, first + count)):
            order = {
                "order_id": n,
                "customer": f"c{rng.randrange(40)}",
                "amount": round(rng.uniform(1, 500), 2),
            }
            records.append({"Data": json.dumps(order).encode(), "PartitionKey": order["customer"]})
        response = kinesis.put_records(StreamName=stream, Records=records)
        if response.get("FailedRecordCount"):
            raise RuntimeError("the local Kinesis rejected records")


def run(workdir: str | None = None, orders: int = 2000, shards: int = 2) -> int:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "000000000000")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the demo never leaves loopback
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyspark_kinesis

    from ..aws import admin
    from .local_kinesis import LocalKinesis

    root = Path(workdir or tempfile.mkdtemp(prefix="pyspark-kinesis-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    with LocalKinesis("kinesis-local") as server:
        console.print(f"[bold]local Kinesis[/] (kinesis-local) on {server.endpoint}")
        kinesis = admin.client_for("us-east-1", server.endpoint)
        stream = f"demo-orders-{int(time.time())}"
        admin.create_stream(kinesis, stream, shards)
        _put_orders(kinesis, stream, 0, orders // 2)
        console.print(f"put {orders // 2} orders into stream {stream} ({shards} shards)")
        spark = _session()
        fmt = pyspark_kinesis.register(spark)  # ("kinesis" where that name is free)
        _run_query(spark, fmt, stream, server.endpoint, root)
        _put_orders(kinesis, stream, orders // 2, orders - orders // 2)
        console.print(f"put {orders - orders // 2} more orders; restarting the query from its checkpoint")
        _run_query(spark, fmt, stream, server.endpoint, root)
        ok = _show_output(spark, root, orders)
        spark.stop()
        return 0 if ok else 1


def _session() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pyspark-kinesis-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _run_query(spark: Any, fmt: str, stream: str, endpoint: str, root: Path) -> None:
    """One availableNow run of the demo's pipeline: orders (JSON) from the stream, enriched, into
    Parquet; a second run continues from the checkpoint."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format(fmt)
        .option("streamName", stream)
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .option("startingPosition", "TRIM_HORIZON")
        .option("metadataPath", str(root / "kinesis-metadata"))
        .option("maxRecordsPerBatch", "400")
        .load()
    )
    schema = "order_id BIGINT, customer STRING, amount DOUBLE"
    orders_df = raw.select(
        F.from_json(F.col("data").cast("string"), schema).alias("o"),
        "shardId",
        "sequenceNumber",
        "approximateArrivalTimestamp",
    ).select("o.*", "shardId", "sequenceNumber", "approximateArrivalTimestamp")
    enriched = orders_df.withColumn("amount_with_tax", F.round(F.col("amount") * 1.2, 2))
    query = (
        enriched.writeStream.format("parquet")
        .option("path", str(root / "orders"))
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p.numInputRows]
    console.print(f"query run: {len(batches)} batches, {sum(p.numInputRows for p in batches)} records")


def _show_output(spark: Any, root: Path, orders: int) -> bool:
    """The Parquet output's first rows and counts; whether every order arrived exactly once."""
    result = spark.read.parquet(str(root / "orders"))
    total = result.count()
    distinct = result.select("order_id").distinct().count()
    table = Table(title=f"Parquet output in {root / 'orders'}")
    for column in ("order_id", "customer", "amount", "amount_with_tax", "shardId"):
        table.add_column(column)
    for row in result.orderBy("order_id").limit(5).collect():
        table.add_row(str(row.order_id), row.customer, str(row.amount), str(row.amount_with_tax), row.shardId)
    console.print(table)
    by_shard = {r.shardId: r["count"] for r in result.groupBy("shardId").count().collect()}
    console.print(f"records per shard: {by_shard}")
    ok = total == orders and distinct == orders
    style = "green" if ok else "red"
    console.print(f"[{style}]arrived {total} rows, {distinct} distinct orders, of {orders} put[/]")
    return bool(ok)
