"""valueFormat=glue where task placement and Spark's progress tracking change: two executors
(local-cluster[2,1,1024], each with its own Python workers and so its own cache of schema versions),
asynchronous progress tracking, and a driver SIGKILL then restart, after which Spark plans again from an
older durable batch. Every record, written with either of two schema versions, reaches the output
once, decoded into the reader's version (tests/integration/driver_app.py runs the query)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from tests.driver import config, durable_offsets, output_rows, ran_batches, start_driver, wait_while_running
from tests.helpers import client, new_stream
from tests.integration.test_glue_values import V1, V2, framed, registry  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.slow]


def test_glue_values_on_two_executors_under_async_progress_survive_a_driver_kill(
    kinesalite,
    registry,  # noqa: F811
    tmp_path,
):
    endpoint, name, v1, v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    records = [(n, framed(v1, V1, {"id": n, "item": f"i{n}"}, n % 2 == 0)) for n in range(150)]
    records += [
        (n, framed(v2, V2, {"id": n, "item": f"i{n}", "qty": n}, n % 3 == 0)) for n in range(150, 300)
    ]
    for start in range(0, len(records), 100):
        kin.put_records(
            StreamName=stream,
            Records=[{"Data": r, "PartitionKey": str(n)} for n, r in records[start : start + 100]],
        )
    cfg = config(
        kinesalite.endpoint,
        stream,
        tmp_path,
        sink="foreach",
        async_ms=2000,
        interval="100 milliseconds",
        master="local-cluster[2,1,1024]",
        conf={"spark.task.maxFailures": "4"},
    )
    cfg["options"] |= {
        "maxRecordsPerBatch": "30",
        "valueFormat": "glue",
        "schemaRegistryName": name,
        "schemaName": "orders",  # the latest: version 2
        "schemaRegistryEndpointUrl": endpoint,
        "valueColumns": "flatten",
    }
    out, cp = tmp_path / "out", tmp_path / "cp"
    driver = start_driver(cfg)
    try:
        wait_while_running(
            lambda: (
                len(ran_batches(out)) >= 3
                and max(ran_batches(out)) > max(durable_offsets(cp), default=-1) + 1
            ),
            240,
            "batches beyond the durable offset log",
            driver,
        )
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        driver = start_driver(cfg)  # Spark plans again from the last durable batch
        wait_while_running(lambda: len(output_rows(out)) >= len(records), 240, "every record", driver)
        time.sleep(2)  # a batch planned again and still running would show up as a duplicate
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
    rows = output_rows(out)
    seen = Counter(r["id"] for r in rows)
    assert set(seen) == set(range(300)), f"lost: {sorted(set(range(300)) - set(seen))[:10]}"
    assert max(seen.values()) == 1, f"duplicated: {[k for k, v in seen.items() if v > 1][:10]}"
    assert all(r["item"] == f"i{r['id']}" for r in rows)
    assert all(r["qty"] == (r["id"] if r["id"] >= 150 else None) for r in rows)
    assert len({r["batch"] for r in rows}) >= 5  # many batches, spread over the restart
