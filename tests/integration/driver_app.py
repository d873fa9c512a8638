"""A streaming query run as its own process, so tests can SIGKILL its driver or set executor env.

It reads a stream with the kinesis source and writes each batch with foreachBatch to
<out>/batch=<id> (overwrite: a replayed batch replaces its own output, so the sink is idempotent),
keeping each row's position in the batch so arrival order can be checked afterwards. With
"shape" (and "streams") it runs one of tests/support/query_shapes.py's queries instead. With
"sink": "foreach" it writes through a `foreach` writer instead, one file per batch and partition
(what asynchronous progress tracking, "async_ms", accepts: it refuses foreachBatch).
Usage: python driver_app.py '<json config>'
"""

from __future__ import annotations

import json
import os
import sys
import time


class PartitionFiles:
    """A foreach writer: the rows of one (batch, partition) into <out>/batch=<id>/part-<p>.parquet,
    overwritten when the batch runs again (so the sink stays idempotent per batch, as foreachBatch's)."""

    def __init__(self, out: str) -> None:
        self.out = out

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.partition, self.batch, self.rows = partition_id, epoch_id, []
        return True

    def process(self, row) -> None:
        self.rows.append(row.asDict())

    def close(self, error) -> None:
        if error is not None or not self.rows:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        for index, row in enumerate(self.rows):
            row["pos"] = self.partition * 1_000_000_000 + index
        folder = f"{self.out}/batch={self.batch}"
        os.makedirs(folder, exist_ok=True)
        hidden = f"{folder}/.part-{self.partition:05d}.tmp"  # (a dot: readers skip it)
        pq.write_table(pa.Table.from_pylist(self.rows), hidden)
        os.replace(hidden, f"{folder}/part-{self.partition:05d}.parquet")


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

    def source():
        """The query's rows: the source's own, or a shape's (tests/support/query_shapes.py) over one
        read per stream of `cfg["streams"]`, each with the options and its own metadataPath, or the
        chaos suite's shape of the source's rows (`chaos_shaped`)."""
        if cfg.get("table_options"):
            return table_and_stream(spark, reader.load(), cfg["table_options"])
        if not cfg.get("shape"):
            return chaos_shaped(spark, reader.load(), cfg.get("chaos_shape", "plain"))
        from tests.support.query_shapes import SHAPES

        shape = SHAPES[cfg["shape"]]
        inputs = {}
        for name, stream in cfg["streams"].items():
            one = spark.readStream.format("kinesis").option("streamName", stream)
            for key, value in cfg["options"].items():
                one = one.option(key, f"{value}-{name}" if key == "metadataPath" else value)
            inputs[name] = one.load()
        return shape.build(inputs)

    def start():
        stream = source().writeStream.option("checkpointLocation", cfg["checkpoint"])
        if cfg.get("shape"):
            from tests.support.query_shapes import SHAPES

            stream = stream.outputMode(SHAPES[cfg["shape"]].mode)
        if cfg.get("sink") == "foreach":
            writer = stream.foreach(PartitionFiles(out))
        else:
            writer = stream.foreachBatch(write_batch)
        if cfg.get("async_ms") is not None:
            writer = writer.option("asyncProgressTrackingEnabled", "true").option(
                "asyncProgressTrackingCheckpointIntervalMs", str(cfg["async_ms"])
            )
        if cfg.get("trigger") == "availableNow" and cfg.get("async_ms") is None:
            writer = writer.trigger(availableNow=True)
        elif cfg.get("trigger") == "once":
            writer = writer.trigger(once=True)
        else:
            writer = writer.trigger(processingTime=cfg.get("interval", "300 milliseconds"))
        return writer.start()

    from pyspark_kinesis import spark_features

    # PySpark 4.0/4.1 run a Python source's AvailableNow as one batch (see `spark_features`), and every
    # version runs trigger(once=True) so: drained by running it again until a run brings nothing, as a
    # user there would (with drainInOneBatch the second run brings nothing).
    one_batch = cfg.get("trigger") == "once" or (
        cfg.get("trigger") == "availableNow" and not spark_features.ADMISSION_CONTROL
    )
    runs = 60 if one_batch else 1
    for _run in range(runs):
        query = start()
        if cfg.get("until_idle_s"):
            run_until_idle(
                query, float(cfg["until_idle_s"]), float(cfg.get("timeout_s", 600)), cfg.get("stop_file")
            )
        else:
            query.awaitTermination(float(cfg.get("timeout_s", 600)))
        brought = sum(p["numInputRows"] for p in query.recentProgress)
        query.stop()
        if not brought:
            break
    spark.stop()


