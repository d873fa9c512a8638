"""A DynamoDB table's changes (service=dynamodb, against moto) where task placement and Spark's commit
order matter: on two executors (local-cluster[2,1,1024]), in one stateful query with a Kinesis stream
(a union, a watermark and a stateful operator per key), its driver SIGKILLed while a batch is in flight
and the query run again to the end. Every change and every record comes out once, each item's changes
in the order the table made them (tests/integration/driver_app.py runs the query)."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from tests.driver import (
    committed,
    config,
    in_flight,
    output_rows,
    run_driver,
    start_driver,
    wait_while_running,
)
from tests.helpers import client, new_stream, put
from tests.integration.test_dynamodb_streams_api import dynamodb, table

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

ITEMS = 15


def test_a_tables_changes_and_a_stream_in_one_stateful_query_on_two_executors_survive_a_driver_kill(
    kinesalite, local_sts, tmp_path
):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    name = f"orders-{uuid.uuid4().hex[:8]}"
    table(local_sts.endpoint, name)
    items = dynamodb(local_sts.endpoint)
    put_records: list[str] = []

    def round_of_changes(n: int) -> None:
        for item in range(ITEMS):
            items.put_item(TableName=name, Item={"id": {"S": f"i-{item}"}, "round": {"N": str(n)}})
        put_records.extend(put(kin, stream, n * 30, 30))

    cfg = config(
        kinesalite.endpoint,
        stream,
        tmp_path,
        master="local-cluster[2,1,1024]",
        pause_s=1.0,
        conf={"spark.task.maxFailures": "4"},
        table_options={
            "service": "dynamodb",
            "streamName": name,
            "region": "us-east-1",
            "endpointUrl": local_sts.endpoint,
            "startingPosition": "TRIM_HORIZON",
            "metadataPath": str(tmp_path / "meta-table"),
            "maxRecordsPerBatch": "8",
        },
    )
    cfg["options"]["maxRecordsPerBatch"] = "20"
    round_of_changes(0)
    cp = tmp_path / "cp"
    process = start_driver(cfg)
    try:
        wait_while_running(lambda: committed(cp) >= 2, 180, "two batches of round 0", process)
        round_of_changes(1)
        begun = committed(cp)
        wait_while_running(lambda: committed(cp) > begun, 120, "a batch of round 1", process)
        wait_while_running(lambda: in_flight(cp) is not None, 60, "a batch in flight", process)
        killed_in = in_flight(cp)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert killed_in is not None
    round_of_changes(2)
    run_driver(dict(cfg, trigger="availableNow", pause_s=0))

    rows = output_rows(tmp_path / "out")
    changes = [(r["key"], int(r["sequenceNumber"]), r["batch"]) for r in rows if r["source"] == "table"]
    assert sorted(k for k, _s, _b in changes) == sorted(f"i-{i}" for i in range(ITEMS) for _ in range(3))
    assert len({(k, s) for k, s, _b in changes}) == len(changes), "a change came out twice"
    for item in range(ITEMS):  # each item's changes in the table's order: batches follow sequence numbers
        mine = sorted((s, b) for k, s, b in changes if k == f"i-{item}")
        assert [b for _s, b in mine] == sorted(b for _s, b in mine), f"i-{item} out of order"
    records = [r for r in rows if r["source"] == "stream"]
    assert len(records) == len(put_records) == 90
    assert len({r["sequenceNumber"] for r in records}) == 90, "a record came out twice"
