"""The driver's start-up calls pinned (src/pyspark_kinesis/source/driver/discovery.py): resolving streams
to their identities (a stream named twice, the fan-out consumer found, registered or refused) and a batch
read's slices (start, end, cutoff and closed flag per shard, the shards after a named end left out).
Kinesis is a scripted proxy standing in for `KinesisProxy` (the calls discovery makes, no network);
tests/integration reads real servers."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

import pytest

from pyspark_kinesis.aws import consumers
from pyspark_kinesis.aws.consumers import Consumer
from pyspark_kinesis.errors import OptionError, StreamAccessError
from pyspark_kinesis.model import Position, ShardInfo, StreamIdentity
from pyspark_kinesis.source.driver import discovery, preflight
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.offsets import BackfillPlan

NOW = 1_800_000_000_000
HOUR = 3_600_000
BASE = {"region": "eu-west-1", "endpointUrl": "http://127.0.0.1:9"}


def arn(name: str) -> str:
    return f"arn:aws:kinesis:eu-west-1:123456789012:stream/{name}"


def sid(n: int) -> str:
    return f"shardId-{n:012d}"


def shard(
    n: int, parent: int | None = None, closed: bool = False, first: str = "100", last: str | None = None
):
    return ShardInfo(sid(n), None if parent is None else sid(parent), None, 0, 1, closed, first, last)


class Kinesis:
    """What discovery asks of each stream, by stream name: its identity, its listing, a client."""

    def __init__(self, listings: dict[str, list[ShardInfo]], retention_h: int = 24) -> None:
        self.listings, self.retention_h = listings, retention_h
        self.made: list[tuple[str, str, int | None]] = []
        self.same = False  # every name resolves to the ARN of "orders"

    def __call__(self, spec: Any, agent: str = "", max_attempts: int | None = None) -> Any:
        self.made.append((spec.name, agent, max_attempts))
        outer = self

        class Proxy:
            client = f"client-of-{spec.name}"

            def identity(self) -> StreamIdentity:
                name = "orders" if outer.same else spec.name
                return StreamIdentity(arn(name), 1_700_000_000_000, outer.retention_h * HOUR)

            def list_shards(self) -> list[ShardInfo]:
                return outer.listings[spec.name]

        return Proxy()


@pytest.fixture
def kinesis(monkeypatch):
    def install(listings: dict[str, list[ShardInfo]], retention_h: int = 24) -> Kinesis:
        fake = Kinesis(listings, retention_h)
        monkeypatch.setattr(discovery, "proxy_for", fake)
        monkeypatch.setattr(preflight, "proxy_for", fake)  # (the identities: also `.load()`'s check)
        monkeypatch.setattr(discovery, "now_ms", lambda: NOW)
        return fake

    return install


def config(streaming: bool = False, **options: str):
    named = {} if "streams" in options else {"streamName": "orders"}
    return parse_options({**named, **BASE, **options}, streaming=streaming)


def resolved(streaming: bool = False, **options: str):
    return discovery.resolve_streams(config(streaming, **options))


# -- resolving streams ------------------------------------------------------------------------------


def test_streams_resolve_to_their_identities_with_few_attempts(kinesis):
    fake = kinesis({})
    out = resolved(streams=json.dumps([{"streamName": "orders"}, {"streamName": "payments"}]))
    assert [(s.arn, s.created_ms, s.retention_ms) for s in out.streams] == [
        (arn("orders"), 1_700_000_000_000, 24 * HOUR),
        (arn("payments"), 1_700_000_000_000, 24 * HOUR),
    ]
    assert fake.made == [("orders", "planner", 2), ("payments", "planner", 2)]
    assert all(s.consumer_arn is None for s in out.streams)


def test_two_names_of_one_stream_are_refused_naming_the_option(kinesis):
    """Names differ (another spelling of the endpoint, an alias) but the ARN is one: read twice otherwise."""
    fake = kinesis({})
    fake.same = True
    with pytest.raises(OptionError) as info:
        resolved(streams=json.dumps([{"streamName": "orders"}, {"streamName": "orders-again"}]))
    assert str(info.value) == (
        f"Kinesis option 'streams': names the stream {arn('orders')} twice. Name each stream once."
    )


def active(name: str = "c", status: str = consumers.ACTIVE) -> Consumer:
    return Consumer(name, f"{arn('orders')}/consumer/{name}:1", status, None)


def test_fan_out_by_name_finds_or_registers_the_consumer(kinesis, monkeypatch, caplog):
    fake = kinesis({})
    asked = []
    monkeypatch.setattr(
        consumers,
        "ensure_consumer",
        lambda client, key, name, register_with: (
            asked.append((client, key, name, register_with)) or active(name)
        ),
    )
    with caplog.at_level(logging.INFO, logger=discovery.__name__):
        [spec] = resolved(consumerType="efo", consumerName="mine").streams
    assert asked == [("client-of-orders", arn("orders"), "mine", "client-of-orders")]
    # (registering goes through a client of one attempt: botocore retried LimitExceeded, which also means
    # "no consumer slot left", for minutes: issue #61 item 6)
    assert ("orders", "planner", 1) in fake.made
    assert spec.consumer_arn == active("mine").arn
    assert f"enhanced fan-out through consumer mine ({active('mine').arn})" in caplog.text


def test_fan_out_by_arn_uses_an_active_consumer_as_it_is(kinesis, monkeypatch):
    kinesis({})
    monkeypatch.setattr(
        consumers, "describe_arn", lambda client, given: active() if given == active().arn else None
    )
    monkeypatch.setattr(
        consumers, "ensure_consumer", lambda *a: pytest.fail("an active consumer is not registered")
    )
    [spec] = resolved(consumerType="efo", consumerArn=active().arn).streams
    assert spec.consumer_arn == active().arn


def test_fan_out_by_arn_waits_for_a_consumer_being_created(kinesis, monkeypatch):
    kinesis({})
    monkeypatch.setattr(consumers, "describe_arn", lambda client, given: active(status=consumers.CREATING))
    waited = []
    monkeypatch.setattr(
        consumers, "ensure_consumer", lambda client, key, name, register_with: waited.append(name) or active()
    )
    [spec] = resolved(consumerType="efo", consumerArn=active().arn).streams
    assert waited == ["c"] and spec.consumer_arn == active().arn


def test_fan_out_by_arn_refuses_a_consumer_not_registered_or_being_deregistered(kinesis, monkeypatch):
    kinesis({})
    monkeypatch.setattr(consumers, "describe_arn", lambda client, given: None)
    with pytest.raises(StreamAccessError) as info:
        resolved(consumerType="efo", consumerArn=active().arn)
    assert str(info.value).startswith(f"the consumer {active().arn} of stream 'orders' in region 'eu-west-1'")
    assert "is not registered; register it (`pyspark-kinesis consumers register`)" in str(info.value)
    monkeypatch.setattr(consumers, "describe_arn", lambda client, given: active(status=consumers.DELETING))
    with pytest.raises(StreamAccessError, match="is being deregistered; give a registered consumer"):
        resolved(consumerType="efo", consumerArn=active().arn)


# -- a batch read's slices ---------------------------------------------------------------------------


def test_every_listed_shard_is_a_slice_from_the_start_to_now(kinesis):
    kinesis({"orders": [shard(0, closed=True, last="900"), shard(1, parent=0), shard(2)]})
    slices = discovery.backfill_slices(resolved(startingPosition="TRIM_HORIZON"))
    trim = Position.trim_horizon()
    assert slices == [
        BackfillPlan(arn("orders"), sid(0), trim, True, NOW, None, (0, 1), last_seq="900", first_seq="100"),
        BackfillPlan(arn("orders"), sid(1), trim, False, NOW, None, (0, 1), first_seq="100"),
        BackfillPlan(arn("orders"), sid(2), trim, False, NOW, None, (0, 1), first_seq="100"),
    ]  # (each with its HashKeyRange: a batch read drops misplaced KPL user records too; and a closed
    # shard's last sequence number: a read past it is at the end, also on a server that never ends it)


def test_a_latest_start_is_now_and_a_timestamp_end_is_the_cutoff(kinesis):
    kinesis({"orders": [shard(0)]})
    end = "2027-01-15T08:00:00Z"
    [one] = discovery.backfill_slices(
        resolved(startingPosition="LATEST", endingPosition=f"AT_TIMESTAMP:{end}")
    )
    assert one.start == Position.at_timestamp(NOW)
    assert (one.cutoff_ms, one.end_at) == (_ms(end), None)


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_a_named_end_stops_its_shard_there_and_leaves_its_children_out(kinesis):
    kinesis(
        {
            "orders": [
                shard(0, closed=True, first="100", last="900"),
                shard(1, parent=0, first="1000"),
                shard(2, first="100"),
            ]
        }
    )
    ending = json.dumps({sid(0): "AT_SEQUENCE_NUMBER:500"})
    slices = discovery.backfill_slices(resolved(startingPosition="TRIM_HORIZON", endingPosition=ending))
    assert [(s.shard_id, s.end_at, s.cutoff_ms) for s in slices] == [
        (sid(0), Position.at_sequence("500"), NOW),
        (sid(2), None, NOW),
    ]


def test_a_named_end_outside_its_shard_is_an_error_naming_it(kinesis):
    kinesis({"orders": [shard(0, first="100")]})
    with pytest.raises(
        OptionError, match=r"'endingPosition.shardId-000000000000': sequence number 50 is not in"
    ):
        discovery.backfill_slices(
            resolved(
                startingPosition="TRIM_HORIZON",
                endingPosition=json.dumps({sid(0): "AFTER_SEQUENCE_NUMBER:50"}),
            )
        )


def test_named_starts_read_only_the_shards_the_lineage_rule_gives(kinesis):
    kinesis(
        {
            "orders": [
                shard(0, closed=True, first="100", last="900"),
                shard(1, parent=0, first="1000"),
                shard(2),
            ]
        }
    )
    start = json.dumps({sid(1): "AFTER_SEQUENCE_NUMBER:1500", "default": "TRIM_HORIZON"})
    slices = discovery.backfill_slices(resolved(startingPosition=start))
    assert [(s.shard_id, s.start) for s in slices] == [
        (sid(1), Position.after("1500")),
        (sid(2), Position.trim_horizon()),
    ]


def test_a_start_longer_ago_than_retention_is_refused_or_warned(kinesis, caplog):
    kinesis({"orders": [shard(0)]}, retention_h=24)
    old = "AT_TIMESTAMP:2027-01-14T00:00:00Z"  # NOW is 2027-01-15T08:00Z: 32 h ago
    with pytest.raises(
        OptionError, match=r"'startingPosition': .* is longer ago than the retention .* \(24 h\)"
    ):
        discovery.backfill_slices(resolved(startingPosition=old))
    with caplog.at_level(logging.WARNING, logger=discovery.__name__):
        [one] = discovery.backfill_slices(resolved(startingPosition=old, failOnDataLoss="false"))
    assert "failOnDataLoss=false: reading from the oldest one left" in caplog.text
    assert one.start == Position.at_timestamp(_ms("2027-01-14T00:00:00Z"))


def test_every_stream_of_a_batch_read_is_listed(kinesis):
    fake = kinesis({"orders": [shard(0)], "payments": [shard(0), shard(1)]})
    cfg = resolved(
        startingPosition="TRIM_HORIZON",
        streams=json.dumps([{"streamName": "orders"}, {"streamName": "payments"}]),
    )
    fake.made.clear()
    slices = discovery.backfill_slices(cfg)
    assert [(s.stream, s.shard_id) for s in slices] == [
        (arn("orders"), sid(0)),
        (arn("payments"), sid(0)),
        (arn("payments"), sid(1)),
    ]
    assert fake.made == [("orders", "planner", None), ("payments", "planner", None)]
