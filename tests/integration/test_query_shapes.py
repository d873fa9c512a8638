"""Exactly once for the queries users write: every shape of tests/support/query_shapes.py, driven as
users drive them, against the same query run as a batch over everything put.

Each shape runs (1) as `trigger(availableNow=True)` jobs from one checkpoint, a run after each round
of puts, and (2) under a processingTime trigger stopped and restarted between rounds. Shapes of two
sources get a round of records on only one of them. Stateful shapes make Spark run no-data batches and
commit offsets that did not move (the case that once made a second availableNow run fail: the records
its planning needed had been collected). One session, small data.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from tests.driver import committed, kill_in_window, output_rows, run_driver, start_driver, wait_while_running
from tests.helpers import client, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now, wait_for
from tests.support.query_shapes import SHAPES, Records, Shape, put_records

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

ROUND = 20  # records per stream per round (and a duplicate of every seventh)


class Scenario:
    """A shape's streams, what was put on them, and its queries' inputs."""

    def __init__(self, spark: Any, endpoint: str, shape: Shape, tmp: Any) -> None:
        self.spark, self.endpoint, self.shape, self.tmp = spark, endpoint, shape, tmp
        self.kin = client(endpoint)
        self.streams = {name: new_stream(self.kin, shards=2) for name in shape.streams}
        self.records = {name: Records(name) for name in shape.streams}
        self.put_rows = {name: 0 for name in shape.streams}
        self.runs = 0

    def put(self, names: tuple[str, ...] | None = None, flush: bool = False) -> None:
        """A round of records on `names` (default: every stream), or a flush record on every stream."""
        for name in names or self.shape.streams:
            rows = self.records[name].flush() if flush else self.records[name].batch(ROUND)
            put_records(self.kin, self.streams[name], rows)
            self.put_rows[name] += len(rows)

    def stream_inputs(self) -> dict[str, Any]:
        inputs = {
            name: reader(
                self.spark,
                self.endpoint,
                stream,
                str(self.tmp / f"meta-{name}"),
                startingPosition="TRIM_HORIZON",
            )
            for name, stream in self.streams.items()
        }
        if "rate" in self.shape.inputs:
            inputs["rate"] = (
                self.spark.readStream.format("rate-micro-batch")
                .option("rowsPerBatch", "3")
                .option("numPartitions", "1")
                .load()
            )
        return inputs

    def batch_inputs(self) -> dict[str, Any]:
        inputs = {
            name: self.spark.read.format("kinesis")
            .option("streamName", stream)
            .option("region", "us-east-1")
            .option("endpointUrl", self.endpoint)
            .option("startingPosition", "TRIM_HORIZON")
            .load()
            for name, stream in self.streams.items()
        }
        if "rate" in self.shape.inputs:
            inputs["rate"] = self.spark.createDataFrame([], "timestamp TIMESTAMP, value BIGINT")
        return inputs

    def query(self) -> Any:
        return self.shape.build(self.stream_inputs())

    def available_now(self, sink: Collector) -> None:
        run_available_now(self.spark, self.query(), str(self.tmp / "cp"), sink, output_mode=self.shape.mode)

    def start(self, sink: Collector) -> Any:
        return (
            self.query()
            .writeStream.outputMode(self.shape.mode)
            .foreachBatch(sink)
            .option("checkpointLocation", str(self.tmp / "cp"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def output(self, collector: Collector) -> Any:
        batches = sorted(collector.batches, key=lambda b: b[0])
        return self.shape.fold([[row.asDict() for row in rows] for _batch, rows in batches])

    def expected(self) -> Any:
        return self.shape.oracle(self.spark, self.batch_inputs())


class Progress:
    """Rows each run read from the Kinesis sources, summed over its batches from its progress (polled
    often enough that Spark's window of 100 recent updates never drops one)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], int] = {}

    def poll(self, query: Any) -> int:
        for progress in query.recentProgress:
            read = sum(
                s["numInputRows"] for s in progress["sources"] if "rate" not in s["description"].lower()
            )
            self.rows[(progress["runId"], progress["batchId"])] = read
        return sum(self.rows.values())


def assert_equal(actual: Any, expected: Any, what: str) -> None:
    missing, extra = expected - actual, actual - expected
    assert not missing and not extra, (
        f"{what}: {sum(missing.values())} rows missing (e.g. {list(missing)[:3]}), "
        f"{sum(extra.values())} rows too many (e.g. {list(extra)[:3]})"
    )


@pytest.mark.parametrize("name", list(SHAPES))
def test_available_now_runs_from_one_checkpoint_equal_the_batch_query(spark, kinesalite, tmp_path, name):
    shape = SHAPES[name]
    scenario = Scenario(spark, kinesalite.endpoint, shape, tmp_path)
    sink = Collector()
    # Each run starts after one that ended in a no-data batch where the shape holds state (its
    # watermark moved); shapes of two streams get a middle run with records on the first one only.
    rounds = (None, shape.streams[:1], None) if len(shape.streams) > 1 else (None, None)
    for names in rounds:
        scenario.put(names)
        scenario.available_now(sink)
    if shape.flush:
        scenario.put(flush=True)
        scenario.available_now(sink)
    assert_equal(scenario.output(sink), scenario.expected(), f"{name}, availableNow runs")


# Under processingTime, the default suite restarts a stateful aggregation and the two-source join; the
# other shapes' restarts are in the slow suite (`--suite slow`: CI's budget, see docs/testing.md).
IN_DEFAULT_RUN = ("windowUpdate", "join")


@pytest.mark.parametrize(
    "name", [n if n in IN_DEFAULT_RUN else pytest.param(n, marks=pytest.mark.slow) for n in SHAPES]
)
def test_a_processing_time_query_stopped_and_restarted_equals_the_batch_query(
    spark, kinesalite, tmp_path, name
):
    shape = SHAPES[name]
    scenario = Scenario(spark, kinesalite.endpoint, shape, tmp_path)
    sink, progress = Collector(), Progress()

    def run_until_read(total: int) -> Any:
        query = scenario.start(sink)
        wait_for(lambda: progress.poll(query) >= total, 120, f"{total} rows read", query)
        time.sleep(1.0)  # the no-data batches that follow (a watermark that moved)
        return query

    scenario.put()
    run_until_read(sum(scenario.put_rows.values())).stop()
    scenario.put(shape.streams[:1])  # while stopped (on the first stream only, where there are two)
    query = run_until_read(sum(scenario.put_rows.values()))
    try:
        scenario.put()
        if shape.flush:
            wait_for(
                lambda: progress.poll(query) >= sum(scenario.put_rows.values()), 120, "round 3 read", query
            )
            scenario.put(flush=True)
        expected = scenario.expected()
        wait_for(lambda: scenario.output(sink) == expected, 120, "the batch query's rows", query)
        time.sleep(1.0)  # a duplicate would come in the next batches
    finally:
        query.stop()
    assert_equal(scenario.output(sink), expected, f"{name}, processingTime stopped and restarted")


@pytest.mark.parametrize("no_data_batches", ["true", "false"])
def test_a_stateful_query_restarts_with_and_without_no_data_batches(
    spark, kinesalite, tmp_path, no_data_batches
):
    shape = SHAPES["windowUpdate"]
    scenario = Scenario(spark, kinesalite.endpoint, shape, tmp_path)
    sink = Collector()
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, no_data_batches)
    try:
        for _round in range(2):
            scenario.put()
            scenario.available_now(sink)
    finally:
        spark.conf.set(key, before)
    assert_equal(scenario.output(sink), scenario.expected(), f"noDataMicroBatches={no_data_batches}")


