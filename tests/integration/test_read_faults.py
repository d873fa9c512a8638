"""The source through a proxy that throttles, fails, resets and expires iterators on GetRecords:
every record still arrives exactly once, in shard order. A short smoke version of the chaos suite."""

from __future__ import annotations

import pytest

from tests.helpers import assert_exactly_once, assert_shard_order, client, new_stream, put
from tests.integration.streaming_util import Collector, reader, run_available_now
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.slow]


def test_get_records_faults_lose_and_repeat_nothing(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=3)
    expected = put(kin, stream, 0, 1050)
    faults = {"throttle": 0.1, "internal": 0.08, "unavailable": 0.08, "expired": 0.12, "reset": 0.08}
    with FaultProxy(kinesalite.endpoint, seed=8, read_faults=faults) as proxy:
        sink = Collector()
        df = reader(
            spark,
            proxy.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",
            maxRecordsPerBatch=45,
            retryMode="standard",
            maxAttempts=20,
        )
        run_available_now(spark, df, str(tmp_path / "cp"), sink)
        injected = dict(proxy.injected)
    assert all(injected.get(kind, 0) >= 2 for kind in faults), f"too few faults of some kind: {injected}"
    assert_exactly_once(sink.rows, expected)
    assert_shard_order(sink.rows)