def _passed_through(key, frames, state):
    """applyInPandasWithState that emits every row it is given, keeping a count per key and an
    event-time timeout an hour past the newest row (so Spark runs no-data batches as the watermark
    moves); a key whose timeout fires is dropped."""
    if state.hasTimedOut:
        state.remove()
        return
    count, newest = state.get if state.exists else (0, 0)
    for frame in frames:
        count += len(frame)
        newest = max(newest, int(frame["approximateArrivalTimestamp"].max().timestamp() * 1000))
        yield frame
    state.update((count, newest))
    state.setTimeoutTimestamp(newest + 3_600_000)


def chaos_shaped(spark, df, shape: str):
    """The chaos suite's query shapes over the source's rows, every row kept as read: "plain";
    "stateful" (a watermark and a Python stateful operator passing rows through); "two-source" (a union
    with Spark's rate-micro-batch source, whose rows carry streamName "rate")."""
    from pyspark.sql import functions as F

    if shape == "stateful":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return (
            df.withWatermark("approximateArrivalTimestamp", "1 hour")
            .groupBy("partitionKey")
            .applyInPandasWithState(
                _passed_through,
                df.schema,
                "count LONG, newest LONG",
                "append",
                GroupStateTimeout.EventTimeTimeout,
            )
        )
    if shape == "two-source":
        rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", "2").load()
        other = rate.select(
            F.lit(None).cast("binary").alias("data"),
            F.lit("rate").alias("streamName"),
            *(F.lit(None).cast(f.dataType).alias(f.name) for f in df.schema.fields[2:]),
        )
        return df.unionByName(other)
    return df


def table_and_stream(spark, records, table_options: dict[str, str]):
    """A DynamoDB table's changes (service=dynamodb, `table_options`) and the Kinesis stream's records in
    one stateful query: both as (source, key, sequenceNumber, approximateArrivalTimestamp), a watermark,
    and the pass-through stateful operator per source and key."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    changes = spark.readStream.format("kinesis")
    for key, value in table_options.items():
        changes = changes.option(key, value)
    shape = ("sequenceNumber", "approximateArrivalTimestamp")
    table = changes.load().select(
        F.lit("table").alias("source"), F.get_json_object("keys", "$.id").alias("key"), *shape
    )
    stream = records.select(F.lit("stream").alias("source"), F.col("partitionKey").alias("key"), *shape)
    both = stream.unionByName(table)
    return (
        both.withWatermark("approximateArrivalTimestamp", "1 hour")
        .groupBy("source", "key")
        .applyInPandasWithState(
            _passed_through,
            both.schema,
            "count LONG, newest LONG",
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    )


def run_until_idle(query, idle_s: float, timeout_s: float, stop_file: str | None = None) -> None:
    """A processingTime query run until no batch has brought rows for `idle_s` since its first batch, or
    `stop_file` appears (a drain where AvailableNow is refused: under asynchronous progress tracking)."""
    deadline = time.monotonic() + timeout_s
    rows_at: float | None = None
    seen: set[tuple[int, str]] = set()
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        if not query.isActive or (stop_file and os.path.exists(stop_file)):
            return
        for progress in query.recentProgress:
            if (progress["batchId"], progress["timestamp"]) not in seen:
                seen.add((progress["batchId"], progress["timestamp"]))
                if progress["numInputRows"] > 0 or rows_at is None:
                    rows_at = time.monotonic()
        if rows_at is not None and time.monotonic() - rows_at >= idle_s:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the query still brought rows after {timeout_s} s")


if __name__ == "__main__":
    main()
