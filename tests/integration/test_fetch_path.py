"""The read path's economy, checked by counting calls at a proxy (behaviour, not timings): a shard's
read stops at the first response that shows it at the tip, calls on one shard are paced to the
service's quota, and a running query over an idle stream never makes the driver call GetRecords and
polls each shard no faster than idlePollIntervalMs."""

from __future__ import annotations

import itertools
import time

import pyarrow.compute as pc
import pytest

from pyspark_kinesis.aws.kinesis import KinesisProxy
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.shard_read import ShardLimits, fetch_shard
from tests.helpers import client, new_stream, put
from tests.integration.streaming_util import Collector, reader, run_available_now, start_running, wait_for
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis]


def proxy_for(endpoint: str, stream: str) -> KinesisProxy:
    spec = StreamSpec(stream, AwsSettings("us-east-1", endpoint), arn=f"arn:test:{stream}")
    return KinesisProxy(spec, agent="reader")


def get_records_times(proxy: FaultProxy) -> list[float]:
    return [t for t, _agent, operation in proxy.call_times if operation == "GetRecords"]


def test_a_read_stops_at_the_tip_after_one_call(any_kinesis):
    kin = client(any_kinesis.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 40)
    shard = kin.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    with FaultProxy(any_kinesis.endpoint) as counting:
        source = proxy_for(counting.endpoint, stream)
        cols, first = fetch_shard(source, shard, Position.trim_horizon(), ShardLimits(100_000, 1 << 26))
        # kinesalite says MillisBehindLatest 0 with the records; kinesis-local may only on the next call.
        assert len(cols) == 40 and (first.at_tip or any_kinesis.kind == "kinesis-local")
        cols, second = fetch_shard(source, shard, first.reached, ShardLimits(100_000, 1 << 26))
        assert len(cols) == 0 and second.at_tip and second.reached == first.reached
    # kinesalite reports MillisBehindLatest 0 at once; kinesis-local may need a call to get there.
    assert len(get_records_times(counting)) <= 3
    # The second read continued with the iterator the first one ended with: no GetShardIterator.
    assert counting.calls[("reader", "GetShardIterator")] == 1, counting.calls


def test_calls_on_one_shard_are_paced_to_the_read_quota(kinesalite):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    kin.put_records(
        StreamName=stream, Records=[{"Data": b"x" * 5000, "PartitionKey": f"k{i}"} for i in range(20)]
    )
    shard = kin.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    with FaultProxy(kinesalite.endpoint) as counting:
        source = proxy_for(counting.endpoint, stream)
        unpaced = ShardLimits(100, -1, bytes_per_second=0)
        _cols, end = fetch_shard(source, shard, Position.trim_horizon(), unpaced)
        for _ in range(3):  # empty reads at the tip: only the 5 calls/s spacing applies
            fetch_shard(source, shard, end.reached, unpaced)
        calls = get_records_times(counting)
        assert len(calls) == 4
        # Spaced 200 ms where they leave the client; seen at the proxy a loaded machine's scheduling
        # jitter shifts them a little (unpaced, they would come a few ms apart).
        assert all(b - a >= 0.15 for a, b in itertools.pairwise(calls)), calls
        # 100 KB in one response at 200 KB/s: the next call on that shard waits half a second.
        paced = ShardLimits(100, -1, bytes_per_second=200_000)
        cols, _end = fetch_shard(source, shard, Position.trim_horizon(), paced)
        assert pc.sum(pc.binary_length(cols.payloads())).as_py() == 100_000
        fetch_shard(source, shard, end.reached, paced)
        calls = get_records_times(counting)
        assert calls[-1] - calls[-2] >= 0.4, calls


@pytest.mark.spark
def test_an_idle_stream_is_looked_at_the_idle_rate_by_the_driver_and_not_read(spark, kinesalite, tmp_path):
    """Idle shards cost one look each (the driver's GetRecords of one record) per idlePollIntervalMs, from
    an iterator kept between looks, and no batch: executors make no call at all."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=16)
    with FaultProxy(kinesalite.endpoint) as counting:
        df = reader(
            spark,
            counting.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",  # kinesalite hangs on AT_TIMESTAMP past its last record
            idlePollIntervalMs=2000,
            shardDiscoveryIntervalMs=3000,
        )
        sink = Collector()
        query = start_running(df, str(tmp_path / "cp"), sink, "100 milliseconds")
        try:
            wait_for(lambda: len(sink.batches) >= 1, 120, "the first batch", query)  # then count
            time.sleep(2.5)  # the shards found empty are idle from here on
            before, started, batches = dict(counting.calls), time.monotonic(), len(sink.batches)
            time.sleep(8)
            after, window = dict(counting.calls), time.monotonic() - started
        finally:
            query.stop()
    delta = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    assert len(sink.batches) == batches, "an idle stream ran batches"
    assert delta.get(("reader", "GetRecords"), 0) == 0, delta
    looks = delta.get(("planner", "GetRecords"), 0)
    assert 16 <= looks <= 16 * (window / 2.0 + 1), (looks, window)
    assert delta.get(("planner", "GetShardIterator"), 0) <= 16, delta  # kept between looks
    assert delta.get(("planner", "ListShards"), 0) <= window / 3.0 + 1, delta


@pytest.mark.spark
def test_available_now_ends_with_the_batch_that_read_everything(spark, kinesalite, tmp_path):
    """A response with records and MillisBehindLatest 0 shows the shard drained: an AvailableNow run
    over a filled stream is one batch, not one more batch that only finds the tip."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=4)
    payloads = put(kin, stream, 0, 200)
    df = reader(spark, kinesalite.endpoint, stream, str(tmp_path / "meta"), startingPosition="TRIM_HORIZON")
    sink = Collector()
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    assert [batch for batch, _rows in sink.batches] == [0]
    assert sorted(bytes(r["data"]).decode() for r in sink.rows) == sorted(payloads)


def test_a_closed_shard_is_read_to_its_end_through_empty_responses(kinesalite):
    """kinesalite may end a closed shard only on the second empty read after its last record; a read that
    stopped at the first one would leave the shard open forever and its children waiting (found by
    the chaos suite: an AvailableNow run ended with the children of such a shard unread)."""
    from pyspark_kinesis.source.executor.iterator_cache import ITERATORS
    from tests.helpers import split

    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 20)
    parent = kin.list_shards(StreamName=stream)["Shards"][0]
    time.sleep(2.0)  # kinesalite: a shard closed over 1 s after its last record ends on a second empty read
    split(kin, stream, parent)
    source = proxy_for(kinesalite.endpoint, stream)
    limits = ShardLimits(100, -1, bytes_per_second=0, closed=True)
    cols, first = fetch_shard(source, parent["ShardId"], Position.trim_horizon(), limits)
    assert len(cols) == 20
    # The next batch continues with the iterator the first read ended with (kinesalite: its clock is
    # the last record's), and its first response is empty though the shard is closed.
    cols, second = fetch_shard(source, parent["ShardId"], first.reached, limits)
    assert len(cols) == 0 and second.reached.is_end and not second.at_tip
    # A replay of that batch reaches the recorded end (the shard's end) the same way.
    ITERATORS.clear()
    cols, replay = fetch_shard(source, parent["ShardId"], first.reached, limits, expect=second)
    assert len(cols) == 0 and replay.reached.is_end
