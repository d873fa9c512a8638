"""A streaming query run as its own process, so tests can SIGKILL its driver or set executor env.

It reads a stream with the kinesis source and writes each batch with foreachBatch to
<out>/batch=<id> (overwrite: a replayed batch replaces its own output, so the sink is idempotent),
keeping each row's position in the batch so arrival order can be checked afterwards.
Usage: python driver_app.py '<json config>'
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    cfg = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pyspark_kinesis

    builder = (
        SparkSession.builder.master(cfg.get("master", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in cfg.get("conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(cfg.get("log_level", "ERROR"))
    pyspark_kinesis.register(spark)

    reader = spark.readStream.format("kinesis")
    for key, value in cfg["options"].items():
        reader = reader.option(key, value)
    out = cfg["out"]
    pause = float(cfg.get("pause_s", 0))
    partial = bool(cfg.get("partial", False))

    def write_batch(df, batch_id: int) -> None:
        if pause:
            time.sleep(pause)  # widen the window in which the driver can be killed mid-batch
        if partial and batch_id % 4 in (1, 2):
            write_part(df, batch_id)
            return
        rows = df.withColumn("pos", F.monotonically_increasing_id())
        rows.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    def write_part(df, batch_id: int) -> None:
        """A foreachBatch that uses part of its batch, chosen by batch id (a replay chooses the same):
        none of it, or partition 0 only. Tasks that never run must be read again in later batches."""
        with open(cfg["checkpoint"] + ".partial.log", "a") as log:
            log.write(f"{batch_id} {'skip' if batch_id % 4 == 1 else 'partition-0'}\n")
        if batch_id % 4 == 1:
            return
        rows = spark.sparkContext.runJob(df.rdd, lambda part: list(part), partitions=[0])
        indexed = [(*row, pos) for pos, row in enumerate(rows)]
        schema = df.schema.add("pos", "long")
        spark.createDataFrame(indexed, schema).write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    writer = (
        reader.load().writeStream.foreachBatch(write_batch).option("checkpointLocation", cfg["checkpoint"])
    )
    if cfg.get("trigger") == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=cfg.get("interval", "300 milliseconds"))
    query = writer.start()
    query.awaitTermination(float(cfg.get("timeout_s", 600)))
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
