"""The connector against the service's quotas and rules, which the local servers do not enforce: the
fault proxy's strict mode (tests/support/service_rules.py) throttles and refuses as Kinesis does and
counts every call that broke a rule. A running polling query and an availableNow backlog read, both
with iterators that expire in 5 s (the service's 5 minutes, scaled), read every record once, and
every violation counted is one the connector recovered from; the rate rules are never broken."""

from __future__ import annotations

import time

import pytest

from tests.helpers import assert_exactly_once, assert_shard_order, client, new_stream, put
from tests.integration.streaming_util import Collector, reader, run_available_now, start_running, wait_for
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark, pytest.mark.slow]

# What Kinesis may answer a well-behaved reader too: an iterator held while a stream idles longer than
# its life, the first call after a big page. Everything else is a rule the connector must keep.
RECOVERABLE = {"expired iterator used"}


def test_a_running_query_and_a_backlog_read_keep_the_services_rules(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 3000, keys=8)
    with FaultProxy(kinesalite.endpoint, strict=True, time_scale=60) as proxy:
        assert proxy.rules is not None
        collector = Collector()
        df = reader(spark, proxy.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON",
                    maxRecordsPerBatch="500")  # fmt: skip
        run_available_now(spark, df, str(tmp_path / "cp"), collector)
        query = start_running(
            reader(spark, proxy.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON"),
            str(tmp_path / "cp"),
            collector,
        )
        try:
            for round_ in range(2):
                time.sleep(6.0)  # longer than an iterator lives here
                expected += put(kin, stream, 3000 + 100 * round_, 100, keys=8)
                total = len(expected)
                wait_for(lambda total=total: len(collector.rows) >= total, 120, "every record", query)
        finally:
            query.stop()
        violations = dict(proxy.rules.violations)
        books = {operation for operation, _scope in proxy.rules.calls}
    assert {"GetRecords", "GetShardIterator", "ListShards"} <= books, f"the strict books saw only {books}"
    assert_exactly_once(collector.rows, expected)
    assert_shard_order(collector.rows)
    broken = {rule: n for rule, n in violations.items() if rule not in RECOVERABLE}
    assert not broken, f"the connector broke the service's rules: {broken}"
