"""Resharding (split, merge, UpdateShardCount) while the query runs, between batches and while it is
stopped: every record exactly once, and per partition key in the order it was put (parents first)."""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import UTC, datetime

import pytest

from tests.helpers import (
    assert_exactly_once,
    assert_key_order,
    assert_shard_order,
    client,
    merge,
    new_stream,
    open_shards,
    put,
    split,
    wait_active,
)
from tests.integration.streaming_util import Collector, reader, run_available_now, start_running, wait_for

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def reshard_randomly(kin, stream: str, rng: random.Random, steps: int, put_between) -> None:
    for _ in range(steps):
        shards = open_shards(kin, stream)
        if len(shards) > 1 and rng.random() < 0.4:
            i = rng.randrange(len(shards) - 1)
            merge(kin, stream, shards[i], shards[i + 1])
        else:
            split(kin, stream, rng.choice(shards))
        put_between()


def check(rows, expected) -> None:
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)
    assert_key_order(rows)


@pytest.mark.parametrize("server", ["kinesis-local", "kinesalite"])
def test_split_and_merge_while_the_query_runs(spark, server, tmp_path, request):
    endpoint = request.getfixturevalue(server.replace("-", "_")).endpoint
    kin = client(endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 100, keys=12)
    sink = Collector()
    df = reader(
        spark,
        endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        shardDiscoveryIntervalMs=500,
        maxRecordsPerBatch=60,
    )
    query = start_running(df, str(tmp_path / "cp"), sink, "200 milliseconds")
    counter = [100]

    def more():
        expected.extend(put(kin, stream, counter[0], 40, keys=12))
        counter[0] += 40
        time.sleep(0.3)

    try:
        reshard_randomly(kin, stream, random.Random(11), 6, more)
        wait_for(lambda: len(sink.rows) >= len(expected), 180, "every record", query)
        time.sleep(2)
    finally:
        query.stop()
    check(sink.rows, expected)


