"""The fan-out agent's state: the subscriptions it holds, their events, and the service's spacing.

Kept apart from the agent's process and socket (`process`) so that the rules are in one place:
a subscription is handed again only to a read that starts exactly where the last one left it
(`SubscriptionHub.open`), SubscribeToShard calls keep the service's spacing for the whole executor (`spacing.Spacing`),
and reads of one batch settle together (`SubscriptionHub.next_for`). See `process` for why it exists.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...aws.error_kinds import error_code
from ...aws.subscribe import Subscription
from ...config.stream_specs import StreamSpec
from ...model import AFTER, INSIDE, Position, seq_key
from .event_queue import EventQueue
from .spacing import ConsumerShard, Spacing

# A read's events are remembered for a retry of it (`HeldSubscription.rewind`) up to this many payload
# bytes (a batch's default share of a shard); beyond, a retry subscribes anew as it did before.
REWIND_MAX_BYTES = 64 * 1024 * 1024
FIRST_MESSAGE_WAIT_S = 5.0  # a new subscription's first message is awaited (a refusal may be one)
# A kept subscription not taken again by then is closed: just under the 5 minutes after which the
# service ends any subscription. Keeping one costs no call and no fee (fan-out is billed per consumer
# and shard hour, subscribed or not); a stream quiet for minutes then has its first records already
# pushed here when its next batch comes, instead of a new subscription's round trip.
MAX_IDLE_S = 280.0
SETTLE_CHECK_S = 0.05  # how often a waiting read looks whether its batch has records from another read
BATCH_MARKS_S = 600.0  # how long a batch's "has records" mark is remembered


@dataclass(frozen=True)
class SubscriptionRequest:
    """What a read asks the agent for: a subscription to `shard` through `consumer` from `position`
    (with `reuse`, the one a read kept exactly there, if any; with `verify`, "after S" from S itself:
    see `Position.iterator_args`). `batch` names the read's batch (reads of one batch settle together)."""

    spec: StreamSpec
    consumer: str
    shard: str
    position: Position
    reuse: bool
    batch: str = ""
    verify: bool = False
    relay_key: bytes = b""  # the query run's key: reads on other executors that know it may continue
    subscribed_ms: int = 0  # when the shard's last read's subscription was opened, by any agent (0: unknown)

    @property
    def key(self) -> ConsumerShard:
        return (self.consumer, self.shard)


def _from(event: dict[str, Any], position: Position, with_anchor: bool = False) -> dict[str, Any] | None:
    """The event's records from `position` on (after S; inside S: S itself on, the read skips the
    aggregate's consumed user records; `with_anchor`: S itself on in either case, for a read that
    checks S is there), or None when none is left. Other positions keep it whole."""
    if position.kind not in (AFTER, INSIDE) or position.seq is None:
        return event
    records = event["Records"]
    at = seq_key(position.seq)
    inclusive = with_anchor or position.kind == INSIDE
    seqs = [seq_key(s) for s in records.seqs.to_pylist()]
    first = next((i for i, s in enumerate(seqs) if s > at or (inclusive and s == at)), len(seqs))
    if first >= len(seqs):
        return None
    return event if first == 0 else dict(event, Records=records.slice(first))


@dataclass
class ReadMemory:
    """What the read holding a subscription took, for a retry of it (`HeldSubscription.rewind`) and for
    the rest of an event it stopped inside (`requeue_after`)."""

    start: Position | None = None  # where the read started (None: nothing to rewind to)
    verified: bool = False  # that read checks its start is still there (see `hand_to`)
    events: list[dict[str, Any]] = field(default_factory=list)  # the events it took, in order (capped)
    bytes: int = 0  # their payload bytes (see REWIND_MAX_BYTES)
    last_event: dict[str, Any] | None = None  # the last event it took
    requeued: bool = False  # the front of the queue is the rest of the last event


