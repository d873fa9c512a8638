"""Shard discovery: every ListShards the driver makes, per stream, and what it learned.

The driver lists a stream's shards when the query (or a stream added to it) starts, then at most every
`shardDiscoveryIntervalMs`, and at once when a batch found a shard closed. The listing is full (not
filtered), because a known shard missing from it has expired past retention. What the listing means
for the offset (new shards, expired ones) is the lineage rule's to decide (`lineage`); this class
owns the calls, their timing and the latest view of each stream's shards (hash ranges for assignment).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from ...aws.services import StreamProxy, proxy_for
from ...config.stream_specs import DYNAMODB, StreamSpec
from ...config.table_streams import follows_table
from ...errors import DataLossError, StreamAccessError, StreamNotFoundError, StreamRecreatedError
from ...model import LATEST, TIMESTAMP, Position, ShardInfo, stream_words
from ..options import SourceConfig
from ..state.offsets import BackfillPlan, ShardState, SourceOffset
from . import lineage
from .named_positions import check_start_in_retention, named_ends, named_starts
from .preflight import stream_identities

log = logging.getLogger(__name__)
# How late DynamoDB Streams may list a shard it made (a child listed minutes after its parent closed; a
# parent listed after its own children): what `_held_back` and `stream_set` wait for.
LATE_LISTING_MS = 30 * 60_000
RETENTION_MS = 24 * 3_600_000  # how long a DynamoDB stream keeps its changes (and lists a closed shard)
# The calls a listing makes, and the IAM actions they need, per service.
LISTING_CALLS = {
    "kinesis": ("ListShards, DescribeStreamSummary", "kinesis:ListShards and kinesis:DescribeStreamSummary"),
    "dynamodb": ("DescribeStream", "dynamodb:DescribeStream"),
}


def now_ms() -> int:
    return int(time.time() * 1000)


def resolve_streams(config: SourceConfig) -> SourceConfig:
    """Check at query start that every stream is reachable, and learn each stream's ARN; with
    enhanced fan-out, each stream's consumer (registered where it is not)."""
    config = config.with_identities(stream_identities(config))
    if config.fan_out:
        config = replace(config, streams=tuple(_with_consumer(spec) for spec in config.streams))
    return config


def _with_consumer(spec: StreamSpec) -> StreamSpec:
    """Enhanced fan-out: the stream's consumer, ACTIVE. A consumerName is found or registered (and
    waited for); a consumerArn must be registered already. Never deregistered here: that is an
    operator's decision (`pyspark-kinesis consumers deregister`)."""
    from ...aws import consumers

    client = proxy_for(spec, agent="planner").client
    once = proxy_for(spec, agent="planner", max_attempts=1).client  # (see `ensure_consumer`)
    if spec.consumer_arn is not None:
        found = consumers.describe_arn(client, spec.consumer_arn)
        if found is None:
            raise StreamAccessError(
                f"the consumer {spec.consumer_arn} of {spec.describe()} is not registered; register it "
                "(`pyspark-kinesis consumers register`) or give consumerName to have the query register it"
            )
        if found.status == consumers.DELETING:
            raise StreamAccessError(
                f"the consumer {spec.consumer_arn} of {spec.describe()} is being deregistered; give a "
                "registered consumer, or consumerName to have the query register one"
            )
        if found.status != consumers.ACTIVE:
            found = consumers.ensure_consumer(client, spec.resolved_arn, found.name, register_with=once)
    else:
        assert spec.consumer_name is not None
        found = consumers.ensure_consumer(client, spec.resolved_arn, spec.consumer_name, register_with=once)
    log.info("Kinesis %s: enhanced fan-out through consumer %s (%s)", spec.describe(), found.name, found.arn)
    return spec.with_consumer(found.arn)


