"""ShardDiscovery pinned (src/pyspark_kinesis/source/driver/discovery.py): when a listing is due (the
interval, a forced one, an AvailableNow cutoff), how often the stream's identity is checked, what a failed
listing does, the log lines for new shards, the loss decisions for shards that went past retention, and a
stream's first states (LATEST pinned to now, named shards). The proxy is scripted; the clock is a value."""

from __future__ import annotations

import json
import logging

import pytest

from pyspark_kinesis.errors import DataLossError, StreamAccessError, StreamNotFoundError, StreamRecreatedError
from pyspark_kinesis.model import Position, ShardInfo
from pyspark_kinesis.source.driver import discovery
from pyspark_kinesis.source.driver.discovery import ShardDiscovery
from pyspark_kinesis.source.state.offsets import ShardState
from tests.unit.planner_fakes import Clock, arn, config

A = arn("a")


def shard(sid: str, *parents: str, closed: bool = False) -> ShardInfo:
    return ShardInfo(
        sid, parents[0] if parents else None, parents[1] if len(parents) > 1 else None, 0, 1, closed
    )


class Proxy:
    """ListShards answers from `listings` (each call takes the next; the last repeats), or raises."""

    def __init__(self, *listings: list[ShardInfo] | BaseException) -> None:
        self.listings = list(listings)
        self.calls: list[str] = []

    def list_shards(self, open_only: bool = False) -> list[ShardInfo]:
        self.calls.append("ListShards(open)" if open_only else "ListShards")
        answer = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def check_same_stream(self) -> None:
        self.calls.append("DescribeStreamSummary")

    def deleted(self) -> StreamNotFoundError:
        return StreamNotFoundError("the stream was deleted while the query ran")


def discovery_of(proxy: Proxy, clock: Clock, **options: str) -> ShardDiscovery:
    return ShardDiscovery(config("a", shardDiscoveryIntervalMs="1000", **options), lambda spec: proxy, clock)


def states(*sids: str, position: Position | None = None) -> dict[str, ShardState]:
    return {sid: ShardState(position or Position.after("5")) for sid in sids}


# -- when a listing is due ------------------------------------------------------------------------------


def test_a_listing_is_due_once_the_interval_has_passed():
    proxy, clock = Proxy([shard("s0"), shard("s1")]), Clock()
    found = discovery_of(proxy, clock)
    found.refresh(A, states("s0"), force=False, cutoff_ms=None)  # never listed: due
    proxy.calls.clear()
    clock.now += 999
    assert found.refresh(A, states("s0"), force=False, cutoff_ms=None) == states("s0")
    assert proxy.calls == []
    clock.now += 1
    assert set(found.refresh(A, states("s0"), force=False, cutoff_ms=None)) == {"s0", "s1"}
    assert proxy.calls == ["DescribeStreamSummary", "ListShards"]


def test_a_forced_listing_checks_the_stream_at_most_once_per_interval():
    proxy, clock = Proxy([shard("s0")]), Clock()
    found = discovery_of(proxy, clock)
    found.refresh(A, states("s0"), force=True, cutoff_ms=None)
    clock.now += 10
    found.refresh(A, states("s0"), force=True, cutoff_ms=None)
    clock.now += 990
    found.refresh(A, states("s0"), force=True, cutoff_ms=None)
    assert proxy.calls == [
        "DescribeStreamSummary",
        "ListShards",
        "ListShards",
        "DescribeStreamSummary",
        "ListShards",
    ]


def test_available_now_lists_again_when_the_last_listing_is_older_than_its_cutoff():
    proxy, clock = Proxy([shard("s0")]), Clock()
    found = discovery_of(proxy, clock)
    found.refresh(A, states("s0"), force=False, cutoff_ms=None)
    listed_at = clock.now
    clock.now += 10
    proxy.calls.clear()
    found.refresh(A, states("s0"), force=False, cutoff_ms=listed_at)  # listed at the cutoff: not older
    assert proxy.calls == []
    found.refresh(A, states("s0"), force=False, cutoff_ms=listed_at + 1)
    assert proxy.calls == ["ListShards"]


# -- failures ---------------------------------------------------------------------------------------


