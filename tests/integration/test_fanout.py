"""Enhanced fan-out (consumerType=efo) on kinesis-local, through the fault proxy (which adds the
`initial-response` event kinesis-local leaves out, counts SubscribeToShard calls and injects their
faults): reading exactly once across restarts, a reshard under EFO with parents before children,
the consumer found again by a restarted query, and the service's subscription rules kept."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest

from pyspark_kinesis.aws import consumers
from pyspark_kinesis.source.options import default_consumer_name
from tests.helpers import (
    assert_exactly_once,
    assert_key_order,
    assert_shard_order,
    assert_subscribe_rules,
    client,
    new_stream,
    put,
)
from tests.integration.streaming_util import Collector, reader, run_available_now, start_running, wait_for
from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.kinesis


@pytest.fixture
def proxy(kinesis_local):
    with FaultProxy(kinesis_local.endpoint) as running:
        yield running


def _efo(spark, proxy, stream, meta, **options):
    return reader(
        spark, proxy.endpoint, stream, meta, consumerType="efo", startingPosition="TRIM_HORIZON", **options
    )


def _stream_arn(kinesis, stream):
    return kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]


def test_efo_reads_exactly_once_across_restarts_and_reuses_its_consumer(
    spark, kinesis_local, proxy, tmp_path
):
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 2)
    meta, checkpoint = str(tmp_path / "meta"), str(tmp_path / "cp")
    expected = put(kinesis, stream, 0, 300)
    collector = Collector()
    run_available_now(spark, _efo(spark, proxy, stream, meta, maxRecordsPerShard=70), checkpoint, collector)
    assert_exactly_once(collector.rows, expected)

    expected += put(kinesis, stream, 300, 200)
    run_available_now(spark, _efo(spark, proxy, stream, meta, maxRecordsPerShard=70), checkpoint, collector)
    assert_exactly_once(collector.rows, expected)
    assert_shard_order(collector.rows)
    assert_key_order(collector.rows)

    # One consumer, of the query's stable default name, registered by the first run and found by the second.
    registered = consumers.list_consumers(kinesis, _stream_arn(kinesis, stream))
    assert [c.name for c in registered] == [default_consumer_name(meta)]
    assert {c for _t, _p, c, _s, _o in proxy.subscriptions} == {registered[0].arn}
    assert not proxy.calls.get(("reader", "GetRecords")), "EFO tasks must not poll"


def test_a_running_efo_query_follows_a_split_with_parents_first(spark, kinesis_local, proxy, tmp_path):
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 1)
    collector = Collector()
    query = start_running(_efo(spark, proxy, stream, str(tmp_path / "meta")), str(tmp_path / "cp"), collector)
    try:
        expected = put(kinesis, stream, 0, 200)
        wait_for(lambda: len(collector.rows) >= 200, 120, "the first records", query)
        parent = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
        kinesis.split_shard(StreamName=stream, ShardToSplit=parent, NewStartingHashKey=str(2**127))
        wait_for(lambda: len(kinesis.list_shards(StreamName=stream)["Shards"]) == 3, 60, "the split")
        expected += put(kinesis, stream, 200, 300)
        wait_for(lambda: len(collector.rows) >= 500, 180, "the records put after the split", query)
    finally:
        query.stop()
    assert_exactly_once(collector.rows, expected)
    assert_key_order(collector.rows)  # parents were read to their end before their children
    assert {r["shardId"] for r in collector.rows} >= {parent}
    assert len({r["shardId"] for r in collector.rows}) == 3


def test_subscriptions_keep_the_service_rules_and_survive_refusals(spark, kinesis_local, tmp_path):
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 2)
    expected = put(kinesis, stream, 0, 400)
    # Some subscriptions refused: another subscription still open, or the control plane's rate.
    with FaultProxy(kinesis_local.endpoint, seed=7, subscribe_faults={"in_use": 0.2, "limit": 0.15}) as proxy:
        collector = Collector()
        df = _efo(spark, proxy, stream, str(tmp_path / "meta"), maxRecordsPerShard=40)
        run_available_now(spark, df, str(tmp_path / "cp"), collector, timeout_s=300)
    assert_exactly_once(collector.rows, expected)
    assert proxy.injected.get("subscribe in_use") and proxy.injected.get("subscribe limit"), (
        "no refusal was injected"
    )
    # Every SubscribeToShard came from the executor's one fan-out agent, whichever Python worker ran
    # the read, so the service's rules are kept per consumer and shard across the whole executor.
    assert len({pid for _t, pid, *_ in proxy.subscriptions} - {0}) == 1, proxy.subscriptions
    by_shard: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for at, pid, consumer, shard, outcome in proxy.subscriptions:
        assert pid, "a SubscribeToShard call without the caller's process id"
        by_shard[(consumer, shard)].append((at, outcome))
    for calls in by_shard.values():
        assert_subscribe_rules(calls)


def test_a_running_efo_query_continues_its_subscriptions_from_batch_to_batch(
    spark, kinesis_local, proxy, tmp_path
):
    """Batch after batch, each shard's read continues the subscription the last batch left in the
    executor's agent, whichever Python worker Spark runs it in: a handful of SubscribeToShard calls
    for many batches, not one (and a 5 s wait) per batch."""
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 2)
    collector = Collector()
    query = start_running(_efo(spark, proxy, stream, str(tmp_path / "meta")), str(tmp_path / "cp"), collector)
    expected: list[str] = []
    try:
        wait_for(lambda: proxy.subscriptions, 120, "the first subscriptions", query)
        for round_ in range(12):
            expected += put(kinesis, stream, round_ * 20, 20)
            time.sleep(1.0)
        wait_for(lambda: len(collector.rows) >= len(expected), 120, "every record", query)
        batches = sum(1 for _b, rows in collector.batches if rows)
    finally:
        query.stop()
    assert_exactly_once(collector.rows, expected)
    ok = [s for s in proxy.subscriptions if s[4] == "ok"]
    assert batches >= 8, f"only {batches} batches: the test shows nothing"
    assert len(ok) <= 2 * 2, (
        f"{len(ok)} subscriptions for {batches} batches on 2 shards: {proxy.subscriptions}"
    )


def test_an_efo_query_started_at_latest_neither_hangs_nor_reads_older_records(
    spark, kinesis_local, proxy, tmp_path
):
    """LATEST is pinned to the query's start time (as with polling), so the first AvailableNow run
    ends at once on a stream with old records and no new ones, instead of waiting for a push that
    never comes, and the next run reads exactly what was put after that start (naming its consumer
    by consumerArn)."""
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 2)
    put(kinesis, stream, 0, 100)  # before the query starts: not to be read
    meta, checkpoint = str(tmp_path / "meta"), str(tmp_path / "cp")

    def latest(**consumer):
        return reader(
            spark, proxy.endpoint, stream, meta, consumerType="efo", startingPosition="LATEST", **consumer
        )

    collector = Collector()
    run_available_now(spark, latest(), checkpoint, collector, timeout_s=120)
    assert collector.rows == []
    expected = put(kinesis, stream, 100, 60)
    # The second run names the consumer the first one registered by its ARN (the consumerArn path).
    (registered,) = consumers.list_consumers(kinesis, _stream_arn(kinesis, stream))
    run_available_now(spark, latest(consumerArn=registered.arn), checkpoint, collector, timeout_s=120)
    assert_exactly_once(collector.rows, expected)


def test_bad_efo_options_fail_at_load(spark, kinesis_local, tmp_path):
    from pyspark.errors import PySparkException

    stream = new_stream(client(kinesis_local.endpoint), 1)
    meta = str(tmp_path / "meta")
    cases = {
        "consumerType": ({"consumerType": "push"}, "is not polling or efo"),
        "consumerArn": (
            {
                "consumerType": "efo",
                "consumerArn": f"arn:aws:kinesis:us-east-1:000000000000:stream/other-{uuid.uuid4().hex[:4]}/consumer/c:1",
            },
            "belongs to stream",
        ),
        "consumerName": ({"consumerName": "etl"}, "consumerType is polling"),
    }
    for option, (options, text) in cases.items():
        with pytest.raises(PySparkException) as info:
            reader(spark, kinesis_local.endpoint, stream, meta, **options).schema  # noqa: B018
        assert option in str(info.value) and text in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["end", "reset"])
def test_subscriptions_that_end_or_break_mid_event_under_running_reads_lose_and_repeat_nothing(
    spark, kinesis_local, tmp_path, cut
):
    """Kinesis ends every subscription after 5 minutes, and a connection can break in the middle of an
    event. Here every subscription ends after 3 events, cleanly (`end`) or with a TCP reset halfway
    through the 4th (`reset`), while a query reads and records keep coming: every record once, per-key
    order kept, and the service's subscribe rules kept through all the re-subscriptions."""
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 2)
    collector = Collector()
    expected: list[str] = []
    with FaultProxy(kinesis_local.endpoint) as proxy:
        proxy.subscription_cut = (cut, 3)
        query = start_running(
            _efo(spark, proxy, stream, str(tmp_path / "meta")), str(tmp_path / "cp"), collector
        )
        try:
            wait_for(lambda: proxy.subscriptions, 120, "the first subscriptions", query)
            for round_ in range(15):
                expected += put(kinesis, stream, round_ * 20, 20, keys=6)
                time.sleep(1.0)
            wait_for(lambda: len(collector.rows) >= len(expected), 180, "every record", query)
            time.sleep(2.0)  # (a duplicate would come after the last expected record)
        finally:
            query.stop()
    note = "subscription reset" if cut == "reset" else "subscription ended"
    assert proxy.injected.get(note, 0) >= 3, f"subscriptions cut: {proxy.injected}"
    assert_exactly_once(collector.rows, expected)
    assert_key_order(collector.rows)
    by_shard: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for at, _pid, consumer, shard, outcome in proxy.subscriptions:
        by_shard[(consumer, shard)].append((at, outcome))
    for calls in by_shard.values():
        assert_subscribe_rules(calls)


