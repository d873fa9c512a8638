"""Which streams the offset holds (source/driver/stream_set.py), against a scripted discovery: streams
added to or removed from the options, and a DynamoDB table followed from a disabled stream to the next
one only once the old one is read to its end, 30 minutes after the new one was made, at most one
ListStreams per discovery interval, loudly when the new stream is older than its changes stay."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.model import Position, StreamIdentity
from pyspark_kinesis.source.driver.discovery import LATE_LISTING_MS, RETENTION_MS
from pyspark_kinesis.source.driver.stream_set import StreamSet
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.offsets import ShardState

TABLE = "arn:aws:dynamodb:us-east-1:000000000000:table/orders/stream/"
OLD, NEW = TABLE + "2026-11-01T00:00:00.000", TABLE + "2026-11-02T00:00:00.000"
INTERVAL = 10_000
FINISHED = {"s0": ShardState(Position.shard_end())}
OPEN = {"s0": ShardState(Position.trim_horizon())}


def dynamodb(by_arn: bool = False, **options: str):
    base = {
        "service": "dynamodb",
        "streamName": OLD if by_arn else "orders",
        "region": "us-east-1",
        "endpointUrl": "http://127.0.0.1:9",
        "metadataPath": "/unused",
        "startingPosition": "TRIM_HORIZON",
        "shardDiscoveryIntervalMs": str(INTERVAL),
        **options,
    }
    return parse_options(base, streaming=True).with_identities([StreamIdentity(OLD, 1_000)])


@dataclass
class Identity:
    created_ms: int | None


@dataclass
class Proxy:
    successor_arn: str | None = None
    created_ms: int | None = None
    fails: bool = False
    asked: int = 0

    def successor(self) -> str | None:
        self.asked += 1
        if self.fails:
            raise StreamAccessError("ListStreams refused")
        return self.successor_arn

    def identity(self) -> Identity:
        return Identity(self.created_ms)


@dataclass
class Discovery:
    """What StreamSet asks of ShardDiscovery, scripted: each stream's proxy, its first states, a forced
    listing (`relisted`: what it finds; None: the states it was given, anew; "failed": the very states
    it was given, as a failed listing returns them), and the losses it is told."""

    proxies: dict[str, Proxy] = field(default_factory=dict)
    relisted: dict | str | None = None
    started: list[tuple] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def proxy(self, key: str) -> Proxy:
        return self.proxies.setdefault(key, Proxy())

    def initial_states(self, key: str, position: Position | None = None, created: int | None = None) -> dict:
        self.started.append((key, position, created))
        return {"n0": ShardState(Position.trim_horizon()), "gone": ShardState(Position.shard_end())}

    def refresh(self, key: str, states: dict, force: bool, cutoff_ms: int | None) -> dict:
        assert force and cutoff_ms is None  # (a listing made now, whatever the interval)
        self.listed.append(key)
        if self.relisted == "failed":  # (a listing that failed: the states it was given, as they were)
            return states
        return dict(states) if self.relisted is None else self.relisted

    def loss(self, text: str, then: str) -> None:
        self.lost.append(f"{text} {then}")


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


T0 = 1_764_000_000_000  # (when the new stream was made, in the tests below: epoch ms)


def following(created: int, now: int, **options: str) -> tuple[StreamSet, Discovery, Clock]:
    """A table whose stream OLD was followed by NEW, made `created` ms after T0; the clock at `now`."""
    found = Discovery({OLD: Proxy(successor_arn=NEW), NEW: Proxy(created_ms=T0 + created)})
    clock = Clock(T0 + now)
    return StreamSet(dynamodb(**options), found, clock), found, clock  # type: ignore[arg-type]


def test_a_table_read_to_its_end_goes_on_with_its_next_stream_from_its_first_change(caplog):
    streams, found, _clock = following(created=0, now=LATE_LISTING_MS)
    out = streams.renewed({OLD: FINISHED})
    assert list(out) == [NEW] and "n0" in out[NEW]  # (the new stream, from its first states)
    assert found.started == [(NEW, Position.trim_horizon(), T0)] and found.listed == [OLD]
    assert "was disabled and is read to its end" in caplog.text and found.lost == []


def test_the_move_waits_for_the_old_streams_end_and_for_late_listings():
    streams, found, clock = following(created=0, now=LATE_LISTING_MS - 1)
    assert streams.renewed({OLD: OPEN}) == {OLD: OPEN}  # (shards unread: no ListStreams at all)
    assert found.proxies[OLD].asked == 0
    assert streams.renewed({OLD: FINISHED}) == {OLD: FINISHED}  # (the new stream is under 30 min old)
    clock.now += INTERVAL
    found.relisted = {**FINISHED, "late": ShardState(Position.trim_horizon())}  # (a child listed late)
    assert streams.renewed({OLD: FINISHED}) == {OLD: FINISHED}
    clock.now += INTERVAL
    found.relisted = "failed"  # (no listing made: nothing is known of late children)
    assert streams.renewed({OLD: FINISHED}) == {OLD: FINISHED}
    clock.now += INTERVAL
    found.relisted = {"late": ShardState(Position.shard_end())}  # (listed again: all read)
    assert list(streams.renewed({OLD: FINISHED})) == [NEW]


def test_listStreams_is_asked_at_most_once_per_discovery_interval():
    streams, found, clock = following(created=0, now=0)  # (the new stream too young to move to)
    streams.renewed({OLD: FINISHED})
    clock.now += INTERVAL - 1
    streams.renewed({OLD: FINISHED})
    assert found.proxies[OLD].asked == 1
    clock.now += 1
    streams.renewed({OLD: FINISHED})
    assert found.proxies[OLD].asked == 2


def test_no_next_stream_a_refused_listStreams_or_a_table_named_by_arn_leave_the_stream_as_it_is(caplog):
    streams, found, _clock = following(created=0, now=LATE_LISTING_MS)
    found.proxies[OLD].successor_arn = None
    assert streams.renewed({OLD: FINISHED}) == {OLD: FINISHED}
    streams, found, _clock = following(created=0, now=LATE_LISTING_MS)
    found.proxies[OLD].fails = True
    assert streams.renewed({OLD: FINISHED}) == {OLD: FINISHED}
    assert "could not ask for the table's next stream: ListStreams refused" in caplog.text
    found = Discovery({OLD: Proxy(successor_arn=NEW), NEW: Proxy(created_ms=T0)})
    by_arn = StreamSet(dynamodb(by_arn=True), found, Clock(T0 + LATE_LISTING_MS))  # type: ignore[arg-type]
    assert by_arn.renewed({OLD: FINISHED}) == {OLD: FINISHED} and found.proxies[OLD].asked == 0


def test_a_new_stream_with_no_creation_time_counts_as_made_now():
    streams, found, _clock = following(created=0, now=LATE_LISTING_MS)
    found.proxies[NEW].created_ms = None
    assert streams.renewed({OLD: FINISHED}) == {OLD: FINISHED}  # (made "now": 30 min to wait)


def test_a_next_stream_reached_after_its_changes_aged_out_is_a_loud_possible_loss():
    streams, found, _clock = following(created=0, now=RETENTION_MS + 1)
    assert list(streams.renewed({OLD: FINISHED})) == [NEW]
    assert found.lost == [
        f"DynamoDB stream {NEW} (the table's stream after {OLD}) was enabled 24 hours ago, and changes "
        "stay 24 hours: its oldest changes may be gone and read what is left"
    ]
    streams, found, _clock = following(created=0, now=RETENTION_MS)
    streams.renewed({OLD: FINISHED})
    assert found.lost == []  # (exactly 24 hours: every change is still there)


def test_streams_added_to_the_options_start_and_removed_ones_leave(caplog):
    caplog.set_level(logging.INFO, logger="pyspark_kinesis.source.driver.stream_set")
    found = Discovery()
    streams = StreamSet(dynamodb(), found, Clock(0))  # type: ignore[arg-type]
    other = "arn:aws:kinesis:us-east-1:000000000000:stream/gone"
    out = streams.follow_options({other: OPEN})
    assert list(out) == [OLD] and found.started == [(OLD, None, None)]
    assert f"Kinesis stream {other} is no longer in the options" in caplog.text
    assert f"Kinesis stream {OLD} was added to the options" in caplog.text
    assert streams.covered(NEW) and not streams.covered(other)
    kept = streams.follow_options({NEW: OPEN})  # (the table's later stream stands for its entry)
    assert kept == {NEW: OPEN} and len(found.started) == 1
