"""On a real multi-process Spark cluster (standalone master, two workers on 127.0.0.2 and 127.0.0.3):
speculative attempts really run, enhanced fan-out subscriptions stay with their holder while tasks
move between the executors, and a worker lost mid-batch loses and repeats nothing (last: it leaves
the module's cluster one worker short).

Spark never speculates in local modes, nor on a host where the task already runs, so these are the
tests that show speculative copies of a task emitting exactly the recorded rows."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.driver import committed, config, in_flight, output_rows, run_driver, start_driver, task_records
from tests.helpers import (
    assert_exactly_once,
    assert_key_order,
    assert_shard_order,
    assert_subscribe_rules,
    client,
    new_stream,
    put,
)
from tests.support.cluster import StandaloneCluster
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def standalone():
    with StandaloneCluster(workers=2, cores=2) as cluster:
        yield cluster


def cluster_conf(events: Path | None = None, **extra: str) -> dict[str, str]:
    conf = {
        # Executors get the environment the local servers need (dummy credentials, no metadata probe).
        "spark.executorEnv.AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        "spark.executorEnv.AWS_EC2_METADATA_DISABLED": "true",
        "spark.cores.max": "4",
        **extra,
    }
    if events is not None:
        events.mkdir(exist_ok=True)
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(events),
            "spark.eventLog.compress": "false",
        }
    return conf


def speculative_attempts(events: Path) -> int:
    return sum(
        f.read_text(errors="replace").count('"Speculative":true') for f in events.rglob("*") if f.is_file()
    )


def test_speculative_attempts_emit_exactly_the_recorded_rows(standalone, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=4)
    expected = put(kin, stream, 0, 600)
    conf = cluster_conf(
        tmp_path / "events",
        **{
            "spark.speculation": "true",
            "spark.speculation.interval": "50ms",
            "spark.speculation.quantile": "0.1",
            "spark.speculation.multiplier": "1.1",
            "spark.speculation.minTaskRuntime": "10ms",
        },
    )
    # Some reads held back (up to 1.5 s) so that task times differ and Spark speculates.
    with FaultProxy(kinesalite.endpoint, seed=5, delay=(0.3, 1.5)) as proxy:
        cfg = config(
            proxy.endpoint, stream, tmp_path, trigger="availableNow", conf=conf, master=standalone.url
        )
        run_driver(cfg, timeout_s=300)
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)
    assert speculative_attempts(tmp_path / "events") >= 1, (
        "no speculative attempt ran: this test showed nothing"
    )


def task_hosts(events: Path) -> set[str]:
    """The hosts on which the application's tasks ran (from Spark's event log)."""
    import json

    hosts: set[str] = set()
    for log in (f for f in events.rglob("*") if f.is_file()):
        for line in log.read_text(errors="replace").splitlines():
            if '"Event":"SparkListenerTaskEnd"' in line:
                hosts.add(json.loads(line)["Task Info"]["Host"])
    return hosts


def test_efo_subscriptions_stay_with_their_holder_when_tasks_move_between_executors(
    standalone, kinesis_local, tmp_path
):
    """Spark places a shard's tasks on either executor, batch after batch. Each shard's subscription
    stays with the agent that opened it and the other executor's reads take their events from there:
    a handful of SubscribeToShard calls for the whole run, each keeping the service's spacing across
    the query (not per executor), and every record exactly once. (Subscribing where each task lands,
    the executors' agents took shards from each other: a new subscription, or a refusal and a 5 s wait,
    nearly every batch.)"""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=4)
    stop = tmp_path / "stop"
    with FaultProxy(kinesis_local.endpoint) as proxy:
        cfg = config(
            proxy.endpoint,
            stream,
            tmp_path,
            conf=cluster_conf(tmp_path / "events"),
            master=standalone.url,
            interval="500 milliseconds",
            until_idle_s=60,
            timeout_s=240,
            stop_file=str(stop),
        )
        cfg["options"].update(consumerType="efo", maxRecordsPerBatch="400")
        # An empty stream plans no batch: a first round starts the query's batches.
        expected: list[str] = put(kin, stream, 0, 40, keys=16)
        process = start_driver(cfg)
        try:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and committed(tmp_path / "cp") < 1 and process.poll() is None:
                time.sleep(0.2)
            assert process.poll() is None, Path(cfg["checkpoint"] + ".log").read_text()[-3000:]
            for round_ in range(1, 15):
                expected += put(kin, stream, round_ * 40, 40, keys=16)
                time.sleep(1.0)
            while time.monotonic() < deadline and process.poll() is None:
                if len(output_rows(tmp_path / "out")) >= len(expected):
                    break
                time.sleep(0.5)
            stop.write_text("done")
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_key_order(rows)
    assert len(task_hosts(tmp_path / "events")) == 2, (
        "tasks ran on one executor only: this test shows nothing"
    )
    batches = committed(tmp_path / "cp")
    by_shard: dict[str, list[tuple[float, str]]] = {}
    for at, _pid, _consumer, shard, outcome in proxy.subscriptions:
        by_shard.setdefault(shard, []).append((at, outcome))
    for calls in by_shard.values():
        assert_subscribe_rules(calls)
    ok = [s for s in proxy.subscriptions if s[4] == "ok"]
    assert len(ok) <= 2 * 4, (
        f"{len(ok)} subscriptions for {batches} batches on 4 shards: {proxy.subscriptions}"
    )
    assert batches >= 8, f"only {batches} batches: the test shows nothing"


def test_a_worker_lost_mid_batch_loses_and_repeats_nothing(standalone, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=4)
    expected = put(kin, stream, 0, 300, keys=16)
    cfg = config(
        kinesalite.endpoint, stream, tmp_path, conf=cluster_conf(), master=standalone.url, pause_s=0.5
    )
    cfg["options"]["maxRecordsPerBatch"] = "80"
    process = start_driver(cfg)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and committed(tmp_path / "cp") < 1 and process.poll() is None:
            time.sleep(0.1)
        expected += put(kin, stream, 1000, 200, keys=16)
        # Lose a worker while a batch is in flight and some of its tasks have recorded their ends.
        hit = None
        while time.monotonic() < deadline and process.poll() is None and hit is None:
            batch = in_flight(tmp_path / "cp")
            if batch is not None and task_records(tmp_path / "meta", batch) > 0:
                standalone.kill_worker(0)
                hit = batch
            time.sleep(0.01)
        assert hit is not None, "no batch in flight to lose a worker in"
        after = committed(tmp_path / "cp")
        while (
            time.monotonic() < deadline + 60
            and committed(tmp_path / "cp") < after + 2
            and process.poll() is None
        ):
            time.sleep(0.2)
        assert committed(tmp_path / "cp") >= after + 2, "the query did not go on on the remaining worker"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    run_driver(dict(cfg, trigger="availableNow", pause_s=0), timeout_s=300)
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)
    assert_key_order(rows)
