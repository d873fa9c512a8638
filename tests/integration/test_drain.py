"""drainInOneBatch: a run of one batch (trigger(once=True); trigger(availableNow=True) on PySpark 4.0/4.1,
which runs a Python source's AvailableNow as one batch) reads the whole backlog there at its start, each
shard in chunks bounded by the per-shard limits, exactly once, also when its driver is killed mid-batch
and the batch is replayed from its recorded chunks; a trigger that runs on fails at its second batch
naming the option."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pyspark_kinesis import spark_features
from tests.driver import committed, config, in_flight, output_rows, run_driver, start_driver, task_records
from tests.helpers import assert_exactly_once, assert_key_order, assert_shard_order, client, new_stream, put
from tests.integration.streaming_util import Collector, reader
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def chunked_shards(meta) -> int:
    """Shard reads recorded in more than one chunk, over every batch-end record under `meta`."""
    import orjson

    count = 0
    for path in meta.glob("*/batch-*/task-*.json"):
        for shards in orjson.loads(path.read_bytes())["streams"].values():
            count += sum(1 for end in shards.values() if len(end.get("chunks", ())) > 1)
    return count


def run(df, checkpoint: str, sink: Collector, trigger: str) -> None:
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    writer = writer.trigger(once=True) if trigger == "once" else writer.trigger(availableNow=True)
    query = writer.start()
    assert query.awaitTermination(180), "the run did not end within 180 s"
    assert query.exception() is None, query.exception()


@pytest.mark.parametrize("trigger", ["once", "availableNow"])
def test_one_run_reads_the_backlog_in_one_batch_of_bounded_chunks(spark, kinesalite, tmp_path, trigger):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 450)
    options = dict(startingPosition="TRIM_HORIZON", maxRecordsPerShard=50, maxRecordsPerBatch=100)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    run(
        reader(spark, kinesalite.endpoint, stream, meta, drainInOneBatch="true", **options), cp, sink, trigger
    )
    assert_exactly_once(sink.rows, expected)
    if trigger == "availableNow" and spark_features.ADMISSION_CONTROL:
        # PySpark 4.2+ runs AvailableNow in bounded batches by itself: the option does not apply.
        assert len(sink.batches) >= 5 and all(len(rows) <= 100 for _, rows in sink.batches)
        return
    assert len(sink.batches) == 1  # one batch, beyond maxRecordsPerBatch and the per-shard limits
    assert chunked_shards(tmp_path / "meta") == 2  # each shard read in chunks of at most 50 records
    late = put(kin, stream, 1000, 60)
    run(
        reader(spark, kinesalite.endpoint, stream, meta, drainInOneBatch="true", **options), cp, sink, trigger
    )
    assert_exactly_once(sink.rows, expected + late)
    assert len(sink.batches) == 2
    assert_shard_order(sink.rows)


def test_a_trigger_that_runs_on_fails_at_its_second_batch_naming_the_option(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 20)
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        drainInOneBatch="true",
    )
    query = (
        df.writeStream.foreachBatch(Collector())
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        with pytest.raises(Exception) as caught:
            query.awaitTermination(120)
    finally:
        query.stop()
    text = str(caught.value)
    assert "Kinesis option 'drainInOneBatch'" in text and "second batch" in text, text[-2000:]


TWO_EXECUTORS = "local-cluster[2,1,1024]"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step", "master"),
    [("before-record", "local[2,4]"), ("after-record", "local[2,4]"), ("after-record", TWO_EXECUTORS)],
)
def test_a_task_failing_its_first_attempt_replays_its_chunks(kinesalite, tmp_path, step, master):
    """On two executors the retry may run where the first attempt's spill files are not: it reads its
    recorded chunks from Kinesis again, as any replay does."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 300)
    faults = tmp_path / "faults.log"  # each injected failure, from whichever executor it ran on
    env = {"PYSPARK_KINESIS_FAULT": step, "PYSPARK_KINESIS_FAULT_LOG": str(faults)}
    conf = {f"spark.executorEnv.{k}": v for k, v in env.items()} | {"spark.task.maxFailures": "4"}
    cfg = config(kinesalite.endpoint, stream, tmp_path, trigger="once", master=master, conf=conf)
    cfg["options"] |= {"drainInOneBatch": "true", "maxRecordsPerShard": "40"}
    run_driver(cfg, env=env)
    injected = faults.read_text().split("\n") if faults.exists() else []
    assert len([line for line in injected if line.startswith(step)]) >= 2, (
        "the fault was not injected in both tasks, so this test proved nothing"
    )
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)
    # One batch of about 150 records per shard, above maxRecordsPerShard: read in chunks. (Its records,
    # which show the chunks, are gone: the run after it committed the batch.)
    assert {r["batch"] for r in rows} == {0}


@pytest.mark.slow
@pytest.mark.parametrize("master", ["local[2]", TWO_EXECUTORS])
def test_driver_killed_mid_batch_then_restarted_replays_the_drained_batch(kinesalite, tmp_path, master):
    """The driver is killed once the drained batch's tasks recorded their ends (the rows are being
    written); the restarted run replays that batch from its recorded chunks, and the next brings nothing.
    On two executors, the replay runs on executors that never held the first attempt's spill."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 400)
    cfg = config(kinesalite.endpoint, stream, tmp_path, trigger="once", pause_s=3, master=master)
    cfg["options"] |= {"drainInOneBatch": "true", "maxRecordsPerShard": "40"}
    process = start_driver(cfg)
    hit = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        batch = in_flight(tmp_path / "cp")
        if batch is not None and task_records(tmp_path / "meta", batch) == 2:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            hit = batch
            break
        time.sleep(0.05)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert hit == 0 and committed(tmp_path / "cp") == 0, "the kill found no drained batch in flight"
    more = put(kin, stream, 1000, 50)  # after the kill: not in the replayed batch, read by a later run
    run_driver(dict(cfg, pause_s=0))
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected + more)
    assert_shard_order(rows)
    assert_key_order(rows)


def test_enhanced_fan_out_drains_in_one_batch_too(spark, kinesis_local, tmp_path):
    """Each chunk of a shard continues the subscription the last one kept (SubscribeToShard; through
    the fault proxy, which puts the initial-response kinesis-local leaves out in front of its events)."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 300)
    options = dict(startingPosition="TRIM_HORIZON", maxRecordsPerShard=40, consumerType="efo")
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    with FaultProxy(kinesis_local.endpoint) as proxy:
        run(reader(spark, proxy.endpoint, stream, meta, drainInOneBatch="true", **options), cp, sink, "once")
    assert_exactly_once(sink.rows, expected)
    assert len(sink.batches) == 1 and chunked_shards(tmp_path / "meta") == 2
    assert_shard_order(sink.rows)
