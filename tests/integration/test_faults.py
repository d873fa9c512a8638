"""Exactly-once under faults: the driver killed with SIGKILL mid-batch, tasks failing on their first
attempt (before and after recording their batch end), speculative execution, and racing attempts."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest

from pyspark_kinesis.errors import DataLossError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver.discovery import resolve_streams
from pyspark_kinesis.source.executor.task import read_task
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.batch_log import loss_key, task_key
from pyspark_kinesis.source.state.offsets import ShardPlan, TaskPlan
from pyspark_kinesis.source.state.store import open_store
from tests.driver import committed, config, kill_in_window, output_rows, run_driver, start_driver
from tests.helpers import assert_exactly_once, assert_key_order, assert_shard_order, client, new_stream, put
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


@pytest.mark.slow
def test_driver_killed_mid_batch_then_restarted(kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 400)
    cfg = config(kinesalite.endpoint, stream, tmp_path, pause_s=1.5)
    hits = []
    for round_, window in enumerate(("mid-batch", "before-tasks")):
        process = start_driver(cfg)
        # Past the driver's start-up (it has committed a batch), then killed in the chosen window of a
        # batch in flight: logged and uncommitted, before or after its tasks recorded their ends.
        begun = committed(tmp_path / "cp")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and committed(tmp_path / "cp") <= begun and process.poll() is None:
            time.sleep(0.1)
        expected += put(kin, stream, 1000 * (round_ + 1), 200)
        hits.append(kill_in_window(process, tmp_path / "cp", tmp_path / "meta", window))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert all(hits), f"a kill found no batch in flight: {hits}"
    run_driver(dict(cfg, trigger="availableNow", pause_s=0))
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)
    assert_key_order(rows)


def test_task_failing_on_first_attempt_is_retried_exactly(kinesalite, tmp_path):
    """The first attempt of every task fails: even partitions just before their batch-end record is
    written, odd ones just after it is durable and before their rows leave (one run, both steps)."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 300)
    cfg = config(kinesalite.endpoint, stream, tmp_path, trigger="availableNow", master="local[2,4]")
    faults = tmp_path / "faults.log"
    run_driver(cfg, env={"PYSPARK_KINESIS_FAULT": "mixed", "PYSPARK_KINESIS_FAULT_LOG": str(faults)})
    injected = {line.split()[0] for line in faults.read_text().splitlines()} if faults.exists() else set()
    assert injected == {"before-record", "after-record"}, f"faults injected: {injected or 'none'}"
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)


def test_racing_attempts_of_one_task_emit_identical_rows(kinesalite, tmp_path, monkeypatch):
    """Two attempts of the same partition at once, while records keep arriving: whichever records
    its end first wins, and the other must emit exactly the winner's rows. Both look for a record
    before either writes one (a barrier), so they race for real: one write wins, one loses."""
    from pyspark_kinesis.source.state.batch_log import BatchEndLog

    looked, lookups, writes = threading.Barrier(2, timeout=60), [], []
    original_read, original_write = BatchEndLog.read, BatchEndLog.write

    def read_then_wait(self, token, batch, task):
        found = original_read(self, token, batch, task)
        lookups.append(found)
        if len(lookups) <= 2:  # the two attempts' first lookups: neither goes on before both looked
            with contextlib.suppress(threading.BrokenBarrierError):
                looked.wait()
        return found

    def counted_write(self, record):
        stands = original_write(self, record)
        writes.append(stands is record)
        return stands

    monkeypatch.setattr(BatchEndLog, "read", read_then_wait)
    monkeypatch.setattr(BatchEndLog, "write", counted_write)
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 500)
    config_ = parse_options(
        {
            "streamName": stream,
            "region": "us-east-1",
            "endpointUrl": kinesalite.endpoint,
            "metadataPath": str(tmp_path / "meta"),
        },
        streaming=True,
    )
    config_ = resolve_streams(config_)
    arn = config_.streams[0].resolved_arn
    shards = [s["ShardId"] for s in kin.list_shards(StreamName=stream)["Shards"]]
    plan = TaskPlan(
        "tok", 0, 0, tuple(ShardPlan(arn, s, Position.trim_horizon(), -1, -1) for s in shards), None
    )
    results: list[list] = [[], [], []]
    stop = threading.Event()

    def writer():
        n = 10_000
        while not stop.is_set() and n < 12_000:
            put(kin, stream, n, 20)
            n += 20

    def attempt(index: int) -> None:
        for batch in read_task(config_, plan):
            results[index].extend(batch.to_pylist())

    feeder = threading.Thread(target=writer)
    feeder.start()
    attempts = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
    for t in attempts:
        t.start()
    for t in attempts:
        t.join(timeout=120)
    attempt(2)  # a later retry replays the recorded end
    stop.set()
    feeder.join(timeout=60)
    assert open_store(str(tmp_path / "meta")).get(task_key("tok", 0, 0)) is not None
    assert sorted(writes) == [False, True], f"the attempts did not race: writes won/lost {writes}"
    keys = [[(r["shardId"], r["sequenceNumber"], r["subSequenceNumber"]) for r in rows] for rows in results]
    assert keys[0] == keys[1] == keys[2]
    assert len(keys[0]) >= 500


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_an_attempt_that_loses_the_race_after_data_aged_out_does_not_emit_other_rows(
    kinesis_local, tmp_path, monkeypatch, fail_on_data_loss
):
    """Attempt A read 50 records from TRIM_HORIZON and recorded them; attempt B (speculative) read the
    same shard after its first 10 records aged out, to the same end, and loses the race to record it.
    B's 40 rows are not the batch's 50: it must fail loudly, or with failOnDataLoss=false say so."""
    from pyspark_kinesis.source.state.batch_log import BatchEndLog

    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 50)
    sid = kin.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kin.get_shard_iterator(StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON")
    tenth = kin.get_records(ShardIterator=iterator["ShardIterator"], Limit=11)["Records"][10][
        "SequenceNumber"
    ]
    with FaultProxy(kinesis_local.endpoint) as proxy:
        options = {
            "streamName": stream,
            "region": "us-east-1",
            "endpointUrl": proxy.endpoint,
            "metadataPath": str(tmp_path / "meta"),
            "failOnDataLoss": str(fail_on_data_loss).lower(),
        }
        config_ = resolve_streams(parse_options(options, streaming=True))
        plan = TaskPlan(
            "tok",
            0,
            0,
            (ShardPlan(config_.streams[0].resolved_arn, sid, Position.trim_horizon(), -1, -1),),
            None,
        )
        winner = [r for b in read_task(config_, plan) for r in b.to_pylist()]  # attempt A
        assert len(winner) == 50
        store = open_store(str(tmp_path / "meta"))
        record = store.get(task_key("tok", 0, 0))
        store.delete_folder("tok/batch-000000000000")
        proxy.trim(sid, tenth)

        write = BatchEndLog.write

        def a_records_first(self, mine):  # A's record lands between B's read and B's write
            store.put_if_absent(task_key("tok", 0, 0), record)
            return write(self, mine)

        monkeypatch.setattr(BatchEndLog, "write", a_records_first)
        if fail_on_data_loss:
            with pytest.raises(DataLossError, match="past retention"):
                list(read_task(config_, plan))
        else:
            loser = [r for b in read_task(config_, plan) for r in b.to_pylist()]
            assert [r["sequenceNumber"] for r in loser] == [r["sequenceNumber"] for r in winner[10:]]
            # noted beside the winner's record, for the driver to report
            assert b"about 10 records are past retention" in (store.get(loss_key("tok", 0, 0)) or b"")