def test_a_failed_listing_is_logged_and_the_states_stand(caplog):
    proxy = Proxy(StreamAccessError("throttled"))
    with caplog.at_level(logging.WARNING, logger=discovery.__name__):
        out = discovery_of(proxy, Clock()).refresh(A, states("s0"), force=True, cutoff_ms=None)
    assert out == states("s0")
    assert caplog.messages == [
        f"Kinesis stream {A}: shard discovery failed (1 of 6 in a row before the query fails), retried at the "
        "next interval: throttled"
    ]


def test_discovery_failing_interval_after_interval_ends_the_query_naming_the_calls_and_permissions():
    """AccessDenied (or throttling) on every listing: a warning per interval, then, at the bound, the
    query fails (a split's children would otherwise never be read); a success in between starts over."""
    denied = StreamAccessError("AccessDeniedException: not authorized to perform kinesis:ListShards")
    proxy, clock = Proxy(*([denied] * 5), [shard("s0")], *([denied] * 5), denied), Clock()
    found = discovery_of(proxy, clock)
    for _interval in range(5 + 1 + 5):
        found.refresh(A, states("s0"), force=True, cutoff_ms=None)
        clock.now += 10_000
    with pytest.raises(StreamAccessError) as error:
        found.refresh(A, states("s0"), force=True, cutoff_ms=None)
    assert str(error.value) == (
        f"Kinesis stream {A}: shard discovery (ListShards, DescribeStreamSummary) failed 6 times in a row, each "
        f"after botocore's retries: {denied}. Without it the children of a split or merge are never read. Check "
        "that the credentials may call kinesis:ListShards and kinesis:DescribeStreamSummary on the stream "
        "(AccessDenied), or the account's control-plane limits (throttling), and start the query again: it goes "
        "on from its checkpoint."
    )


def test_failures_within_one_interval_count_once():
    """A closure's forced listings retry within an interval: they count as one failure of the six."""
    denied = StreamAccessError("throttled")
    proxy, clock = Proxy(*([denied] * 12)), Clock()
    found = discovery_of(proxy, clock)
    for _interval in range(5):
        found.refresh(A, states("s0"), force=True, cutoff_ms=None)
        clock.now += 999  # (just under the 1 s interval: the next failure is still in the same one)
        found.refresh(A, states("s0"), force=True, cutoff_ms=None)
        clock.now += 1
    with pytest.raises(StreamAccessError, match="failed 6 times in a row"):
        found.refresh(A, states("s0"), force=True, cutoff_ms=None)


def test_a_deleted_stream_ends_the_query_and_a_recreated_one_too():
    with pytest.raises(StreamNotFoundError, match="deleted while the query ran"):
        discovery_of(Proxy(StreamNotFoundError("gone")), Clock()).refresh(
            A, states("s0"), force=True, cutoff_ms=None
        )
    with pytest.raises(StreamRecreatedError, match="again"):
        discovery_of(Proxy(StreamRecreatedError("again")), Clock()).refresh(
            A, states("s0"), force=True, cutoff_ms=None
        )


# -- what a listing changes -------------------------------------------------------------------------------


def test_new_shards_are_logged_by_name(caplog):
    proxy = Proxy([shard("s0", closed=True), shard("s1", "s0"), shard("s2", "s0")])
    with caplog.at_level(logging.INFO, logger=discovery.__name__):
        out = discovery_of(proxy, Clock()).refresh(A, states("s0"), force=True, cutoff_ms=None)
    assert set(out) == {"s0", "s1", "s2"}
    assert f"Kinesis stream {A}: new shards s1, s2" in caplog.messages


def test_a_known_shard_gone_before_its_end_is_a_loss_naming_where_it_was(caplog):
    proxy = Proxy([shard("s1", "s0")])
    text = (
        f"Kinesis stream {A}: shards s0 (from after sequence number 5) went past retention before they were read "
        "to their end; their unread records are lost"
    )
    with pytest.raises(DataLossError) as info:
        discovery_of(proxy, Clock()).refresh(A, states("s0"), force=True, cutoff_ms=None)
    assert (
        str(info.value)
        == f"{text}. Set failOnDataLoss=false to accept the loss and go on with their children."
    )
    with caplog.at_level(logging.WARNING, logger=discovery.__name__):
        out = discovery_of(proxy, Clock(), failOnDataLoss="false").refresh(
            A, states("s0"), force=True, cutoff_ms=None
        )
    assert caplog.messages[-1] == f"{text}; failOnDataLoss=false: going on and go on with their children"
    assert out["s0"].finished and "s1" in out