class HeldSubscription:
    """One open subscription, who holds it and what the read holding it took. Its events and their
    pump thread are the `EventQueue`'s; what changes here changes through the methods below."""

    def __init__(self, key: ConsumerShard, subscription: Subscription, relay_key: bytes = b"") -> None:
        self.key, self.relay_key = key, relay_key  # relay_key: the query run that opened it (see `relay`)
        self.events = EventQueue(subscription, f"efo-{key[1]}")
        self.position: Position | None = None  # where a kept subscription continues from
        self.batch = ""  # the batch of the read that holds it (see `SubscriptionHub.next_for`)
        self.behind = -1  # MillisBehindLatest of the last event handed out
        self.subscribed_ms = 0  # wall-clock time the service accepted it (see `Spacing`)
        self.read = ReadMemory()  # what the read holding it took (see `rewind`, `requeue_after`)
        self.since = time.monotonic()

    @property
    def closing(self) -> bool:
        return self.events.closing

    @property
    def pending(self) -> int:
        return self.events.pending

    def accepted(self) -> None:
        """The service accepted the subscription (its first message was no refusal): now."""
        self.subscribed_ms = int(time.time() * 1000)

    def take(self, wait_s: float, peek: bool = False) -> tuple[str, Any] | None:
        """The next message, or None if none came within `wait_s`."""
        item = self.events.take(wait_s, peek)
        if item is not None and not peek and item[0] == "event":
            self.behind = int(item[1].get("MillisBehindLatest", -1))
            self.read.last_event, self.read.requeued = item[1], False
            self._remember(item[1])
        return item

    def hand_to(self, batch: str, position: Position, verified: bool = False) -> None:
        """A read of `batch` starts (or continues) this subscription at `position`: the events it takes
        are remembered until it keeps the subscription, so that a retry of it can start over (`rewind`).
        `verified`: the subscription was opened at S itself for a read that checks S is still there."""
        self.batch = batch
        self.read = ReadMemory(start=position, verified=verified)

    def kept_at(self, position: Position) -> None:
        """The read that held it kept it at `position` (see `requeue_after`): from now on it waits there."""
        self.requeue_after(position)
        self.position, self.since = position, time.monotonic()

    def _remember(self, event: dict[str, Any]) -> None:
        """Keep a taken event for a retry, while the read's events stay under REWIND_MAX_BYTES (a long
        read, a drained backlog, would otherwise hold all it read here)."""
        read = self.read
        if read.start is None:
            return
        read.bytes += event["Records"].payload_bytes
        if read.bytes > REWIND_MAX_BYTES:
            read.start, read.events = None, []  # (no rewind for this read)
        else:
            read.events.append(event)

    def requeue_after(self, position: Position) -> int:
        """A read that stopped inside the last event it took (a batch limit, or inside a KPL aggregate)
        kept the subscription at `position`: the records of that event from `position` on go back to
        the front of the queue, so that the next read gets them first (it skips the consumed user
        records of an aggregate itself). Without this, a read that stopped inside an event could not
        keep its subscription, and the shard's next batch had to subscribe again and wait out the
        service's 5 seconds; under a batch budget shorter than that, batch after batch, the read never
        got a record. Returns how many records went back."""
        event = self.read.last_event
        rest = None if event is None else _from(event, position)
        if rest is None:
            return 0
        self.events.push_front([rest])
        self.read.requeued = True
        return len(rest["Records"])

    def rewind(self, position: Position) -> bool:
        """A read that wants this kept subscription at `position`, where the read that kept it started:
        a retry of that read (its task failed before recording its batch end). The events that read
        took go back in front of the queue, from `position` on, in place of the rest `requeue_after`
        put there, so the retry continues the same subscription instead of subscribing again within the
        service's 5 seconds. False when `position` is not where that read started."""
        read = self.read
        if read.start is None or position != read.start or not read.events:
            return False
        # (a verified read's retry gets S too, and checks it as the read did: see `open`)
        rests = [_from(event, position, with_anchor=read.verified) for event in read.events]
        self.events.push_front([r for r in rests if r is not None], drop_front_event=read.requeued)
        read.requeued = False
        read.events = []
        return True

    def close(self) -> None:
        self.events.close()


def refused(exc: BaseException) -> bool:
    """Whether a failed SubscribeToShard was the service's refusal (an AWS error: the call was not
    taken). Anything else (a connection refused, reset or timed out) may have reached the service after
    it took the call, and Kinesis answers another call within 5 s of a taken one with
    ResourceInUseException: the spacing counts it as taken (found by the chaos runs of 2026-11-29)."""
    return bool(error_code(exc))