@pytest.mark.slow
def test_a_two_source_stateful_query_whose_driver_is_killed_mid_batch_restarts_exactly(
    spark, kinesalite, tmp_path
):
    """The join of two streams in its own driver, SIGKILLed while a batch is in flight (its tasks
    recording their ends) after a round of records on only one stream, then run to the end."""
    shape = SHAPES["join"]
    scenario = Scenario(spark, kinesalite.endpoint, shape, tmp_path)
    cfg = {
        "shape": shape.name,
        "streams": scenario.streams,
        "options": {
            "region": "us-east-1",
            "endpointUrl": kinesalite.endpoint,
            "startingPosition": "TRIM_HORIZON",
            "metadataPath": str(tmp_path / "meta"),
            "maxRecordsPerBatch": "20",
        },
        "checkpoint": str(tmp_path / "cp"),
        "out": str(tmp_path / "out"),
        "pause_s": 1.0,
    }
    scenario.put()
    process = start_driver(cfg)
    try:
        # Round 1 read whole (two batches of 20 per stream, and a no-data batch), then a round on the
        # first stream only: killed in its second batch, in which the second stream stood still
        # twice in a row (Spark committed its unchanged offset).
        wait_while_running(lambda: committed(tmp_path / "cp") >= 3, 120, "round 1 read", process)
        scenario.put(shape.streams[:1])
        begun = committed(tmp_path / "cp")
        wait_while_running(lambda: committed(tmp_path / "cp") > begun, 120, "a batch of round 2", process)
        hit = kill_in_window(process, tmp_path / "cp", tmp_path / "meta-a", "mid-batch")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert hit, "the kill found no batch in flight"
    scenario.put()
    run_driver(dict(cfg, trigger="availableNow", pause_s=0))
    by_batch: dict[int, list[dict]] = {}
    for row in output_rows(tmp_path / "out"):
        batch = row.pop("batch")
        row.pop("pos")
        by_batch.setdefault(batch, []).append(row)
    actual = shape.fold(by_batch[b] for b in sorted(by_batch))
    assert_equal(actual, scenario.expected(), "join, driver killed mid-batch")