def test_several_shards_gone_before_their_end_are_named_each_with_where_it_was():
    known = {"s0": ShardState(Position.after("5")), "s2": ShardState(Position.trim_horizon())}
    with pytest.raises(DataLossError) as info:
        discovery_of(Proxy([shard("s1", "s0")]), Clock()).refresh(A, known, force=True, cutoff_ms=None)
    assert str(info.value).startswith(
        f"Kinesis stream {A}: shards s0 (from after sequence number 5), s2 (from TRIM_HORIZON) went past "
        "retention before they were read to their end;"
    )


def test_several_unread_shards_whose_parents_went_past_retention_are_named():
    known = {
        "s0": ShardState(Position.shard_end()),
        "s1": ShardState(Position.trim_horizon(), parents=("s0",)),
        "s2": ShardState(Position.trim_horizon(), parents=("s0",)),
    }
    listed = [shard("s1", "s0"), shard("s2", "s0")]
    with pytest.raises(DataLossError, match=f"Kinesis stream {A}: shards s1, s2 have not been read yet"):
        discovery_of(Proxy(listed), Clock()).refresh(A, known, force=True, cutoff_ms=None)


def test_unread_shards_whose_parents_went_past_retention_are_a_loss():
    # s1 was planned but never read (at TRIM_HORIZON) and its parent s0 is no longer listed
    known = {
        "s0": ShardState(Position.shard_end()),
        "s1": ShardState(Position.trim_horizon(), parents=("s0",)),
    }
    with pytest.raises(DataLossError) as info:
        discovery_of(Proxy([shard("s1", "s0")]), Clock()).refresh(A, known, force=True, cutoff_ms=None)
    assert str(info.value) == (
        f"Kinesis stream {A}: shards s1 have not been read yet and their parents are past retention, so their "
        "oldest records may be too (the query was stopped, or behind, longer than the stream's retention): an "
        "unknown number of records may be lost. Set failOnDataLoss=false to accept the loss and read them from "
        "their oldest record left."
    )


# -- a stream's first states --------------------------------------------------------------------------


def test_latest_lists_open_shards_only_and_is_pinned_to_now():
    proxy, clock = Proxy([shard("s0")]), Clock()
    out = discovery_of(proxy, clock, startingPosition="LATEST").initial_states(A)
    assert proxy.calls == ["ListShards(open)"]
    assert out == {"s0": ShardState(Position.at_timestamp(clock.now))}


def test_a_given_start_overrides_the_option_and_the_listing_is_kept():
    proxy, clock = Proxy([shard("s0", closed=True), shard("s1", "s0")]), Clock()
    found = discovery_of(proxy, clock, startingPosition="LATEST")
    out = found.initial_states(A, Position.trim_horizon())
    assert proxy.calls == ["ListShards"] and out["s0"].position == Position.trim_horizon()
    assert found.info(A, "s1") == shard("s1", "s0") and found.info(A, "s9") is None
    clock.now += 999
    found.refresh(A, out, force=False, cutoff_ms=None)
    assert proxy.calls == ["ListShards"]  # the start's listing counts for the interval


def test_named_starts_list_once_and_pin_latest_defaults():
    s0, s1 = "shardId-000000000000", "shardId-000000000001"
    proxy, clock = Proxy([shard(s0), shard(s1)]), Clock()
    start = json.dumps({s0: "AFTER_SEQUENCE_NUMBER:5", "default": "LATEST"})
    found = discovery_of(proxy, clock, startingPosition=start)
    out = found.initial_states(A)
    assert proxy.calls == ["ListShards"]
    assert {k: s.position for k, s in out.items()} == {
        s0: Position.after("5"),
        s1: Position.at_timestamp(clock.now),
    }
    assert found.created(A) == 1_700_000_000_000


# -- a parent listed after its children (DynamoDB Streams) ----------------------------------------------