def _put_aggregates(kinesis, stream: str, first: int, aggregates: int, per: int = 7) -> list[str]:
    """`aggregates` KPL aggregates (aws-kinesis-agg) of `per` user records each, keys spread over the
    shards (each aggregate goes where its first key hashes). Returns the user records' payloads."""
    from aws_kinesis_agg.aggregator import RecordAggregator

    out = []
    for a in range(aggregates):
        aggregator = RecordAggregator()
        for i in range(per):
            n = first + a * per + i
            aggregator.add_user_record(f"key-{a}", f"agg-{n}".encode())
            out.append(f"agg-{n}")
        key, _hash, blob = aggregator.clear_and_get().get_contents()
        kinesis.put_record(StreamName=stream, Data=blob, PartitionKey=key)
    return out


@pytest.mark.slow
def test_a_running_efo_query_whose_batches_end_inside_kpl_aggregates_keeps_reading(
    spark, kinesis_local, proxy, tmp_path
):
    """Batches cut inside KPL aggregates (a record budget of 5 per shard, aggregates of 7): each
    shard's next batch starts inside an aggregate. Such a read once could not continue the last
    batch's subscription, subscribed anew, waited out the service's 5 s past its budget, and took
    nothing, batch after batch (found by the chaos suite). Every record arrives once, in order, on a
    handful of subscriptions."""
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 2)
    collector = Collector()
    df = _efo(spark, proxy, stream, str(tmp_path / "meta"), maxRecordsPerShard=5)
    query = start_running(df, str(tmp_path / "cp"), collector)
    expected: list[str] = []
    try:
        wait_for(lambda: proxy.subscriptions, 120, "the first subscriptions", query)
        for round_ in range(6):
            expected += _put_aggregates(kinesis, stream, round_ * 28, 4)
            time.sleep(1.0)
        wait_for(lambda: len(collector.rows) >= len(expected), 180, "every record", query)
    finally:
        query.stop()
    got = [bytes(r["data"]).decode() for r in collector.rows]
    assert sorted(got) == sorted(expected)
    numbers = [int(g.split("-")[1]) for g in got]
    by_aggregate: dict[int, list[int]] = defaultdict(list)
    for n in numbers:
        by_aggregate[n // 7].append(n)
    assert all(ns == sorted(ns) for ns in by_aggregate.values())  # an aggregate's user records in order
    ok = [s for s in proxy.subscriptions if s[4] == "ok"]
    assert len(ok) <= 2 * 3, f"{len(ok)} subscriptions: {proxy.subscriptions}"
