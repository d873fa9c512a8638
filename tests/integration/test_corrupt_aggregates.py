"""A record that starts like a KPL aggregate but is corrupt is never dropped: by default it is read as
one plain record (with a warning), with onCorruptAggregate=fail the query fails naming it."""

from __future__ import annotations

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from tests.helpers import client, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now, run_available_now_failure

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def stream_with_a_corrupt_aggregate(endpoint: str) -> tuple[str, bytes, bytes]:
    kin = client(endpoint)
    stream = new_stream(kin, shards=1)
    aggregator = RecordAggregator()
    for i in range(3):
        aggregator.add_user_record(f"u{i}", f"user-{i}".encode())
    _pk, _ehk, good = aggregator.clear_and_get().get_contents()
    corrupt = good[:-1] + bytes([good[-1] ^ 1])  # the checksum no longer matches
    for data in (b"plain-before", good, corrupt, b"plain-after"):
        kin.put_record(StreamName=stream, Data=data, PartitionKey="k")
    return stream, good, corrupt


def test_passed_through_by_default(spark, kinesis_local, tmp_path):
    stream, _good, corrupt = stream_with_a_corrupt_aggregate(kinesis_local.endpoint)
    sink = Collector()
    df = reader(spark, kinesis_local.endpoint, stream, str(tmp_path / "m"), startingPosition="TRIM_HORIZON")
    run_available_now(spark, df, str(tmp_path / "c"), sink)
    got = [bytes(r["data"]) for r in sink.rows]
    assert got == [b"plain-before", b"user-0", b"user-1", b"user-2", corrupt, b"plain-after"]


def test_fails_the_query_when_asked(spark, kinesis_local, tmp_path):
    stream, _good, _corrupt = stream_with_a_corrupt_aggregate(kinesis_local.endpoint)
    df = reader(
        spark,
        kinesis_local.endpoint,
        stream,
        str(tmp_path / "m"),
        startingPosition="TRIM_HORIZON",
        onCorruptAggregate="fail",
    )
    error = run_available_now_failure(spark, df, str(tmp_path / "c"), Collector())
    assert "corrupt" in error and "onCorruptAggregate=passThrough" in error