def dynamodb_discovery(proxy: Proxy, clock: Clock) -> ShardDiscovery:
    from dataclasses import replace

    found = discovery_of(proxy, clock)
    stream = found._stream(A)
    stream.spec = replace(stream.spec, service="dynamodb")
    return found


def test_a_dynamodb_shard_whose_parent_is_not_listed_yet_waits_for_it_with_its_descendants():
    """Found by the simulation (tests/sim/dynamodb_week.py, seeds 5,002 and 5,103): a child the service
    made late split before it was listed; its children, listed first, were read at once and it never."""
    from pyspark_kinesis.source.driver import lineage

    early = [shard("s0", closed=True), shard("s2", "s1"), shard("s3", "s2")]
    proxy, clock = Proxy(early, [shard("s1", "s0", closed=True), *early]), Clock()
    found = dynamodb_discovery(proxy, clock)
    start = {"s0": ShardState(Position.shard_end())}
    first = found.refresh(A, start, force=True, cutoff_ms=None)
    assert set(first) == {"s0"}  # s2's parent s1 is not listed: s2 and its child s3 wait
    clock.now += 60_000
    second = found.refresh(A, first, force=True, cutoff_ms=None)
    assert set(second) == {"s0", "s1", "s2", "s3"} and lineage.readable(second) == ["s1"]


def test_a_held_shard_whose_parent_never_comes_is_read_after_the_wait_and_kinesis_waits_for_nothing():
    listing = [shard("s2", "gone"), shard("s3", "s2")]
    proxy, clock = Proxy(listing), Clock()
    found = dynamodb_discovery(proxy, clock)
    assert found.refresh(A, {}, force=True, cutoff_ms=None) == {}
    clock.now += discovery.LATE_LISTING_MS - 1
    assert found.refresh(A, {}, force=True, cutoff_ms=None) == {}
    clock.now += 1
    assert set(found.refresh(A, {}, force=True, cutoff_ms=None)) == {"s2", "s3"}  # (its parent aged out)
    kinesis = discovery_of(Proxy(listing), Clock())
    assert set(kinesis.refresh(A, {}, force=True, cutoff_ms=None)) == {"s2", "s3"}


def test_a_young_dynamodb_streams_first_states_hold_shards_whose_parent_is_not_listed():
    """Found by the simulation (seed 5,044): a table's new stream, followed 30 minutes after it was
    enabled, listed its first shard's children before that shard; the children were started as roots."""
    listing = [shard("s0"), shard("s2", "s1"), shard("s3", "s2")]
    clock = Clock()
    clock.now = 100 * 3_600_000
    young = dynamodb_discovery(Proxy(listing), clock)
    assert set(young.initial_states(A, Position.trim_horizon(), clock.now - 3_600_000)) == {"s0"}
    old = dynamodb_discovery(Proxy(listing), clock)  # (older than 24 h: an unlisted parent aged out)
    assert set(old.initial_states(A, Position.trim_horizon(), clock.now - 25 * 3_600_000)) == {
        "s0",
        "s2",
        "s3",
    }


def test_a_held_shard_is_told_once_and_forgotten_once_it_is_in_the_offset(caplog):
    early = [shard("s0", closed=True), shard("s2", "s1")]
    late = [shard("s1", "s0", closed=True), *early]
    proxy = Proxy(early, early, early, late, late)
    clock = Clock()
    found = dynamodb_discovery(proxy, clock)
    states = {"s0": ShardState(Position.shard_end())}
    with caplog.at_level(logging.INFO, logger=discovery.log.name):
        for _listing in range(3):
            clock.now += 60_000
            assert set(found.refresh(A, states, force=True, cutoff_ms=None)) == {"s0"}
    told = [r.getMessage() for r in caplog.records if "wait up to 30 min" in r.getMessage()]
    assert len(told) == 1 and "s2" in told[0]
    clock.now += 60_000
    states = found.refresh(A, states, force=True, cutoff_ms=None)
    assert set(states) == {"s0", "s1", "s2"}
    clock.now += 60_000
    found.refresh(A, states, force=True, cutoff_ms=None)
    assert found._stream(A).first_seen == {}
