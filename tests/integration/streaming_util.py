"""Running queries in-process for the tests, bounded in time."""

from __future__ import annotations

import time
from collections.abc import Callable

from pyspark_kinesis import spark_features


def reader(spark, endpoint: str, stream: str | None, meta: str, **options):
    """A streaming read of `stream` (None: the options name the streams)."""
    r = (
        spark.readStream.format("kinesis")
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .option("metadataPath", meta)
    )
    if stream is not None:
        r = r.option("streamName", stream)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


class Collector:
    """A foreachBatch sink that keeps (batch id, row) in arrival order, in the driver."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list]] = []

    def __call__(self, df, batch_id: int) -> None:
        self.batches = [b for b in self.batches if b[0] != batch_id]  # a replayed batch replaces itself
        self.batches.append((batch_id, df.collect()))

    @property
    def rows(self) -> list:
        return [r for _, rows in sorted(self.batches, key=lambda b: b[0]) for r in rows]


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, query=None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def start_running(df, checkpoint: str, collector: Collector, interval: str = "200 milliseconds"):
    """A query with a processing-time trigger, left running; the caller stops it."""
    return (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=interval)
        .start()
    )


MAX_DRAIN_RUNS = 60  # PySpark 4.0/4.1: one batch per AvailableNow run, so a drain takes several runs


def run_available_now(
    spark, df, checkpoint: str, collector: Collector, timeout_s: float = 180, output_mode: str = "append"
) -> list:
    """An AvailableNow run into `collector`. On PySpark 4.0/4.1, where Spark runs a Python source's
    AvailableNow as one batch (see `spark_features`), runs again until a run brings nothing, as a user
    draining a backlog there would: each run goes on exactly where the last one ended. Returns the
    queries run."""
    if spark_features.ADMISSION_CONTROL:
        return [_run_available_now(df, checkpoint, collector, timeout_s, output_mode)]
    queries = []
    for _run in range(MAX_DRAIN_RUNS):
        before = len(collector.rows)
        queries.append(_run_available_now(df, checkpoint, collector, timeout_s, output_mode))
        if len(collector.rows) == before:
            return queries
    raise AssertionError(f"{MAX_DRAIN_RUNS} AvailableNow runs did not drain the stream")


def _run_available_now(df, checkpoint: str, collector: Collector, timeout_s: float, output_mode: str):
    query = (
        df.writeStream.outputMode(output_mode)
        .foreachBatch(collector)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(timeout_s)
    if not finished:
        query.stop()
        raise AssertionError(f"AvailableNow query did not finish within {timeout_s} s")
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return query


def run_available_now_failure(
    spark, df, checkpoint: str, collector: Collector, timeout_s: float = 180
) -> str:
    """Run an AvailableNow query that must fail; returns its error's text."""
    query = (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(timeout_s)
    except Exception as exc:  # StreamingQueryException: the query failed, as it must
        return str(exc)
    query.stop()
    raise AssertionError("the query did not fail" if finished else f"the query ran on for {timeout_s} s")


def run_once(df, checkpoint: str, handler, timeout_s: float = 180) -> None:
    """One batch (`trigger(once=True)`) into a foreachBatch handler; the query must end without error."""
    query = (
        df.writeStream.foreachBatch(handler)
        .option("checkpointLocation", checkpoint)
        .trigger(once=True)
        .start()
    )
    assert query.awaitTermination(timeout_s), f"the query did not finish within {timeout_s} s"
    assert query.exception() is None, query.exception()