class SubscriptionHub:
    """The agent's subscriptions: opened (or continued) for reads, kept between them, reaped."""

    def __init__(self, client_for: Callable[[StreamSpec], Any]) -> None:
        self.client_for = client_for
        self.spacing = Spacing()
        self._lock = threading.Lock()
        self._kept: dict[ConsumerShard, HeldSubscription] = {}
        self._reading: dict[ConsumerShard, HeldSubscription] = {}  # handed to a read now (see `busy`)
        self._with_records: dict[str, float] = {}  # batches a read has taken records for, since when
        self._reads = 0
        self.idle_since = time.monotonic()
        self.relayed_at = float(
            "-inf"
        )  # when a subscription of a query run with the relay on was last in use

    def open(self, want: SubscriptionRequest) -> tuple[HeldSubscription, bool]:
        """The subscription a read continues (`want.reuse`, same position) or a new one; True for a new
        one. A refusal raises as botocore raised it."""
        key = want.key
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is not None:
            if want.reuse and kept.relay_key == want.relay_key:
                if kept.position == want.position:
                    kept.hand_to(want.batch, want.position)
                    return self._handed(kept), False
                verified = kept.read.verified
                if kept.rewind(want.position):
                    # A retry: a read that was verified is answered as a new subscription, so that the
                    # retry checks S as its failed attempt did (and reports the same loss if S is gone).
                    kept.hand_to(want.batch, want.position, verified)
                    return self._handed(kept), verified
            kept.close()
        self.spacing.before_subscribe(key, want.subscribed_ms)
        try:
            subscription = Subscription(
                self.client_for(want.spec), want.consumer, want.shard, want.position, want.verify
            )
        except BaseException as exc:
            # (only the service's refusal is one; a call that broke may have reached it: its 5 s hold)
            self.spacing.answered(key, ok=not refused(exc))
            raise
        held = HeldSubscription(key, subscription, want.relay_key)
        held.hand_to(want.batch, want.position, want.verify)
        if want.relay_key:
            self.relayed_at = time.monotonic()
        first = held.take(FIRST_MESSAGE_WAIT_S, peek=True)
        if first is not None and first[0] == "error":
            held.close()
            # Refused inside the stream (a service error event: kinesis-local refuses so) is a refusal;
            # a connection broken after the answer is a subscription the service took, and its 5 s
            # hold (found by the chaos runs of 2026-11-29, seed 10: resubscribed 1 s after a reset).
            self.spacing.answered(key, ok=not refused(first[1]))
            raise first[1]
        self.spacing.answered(key, ok=True)
        held.accepted()
        return self._handed(held), True

    def _handed(self, held: HeldSubscription) -> HeldSubscription:
        with self._lock:
            self._reading[held.key] = held
        return held

    def busy(self, key: ConsumerShard, relay_key: bytes) -> tuple[str, int] | None:
        """(batch, subscribed_ms) of the read of the same query run that holds `key`'s subscription right
        now, or None. A read on another executor that finds the shard's subscription in use by a read of
        its own batch is a second attempt of that read (Spark's speculation): subscribing there would
        take the subscription from the first attempt (the service keeps one per consumer and shard, and
        refuses a second within 5 s), which would then subscribe back; it reads by GetRecords instead
        (see `executor.modes.fanout`)."""
        with self._lock:
            held = self._reading.get(key)
            if held is None or held.closing or held.relay_key != relay_key:
                return None
            return held.batch, held.subscribed_ms

    def relay_key_of(self, key: ConsumerShard) -> bytes | None:
        """The query run's key of the subscription kept for `key` (or in use by a read: see `busy`), if
        its query run lets other executors continue it."""
        with self._lock:
            held = self._kept.get(key)
            if held is None:
                held = self._reading.get(key)
                held = held if held is not None and not held.closing else None
            return held.relay_key if held is not None and held.relay_key else None

    def resume(
        self, key: ConsumerShard, relay_key: bytes, position: Position, batch: str
    ) -> HeldSubscription | None:
        """For a read on another executor (see `relay`): the subscription kept for `key` by the same
        query run at exactly `position`, or None (the read then subscribes where it runs). Never opens
        one: a remote read brings no stream settings."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or kept.relay_key != relay_key:
                return None
            # (a verified read's retry is not relayed: it subscribes where it runs and checks S itself)
            if kept.position != position and (kept.read.verified or not kept.rewind(position)):
                return None
            del self._kept[key]
            self._reading[key] = kept
        kept.hand_to(batch, position)
        self.relayed_at = time.monotonic()
        return kept

    def next_for(self, held: HeldSubscription, wait_s: float, settle: bool) -> tuple[str, Any]:
        """The read's next message within `wait_s`: ("event", response), ("end"/"error", ...),
        ("idle", behind) when none came, or with `settle` ("settle", behind) as soon as another read
        of the same batch has taken records."""
        deadline = time.monotonic() + max(0.0, wait_s)
        for _slice in range(int(max(0.0, wait_s) / SETTLE_CHECK_S) + 2):
            remaining = deadline - time.monotonic()
            item = held.take(min(SETTLE_CHECK_S, remaining) if settle else remaining)
            if item is not None:
                if item[0] == "event" and len(item[1]["Records"]) and held.batch:
                    self._mark(held.batch)
                return item
            if settle and held.batch in self._with_records:
                return ("settle", held.behind)
            if time.monotonic() >= deadline:
                break
        return ("idle", held.behind)

    def _mark(self, batch: str) -> None:
        with self._lock:
            now = time.monotonic()
            if batch not in self._with_records:
                old = [b for b, since in self._with_records.items() if now - since > BATCH_MARKS_S]
                for b in old:
                    del self._with_records[b]
                self._with_records[batch] = now

    def keep(self, held: HeldSubscription, position: Position) -> None:
        held.kept_at(position)
        with self._lock:
            old = self._kept.pop(held.key, None)
            self._kept[held.key] = held
            if self._reading.get(held.key) is held:
                del self._reading[held.key]
        if old is not None and old is not held:
            old.close()

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [k for k, held in self._kept.items() if now - held.since > MAX_IDLE_S]
            closing = [self._kept.pop(k) for k in stale]
            for k in [k for k, held in self._reading.items() if held.closing]:
                del self._reading[k]
            if self._reads or self._kept:
                self.idle_since = now
            if any(held.relay_key for held in self._kept.values()):
                self.relayed_at = now
        for held in closing:
            held.close()

    def enter(self) -> None:
        with self._lock:
            self._reads += 1

    def leave(self) -> None:
        with self._lock:
            self._reads -= 1
            self.idle_since = time.monotonic()

    def close_all(self) -> None:
        with self._lock:
            closing, self._kept = list(self._kept.values()), {}
        for held in closing:
            held.close()