def backfill_slices(config: SourceConfig) -> list[BackfillPlan]:
    """A batch read's tasks: every listed shard of every stream, from its starting position (LATEST:
    now) to its ending position (LATEST: now; a named shard's sequence number: there); with named
    shards, those the lineage rule says to read."""
    now = now_ms()
    slices = []
    for spec in config.streams:
        listed = proxy_for(spec, agent="planner").list_shards()
        infos = {s.shard_id: s for s in listed}
        if spec.shard_starts:
            starts = {
                sid: state.position
                for sid, state in named_starts(spec, listed, config.fail_on_data_loss, now).items()
            }
        else:
            check_start_in_retention(spec, spec.starting_position, config.fail_on_data_loss, now)
            starts = {s.shard_id: spec.starting_position for s in listed}
        ends = named_ends(spec, listed)
        beyond = lineage.past_ends(listed, ends)
        default_end = spec.ending_position or config.ending_position
        for sid, start in starts.items():
            if sid in beyond:
                continue
            start = Position.at_timestamp(now) if start.kind == LATEST else start
            end = ends.get(sid, default_end)
            cutoff_ms = int(end.ts_ms or 0) if end.kind == TIMESTAMP else now
            end_at = end if end.anchor is not None else None
            info = infos[sid]
            slices.append(
                BackfillPlan(
                    spec.resolved_arn,
                    sid,
                    start,
                    info.closed,
                    cutoff_ms,
                    end_at,
                    (info.start_hash, info.end_hash),
                    info.known_end,
                    info.first_seq,
                )
            )
    return slices


# Listings that may fail in a row (each one after botocore's retries, one per shardDiscoveryIntervalMs)
# before the query fails: a passing outage is waited out, a permission taken away is not waited on forever
# while a split's children go unread.
DISCOVERY_FAILURES = 6


@dataclass
class _Stream:
    """One stream's proxy, when it was last listed, and what was listed."""

    spec: StreamSpec
    proxy: StreamProxy
    last_ms: int = 0
    checked_ms: int = 0  # when DescribeStreamSummary last said it is the stream the query started with
    infos: dict[str, ShardInfo] = field(default_factory=dict)
    failures: int = 0  # intervals whose listings failed, in a row (see DISCOVERY_FAILURES)
    failed_ms: int = 0  # when a failure was last counted
    first_seen: dict[str, int] = field(default_factory=dict)  # shards held back by `_held_back`: since when


def recreated_streams(offset: SourceOffset, config: SourceConfig) -> list[str]:
    """Streams of the offset that were deleted and re-created since it was written: same ARN, another
    creation time. Their positions do not apply to the new stream; with failOnDataLoss a DataLossError."""
    out = []
    for key, then in sorted(offset.created.items()):
        spec = config.stream(key)
        now = None if spec is None else spec.created_ms
        if now is None or now == then:
            continue
        if config.fail_on_data_loss:
            raise DataLossError(
                f"{stream_words(key)} was deleted and re-created since this checkpoint was written (created "
                f"{_iso(then)} then, {_iso(now)} now): the records the query had not read from the old stream "
                "are gone, and its positions do not apply to the new one. Set failOnDataLoss=false to go on "
                "with the new stream from its start (TRIM_HORIZON), or start over with a new checkpointLocation."
            )
        out.append(key)
    return out


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