def test_many_generations_while_the_query_is_stopped(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    expected = put(kin, stream, 0, 80, keys=10)
    counter = [80]

    def more():
        expected.extend(put(kin, stream, counter[0], 30, keys=10))
        counter[0] += 30

    def run():
        run_available_now(
            spark,
            reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON"),
            cp,
            sink,
        )

    run()
    reshard_randomly(kin, stream, random.Random(5), 7, more)  # several generations of splits and merges
    run()
    reshard_randomly(kin, stream, random.Random(6), 4, more)
    run()
    check(sink.rows, expected)
    # Finished parents are dropped once their children started: the offset does not grow with history.
    last = max((tmp_path / "cp" / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    offset = json.loads(last.read_text().splitlines()[-1])
    every_shard = kin.list_shards(StreamName=stream)["Shards"]
    (shards,) = offset["streams"].values()
    assert len(shards) <= len(open_shards(kin, stream)) + 2 < len(every_shard)


def test_one_shard_split_three_times_then_merged_back(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    expected = put(kin, stream, 0, 50, keys=16)
    n = 50
    for _ in range(3):  # 1 -> 2 -> 3 -> 4 shards, always splitting the widest
        shards = open_shards(kin, stream)
        widest = max(
            shards,
            key=lambda s: int(s["HashKeyRange"]["EndingHashKey"]) - int(s["HashKeyRange"]["StartingHashKey"]),
        )
        split(kin, stream, widest)
        expected += put(kin, stream, n, 30, keys=16)
        n += 30
        run_available_now(
            spark,
            reader(
                spark,
                kinesis_local.endpoint,
                stream,
                meta,
                startingPosition="TRIM_HORIZON",
                maxRecordsPerBatch=25,
            ),
            cp,
            sink,
        )
    while len(open_shards(kin, stream)) > 1:
        shards = open_shards(kin, stream)
        merge(kin, stream, shards[0], shards[1])
        expected += put(kin, stream, n, 30, keys=16)
        n += 30
    run_available_now(
        spark, reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON"), cp, sink
    )
    check(sink.rows, expected)


def test_update_shard_count_up_and_down_to_non_powers_of_two(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=1)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    expected = put(kin, stream, 0, 60, keys=16)
    n = 60
    for target in (2, 4, 8, 16, 3, 5, 1):  # 1 -> 16 and back, through non-powers of two
        for _ in range(20):
            current = len(open_shards(kin, stream))
            if current == target:
                break
            step = min(target, current * 2) if target > current else max(target, (current + 1) // 2)
            kin.update_shard_count(StreamName=stream, TargetShardCount=step, ScalingType="UNIFORM_SCALING")
            wait_active(kin, stream)
        expected += put(kin, stream, n, 40, keys=16)
        n += 40
        if target in (16, 5, 1):
            run_available_now(
                spark,
                reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON"),
                cp,
                sink,
            )
    check(sink.rows, expected)


@pytest.mark.parametrize("start", ["TRIM_HORIZON", "AT_TIMESTAMP", "LATEST"])
def test_fresh_query_over_a_resharded_stream(spark, kinesis_local, tmp_path, start):
    """A new query on a stream with closed shards still in retention: TRIM_HORIZON reads them, parents
    first; AT_TIMESTAMP reads from that time in every generation; LATEST reads only what comes next."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    early = put(kin, stream, 0, 40, keys=6)
    split(kin, stream, open_shards(kin, stream)[0])
    time.sleep(1.2)
    moment = datetime.now(UTC).isoformat()
    time.sleep(1.2)
    middle = put(kin, stream, 40, 40, keys=6)
    shards = open_shards(kin, stream)
    merge(kin, stream, shards[0], shards[1])
    middle += put(kin, stream, 80, 40, keys=6)
    option = {"TRIM_HORIZON": "TRIM_HORIZON", "AT_TIMESTAMP": f"AT_TIMESTAMP:{moment}", "LATEST": "LATEST"}[
        start
    ]
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    run_available_now(
        spark, reader(spark, kinesis_local.endpoint, stream, meta, startingPosition=option), cp, sink
    )
    later = put(kin, stream, 200, 40, keys=6)
    split(kin, stream, open_shards(kin, stream)[-1])
    later += put(kin, stream, 240, 40, keys=6)
    run_available_now(
        spark, reader(spark, kinesis_local.endpoint, stream, meta, startingPosition=option), cp, sink
    )
    expected = {"TRIM_HORIZON": early + middle + later, "AT_TIMESTAMP": middle + later, "LATEST": later}[
        start
    ]
    check(sink.rows, expected)


@pytest.mark.slow
def test_reshard_while_the_driver_is_killed(kinesis_local, tmp_path):
    import os
    import signal

    from tests.driver import committed, config, kill_in_window, output_rows, run_driver, start_driver

    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 150, keys=10)
    cfg = config(kinesis_local.endpoint, stream, tmp_path, pause_s=1.0)
    cfg["options"]["shardDiscoveryIntervalMs"] = "500"
    rng = random.Random(3)
    counter = [150]

    def more():
        expected.extend(put(kin, stream, counter[0], 30, keys=10))
        counter[0] += 30

    hits = []
    for window in ("mid-batch", "before-tasks"):
        process = start_driver(cfg)
        begun = committed(tmp_path / "cp")
        deadline = time.monotonic() + 120  # past the driver's start-up: it has committed a batch
        while time.monotonic() < deadline and committed(tmp_path / "cp") <= begun and process.poll() is None:
            time.sleep(0.1)
        reshard_randomly(kin, stream, rng, 2, more)
        hits.append(kill_in_window(process, tmp_path / "cp", tmp_path / "meta", window))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        reshard_randomly(kin, stream, rng, 2, more)  # and more while it is down
    assert all(hits), f"a kill found no batch in flight: {hits}"
    run_driver(dict(cfg, trigger="availableNow", pause_s=0))
    check(output_rows(tmp_path / "out"), expected)


def test_concurrent_puts_during_reshards_keep_key_order(spark, kinesalite, tmp_path):
    """A producer thread puts without pause while shards split and merge under a running query."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected: list[str] = []
    stop = threading.Event()

    def producer():
        n = 0
        while not stop.is_set() and n < 3000:
            expected.extend(put(kin, stream, n, 50, keys=20))
            n += 50
            time.sleep(0.05)

    sink = Collector()
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        shardDiscoveryIntervalMs=300,
    )
    query = start_running(df, str(tmp_path / "cp"), sink, "200 milliseconds")
    thread = threading.Thread(target=producer)
    thread.start()
    try:
        reshard_randomly(kin, stream, random.Random(2), 6, lambda: time.sleep(0.4))
        stop.set()
        thread.join(timeout=60)
        wait_for(lambda: len(sink.rows) >= len(expected), 180, "every record", query)
        time.sleep(2)
    finally:
        stop.set()
        query.stop()
    check(sink.rows, expected)


@pytest.mark.slow
def test_an_on_demand_stream_switched_to_provisioned_and_resharded_reads_exactly_once(
    spark, kinesis_local, tmp_path
):
    """An on-demand stream (the service picks its shards: 4 here), read, then switched to provisioned
    capacity with UpdateStreamMode (it goes through UPDATING, readable as ever), resharded down to 2
    and up to 3 with UpdateShardCount while the query is down, and read on: every record once, per-key
    order kept."""
    kin = client(kinesis_local.endpoint)
    stream = f"on-demand-{tmp_path.name[-12:]}".replace("_", "-")
    kin.create_stream(StreamName=stream, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    wait_active(kin, stream)
    arn = kin.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()

    def run() -> None:
        df = reader(spark, kinesis_local.endpoint, stream, meta, startingPosition="TRIM_HORIZON")
        run_available_now(spark, df, cp, sink)

    expected = put(kin, stream, 0, 80, keys=16)
    run()
    kin.update_stream_mode(StreamARN=arn, StreamModeDetails={"StreamMode": "PROVISIONED"})
    wait_active(kin, stream)
    expected += put(kin, stream, 80, 40, keys=16)
    for target in (2, 3):
        kin.update_shard_count(StreamName=stream, TargetShardCount=target, ScalingType="UNIFORM_SCALING")
        wait_active(kin, stream)
        expected += put(kin, stream, 120 + 40 * target, 40, keys=16)
    run()
    mode = kin.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamModeDetails"]
    assert mode["StreamMode"] == "PROVISIONED" and len(open_shards(kin, stream)) == 3
    check(sink.rows, expected)
