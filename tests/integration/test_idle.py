"""An idle stream plans no batch: the driver looks at idle shards (one GetRecords of one record per
shard per idlePollIntervalMs) and plans a batch only for a shard a look finds something in. Counted
through the fault proxy (which tells the driver's calls from the executors' by their User-Agent) and
from the query's progress and metadataPath, with polling and with enhanced fan-out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers import assert_exactly_once, client, new_stream, put
from tests.integration.streaming_util import Collector, reader, start_running, wait_for
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]
QUIET_S = 6.0


def written(meta: Path) -> dict[str, float]:
    """Every file under metadataPath but the running query's live records, with its modification time."""
    return {str(p): p.stat().st_mtime for p in meta.rglob("*") if p.is_file() and "live" not in p.parts}


@pytest.mark.parametrize("mode", ["polling", "efo"])
def test_an_idle_query_plans_no_batch_and_writes_nothing(spark, kinesis_local, tmp_path, mode):
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 40)
    sink = Collector()
    meta = tmp_path / "meta"
    with FaultProxy(kinesis_local.endpoint) as proxy:
        df = reader(
            spark, proxy.endpoint, stream, str(meta), startingPosition="TRIM_HORIZON", consumerType=mode
        )
        query = start_running(df, str(tmp_path / "cp"), sink, "100 milliseconds")
        try:
            wait_for(lambda: len(sink.rows) >= 40, 120, "the records put before the start", query)
            # The batch after the one that read them finds both shards at the tip: then nothing.
            wait_for(lambda: len(sink.batches) >= 2 and not sink.batches[-1][1], 30, "an empty batch", query)
            time.sleep(1.0)
            batches, files = len(sink.batches), written(meta)
            reads = proxy.calls[("reader", "GetRecords")]
            looks = proxy.calls[("planner", "GetRecords")]
            time.sleep(QUIET_S)
            assert len(sink.batches) == batches, f"{len(sink.batches) - batches} batches on an idle stream"
            assert written(meta) == files, "metadataPath was written while the stream was idle"
            assert proxy.calls[("reader", "GetRecords")] == reads, "executors read an idle stream"
            quiet_looks = proxy.calls[("planner", "GetRecords")] - looks
            # Two shards looked at about every 500 ms (idlePollIntervalMs), no faster.
            assert 2 <= quiet_looks <= 2 * (QUIET_S / 0.5 + 2), f"{quiet_looks} looks in {QUIET_S} s"
            expected += put(kin, stream, 100, 5)  # and the first records after the quiet spell arrive
            wait_for(lambda: len(sink.rows) >= 45, 60, "the records put after the quiet spell", query)
            time.sleep(1.0)
        finally:
            query.stop()
    assert_exactly_once(sink.rows, expected)