class ShardDiscovery:
    """The driver's view of each stream's shards. Holds caches only: the truth is in the offset."""

    def __init__(
        self,
        config: SourceConfig,
        proxy_factory: Callable[[StreamSpec], StreamProxy],
        clock: Callable[[], int],
    ) -> None:
        self.config = config
        self._proxy_factory = proxy_factory
        self._clock = clock
        self._streams: dict[str, _Stream] = {}

    def _stream(self, key: str) -> _Stream:
        if key not in self._streams:
            spec = self.config.stream(key)
            assert spec is not None, f"stream {key} is not in the options"
            self._streams[key] = _Stream(spec, self._proxy_factory(spec))
        return self._streams[key]

    def proxy(self, key: str) -> StreamProxy:
        """Stream `key`'s Kinesis calls, as the driver makes them."""
        return self._stream(key).proxy

    def info(self, key: str, shard_id: str) -> ShardInfo | None:
        """What the latest listing of stream `key` said about a shard (None if it was not listed)."""
        return self._stream(key).infos.get(shard_id)

    def created(self, key: str) -> int | None:
        """When the stream was created, as learned at query start."""
        return self._stream(key).spec.created_ms

    def initial_states(
        self, key: str, start: Position | None = None, created_ms: int | None = None
    ) -> dict[str, ShardState]:
        """The shards a stream starts with, at `start` (default: its starting position, and the positions
        of the shards the options name; LATEST is pinned to now). A DynamoDB stream younger than its 24
        hours (`created_ms`, default: as learned at query start) has lost no shard to age yet, so a shard
        whose parent is not listed has a parent listed late: it waits as in a refresh (`_held_back`;
        found by the simulation: seed 5,044, a table's new stream followed while its first shard's
        children were listed before it)."""
        stream = self._stream(key)
        spec = stream.spec
        if start is None and spec.shard_starts:
            listed = stream.proxy.list_shards()
            stream.last_ms = self._clock()
            stream.infos = {s.shard_id: s for s in listed}
            return self._pinned(named_starts(spec, listed, self.config.fail_on_data_loss, self._clock()))
        start = start or spec.starting_position
        check_start_in_retention(spec, start, self.config.fail_on_data_loss, self._clock())
        listed = stream.proxy.list_shards(open_only=start.kind == LATEST)
        stream.last_ms = self._clock()
        stream.infos = {s.shard_id: s for s in listed}
        if start.kind == LATEST:
            listed = lineage.open_only(listed)
        created_ms = spec.created_ms if created_ms is None else created_ms
        if created_ms is not None and self._clock() - created_ms < RETENTION_MS:
            listed = self._held_back(key, {}, listed)
        return self._pinned(lineage.initial_states(listed, start))

    def _pinned(self, states: dict[str, ShardState]) -> dict[str, ShardState]:
        """LATEST, "from the moment the query first started", as a timestamp in the first offset: records
        put between now and the first batch are read, and a restart does not move it."""
        now = Position.at_timestamp(self._clock())
        return {
            sid: replace(state, position=now) if state.position.kind == LATEST else state
            for sid, state in states.items()
        }

    def refresh(
        self, key: str, states: dict[str, ShardState], *, force: bool, cutoff_ms: int | None
    ) -> dict[str, ShardState]:
        """`states` with what a new listing shows (new shards, expired ones), if one is due: the
        interval has passed, `force`, or (AvailableNow) the last listing is older than the cutoff.
        A failing listing (throttled, region down) is logged and retried at the next interval; the
        other streams go on. Three steps: whether a listing is due, the listing (with its failure
        streak), and what it changes."""
        stream = self._stream(key)
        if not (force or self._due(stream, cutoff_ms)):
            return states
        listed = self._list(key, stream)
        return states if listed is None else self._apply(key, states, listed)

    def _due(self, stream: _Stream, cutoff_ms: int | None) -> bool:
        due = self._clock() - stream.last_ms >= self.config.shard_discovery_interval_ms
        # AvailableNow: a listing from before the cutoff could show a shard closed just before it as
        # open, and a read at its tip would then count it done with its children unread.
        return due or (cutoff_ms is not None and stream.last_ms < cutoff_ms)

    def _list(self, key: str, stream: _Stream) -> list[ShardInfo] | None:
        """The stream's shards now, or None when the listing failed (counted: `DISCOVERY_FAILURES` in
        a row, one per interval, fail the query)."""
        now = stream.last_ms = self._clock()
        try:
            # Still the stream the query started with? Deleted, or deleted and re-created (same ARN,
            # new creation time, and positions that do not apply to it): the query ends, clearly. Asked
            # at most once per interval (DescribeStreamSummary: 20 calls per second per account), also
            # when closures force listings.
            if now - stream.checked_ms >= self.config.shard_discovery_interval_ms or not stream.checked_ms:
                stream.proxy.check_same_stream()
                stream.checked_ms = now
            listed = stream.proxy.list_shards()
        except StreamNotFoundError:
            try:  # (a table's stream another followed is deleted 24 hours after it was disabled)
                followed = follows_table(stream.spec) and stream.proxy.followed()
            except StreamAccessError as exc:
                self._failed(key, stream, now, exc)
                return None
            if not followed:
                raise stream.proxy.deleted() from None
            listed = []  # (all of it gone: what was left unread is said lost, and `stream_set` goes on)
        except StreamRecreatedError:
            raise
        except StreamAccessError as exc:
            self._failed(key, stream, now, exc)
            return None
        stream.failures = stream.failed_ms = 0
        stream.infos = {s.shard_id: s for s in listed}
        return listed

    def _failed(self, key: str, stream: _Stream, now: int, exc: StreamAccessError) -> None:
        if not stream.failed_ms or now - stream.failed_ms >= self.config.shard_discovery_interval_ms:
            stream.failures += 1  # (once per interval: a closure's forced listings retry within one)
            stream.failed_ms = now
        if stream.failures >= DISCOVERY_FAILURES:
            calls = LISTING_CALLS["dynamodb" if ":dynamodb:" in key else "kinesis"]
            raise StreamAccessError(
                f"{stream_words(key)}: shard discovery ({calls[0]}) failed {stream.failures} times in a "
                f"row, each after botocore's retries: {exc}. Without it the children of a split or merge "
                f"are never read. Check that the credentials may call {calls[1]} on the stream "
                "(AccessDenied), or the account's control-plane limits (throttling), and start the query "
                "again: it goes on from its checkpoint."
            ) from None
        log.warning(
            "%s: shard discovery failed (%d of %d in a row before the query fails), retried at the next "
            "interval: %s", stream_words(key), stream.failures, DISCOVERY_FAILURES, exc,
        )  # fmt: skip

    def _apply(
        self, key: str, states: dict[str, ShardState], listed: list[ShardInfo]
    ) -> dict[str, ShardState]:
        """`states` with the listing's new shards, its aged-out orphans forgotten and its expired
        shards marked (each loss reported)."""
        merged = lineage.merge_discovered(states, self._held_back(key, states, listed))
        added = sorted(set(merged) - set(states))
        if added:
            log.info("Kinesis stream %s: new shards %s", key, ", ".join(added))
        merged, orphans = lineage.forget_aged_out(merged, listed)
        if orphans:
            self.loss(
                f"{stream_words(key)}: shards {', '.join(orphans)} have not been read yet and their parents "
                "are past retention, so their oldest records may be too (the query was stopped, or behind, "
                "longer than the stream's retention): an unknown number of records may be lost",
                "and read them from their oldest record left",
            )
        merged, expired = lineage.mark_expired(merged, listed)
        if expired:
            where = ", ".join(
                f"{sid} (from {states[sid].position.describe()})" for sid in expired if sid in states
            )
            text = (
                f"{stream_words(key)}: shards {where or ', '.join(expired)} went past retention before they were "
                "read to their end; their unread records are lost"
            )
            self.loss(text, "and go on with their children")
        return merged

    def _held_back(self, key: str, states: dict[str, ShardState], listed: list[ShardInfo]) -> list[ShardInfo]:
        """The listing less the new shards that may have a parent the service has not listed yet, and
        their descendants. DynamoDB Streams lists a shard minutes after it made it, now and then, and a
        shard not listed yet can already have children that are: a child whose parent is neither in the
        offset nor listed was read at once and its parent, listed later with a known descendant, never
        (found by the simulation: seeds 5,002 and 5,103 of tests/sim/dynamodb_week.py, a late child
        split before it was listed; its changes were lost). Such a shard waits `LATE_LISTING_MS` from
        when a listing first showed it; a parent listed meanwhile comes first, as any parent does.
        Kinesis lists every shard as it makes it: its listings are taken as they are."""
        stream = self._stream(key)
        if stream.spec.service != DYNAMODB:
            return listed
        known, now = set(states) | {s.shard_id for s in listed}, self._clock()
        held, new = set(), set()
        for shard in listed:
            if shard.shard_id not in states and any(p not in known for p in shard.parents):
                new |= {shard.shard_id} - stream.first_seen.keys()
                first = stream.first_seen.setdefault(shard.shard_id, now)
                if now - first < LATE_LISTING_MS:
                    held.add(shard.shard_id)
        for _depth in range(len(listed)):  # (bounded: a descendant of a held shard waits with it)
            more = {s.shard_id for s in listed if s.shard_id not in states and set(s.parents) & held} - held
            if not more:
                break
            held |= more
        for read in stream.first_seen.keys() & states.keys():  # (in the offset: never held again)
            del stream.first_seen[read]
        if held & new:  # (told when a shard starts to wait, not at every listing of its wait)
            log.info(
                "%s: shards %s wait up to %d min for their parents' listing",
                stream_words(key), ", ".join(sorted(held)), LATE_LISTING_MS // 60_000,
            )  # fmt: skip
        return [shard for shard in listed if shard.shard_id not in held]

    def loss(self, text: str, then: str) -> None:
        """Records the query should read are gone: a DataLossError, or with failOnDataLoss=false a
        warning, and `then`."""
        if self.config.fail_on_data_loss:
            raise DataLossError(f"{text}. Set failOnDataLoss=false to accept the loss {then}.")
        log.warning("%s; failOnDataLoss=false: going on %s", text, then)
