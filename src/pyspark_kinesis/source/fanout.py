"""Executor-side reading with enhanced fan-out: one shard, one batch, through SubscribeToShard.

The batch logic is polling's (`fetching.ShardRead`): events arrive shaped like GetRecords responses
(`aws.subscribe`), and `_absorb` takes each one under the same limits, aggregate handling, replay
bound and caught-up rule, so every exactly-once invariant holds the same way: the batch end is
still recorded first-writer-wins by the task, and a replay reads exactly to it. What differs is how
records arrive:

- Subscriptions are held by the executor's fan-out agent (`fanout_agent`), not by the reading Python
  worker: the read asks it over a local socket (`fanout_link`) for a subscription from the batch's
  start position (LATEST is pinned to a timestamp by the planner as in polling, so a start at
  LATEST never waits for new data forever) and takes events until a limit, the tip (an event with
  MillisBehindLatest 0 pushed after the read started: one that waited in the agent says nothing
  about now), the shard's end (an event with ChildShards and no continuation), the replay bound or
  the batch's time budget; a running query's read also ends after `idlePollIntervalMs` without a
  push, or sooner once another read of its batch took records (`_drain`).
- A subscription that ends (the service ends each after 5 minutes) or fails with a transient error is
  made again from where the read got to. The service's rules are kept before it is refused: one
  SubscribeToShard per second per consumer and shard, none within 5 s of the last successful one
  (the agent's `Spacing`, per executor); a ResourceInUseException (another subscription still open,
  e.g. one another executor holds) is retried after a backoff.
- A shard known to be closed whose subscription reaches the tip without the event that ends it is
  checked with one GetRecords (`_confirm_end`): Kinesis sends that event, kinesis-local does not.
- A read that ends between two events leaves its subscription open in the agent for the shard's next
  batch, which continues it from exactly this batch's end in whichever Python worker Spark runs it;
  events pushed meanwhile wait there, so that batch starts with them at once. A read that stopped
  inside an event closes its subscription (the next read subscribes from its own position).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from urllib3.exceptions import HTTPError as StreamBroken

from ..aws.consumers import describe_arn
from ..aws.errors import (
    CALL_ERRORS,
    error_code,
    is_foreign_sequence_number,
    is_future_timestamp,
    is_not_found,
    is_retryable,
)
from ..errors import StreamAccessError
from ..model import END, INSIDE, TIMESTAMP, Position
from .columns import Columns
from .fanout_link import AgentLink, SubscriptionEnded
from .fetching import CACHE_MAX_BEHIND_MS, ShardRead
from .offsets import ShardEnd

_MAX_SUBSCRIPTIONS = 10_000  # hard bound on one shard's subscriptions in one batch (time stops it first)
_MAX_EVENTS = 1_000_000  # hard bound on the events one subscription is read for
_REPLAY_WAIT_S = 10.0  # a replay (no deadline) asks for events this long at a time...
_REPLAY_IDLE_WAITS = 6  # ...and takes this many empty waits in a row as a broken subscription
_STREAM_ERRORS = (*CALL_ERRORS, StreamBroken, OSError)


class FanOutRead(ShardRead):
    """`ShardRead` whose records come from SubscribeToShard events instead of GetRecords calls.

    `batch_key` names the read's batch across the query's reads on this executor (see `_drain`)."""

    def __init__(self, *args: Any, batch_key: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_key = batch_key

    def run(self) -> tuple[Columns, ShardEnd]:
        start, until = self.start, self.until
        if start.is_end or (until is not None and until == start):
            return self.cols, ShardEnd(start=start, end=start)
        consumer = self.proxy.spec.consumer_arn
        if consumer is None:
            raise RuntimeError(f"{self.proxy.spec.describe()} has no consumer: the query start registers one")
        self.consumer = consumer
        self.link: AgentLink | None = None
        self.restart_at: Position | None = None  # where to subscribe after data loss was accepted
        self.read_started, self.read_wall = time.monotonic(), time.time()
        reuse = start.kind != INSIDE  # a subscription kept at exactly this start continues
        subscribed = False
        try:
            for _subscription in range(_MAX_SUBSCRIPTIONS):
                if self._over():
                    break
                if not subscribed:
                    subscribed, reuse = self._subscribe(reuse), False
                    if not subscribed:
                        continue
                if self._drain():
                    break
                subscribed = False  # the subscription ended or broke: a new one from where the read got to
            between_events = not (self.stop or self.closed) and self.resume.kind != INSIDE
            caught_up = self.behind < CACHE_MAX_BEHIND_MS  # (far behind: the next read verifies)
            if subscribed and until is None and between_events and caught_up and self.link is not None:
                # The read took whole events and ended between two: the shard's next batch, in any
                # worker of this executor, continues this subscription from exactly here.
                with contextlib.suppress(*_STREAM_ERRORS):  # (a lost agent keeps nothing: no harm)
                    self.link.keep(self.resume)
        finally:
            if self.link is not None:
                self.link.close()  # closes the subscription unless it was kept
        return self.cols, self._end()

    def _over(self) -> bool:
        return self.stop or self.closed or (self.until is None and time.monotonic() > self.limits.deadline)

    def _subscribe(self, reuse: bool) -> bool:
        """A subscription from where the read got to (with `reuse`, the one kept there if any); False
        after a failure the read survives."""
        position = self.restart_at or self.resume
        self.restart_at = None
        try:
            if self.link is None or self.link.broken:
                if self.link is not None:
                    self.link.close()
                self.link = AgentLink()
            verify = self.until is None and position.anchor is not None
            fresh = self.link.open(
                self.proxy.spec, self.consumer, self.shard, position, reuse, self.batch_key, verify
            )
        except _STREAM_ERRORS as exc:
            self._failed(exc, position)
            return False
        if fresh:
            self.skip_from = position
            self.anchor = position.anchor if verify else None
        self.failures = 0
        return True

    def _drain(self) -> bool:
        """Take events until the read is over (True) or the subscription ends or breaks (False).

        A first attempt of a running query (not AvailableNow, which reads on to the tip) waits at most
        `push_wait_s` (idlePollIntervalMs) for a push, and less once another read of its batch on this
        executor has taken records: a quiet shard then holds back neither its batch nor the records
        other shards brought. Waiting is free here (the agent holds the subscription; no call is made),
        so the planner does not skip idle shards under fan-out: the wait paces their batches."""
        link = self.link
        assert link is not None
        settle = self.until is None and self.limits.cutoff_ms is None
        idle = 0
        for _event in range(_MAX_EVENTS):
            now = time.monotonic()
            if self.until is not None:
                wait_s = _REPLAY_WAIT_S
            else:
                wait_s = self.limits.deadline - now
                if settle:
                    wait_s = min(wait_s, self.read_started + self.limits.push_wait_s - now)
            try:
                response = link.next_event(min(_REPLAY_WAIT_S, max(0.01, wait_s)), settle)
            except SubscriptionEnded:
                return False
            except _STREAM_ERRORS as exc:
                self._failed(exc, self.resume)
                return False
            if response is None:  # nothing pushed within the wait
                idle += 1
                if settle and (
                    link.settled or time.monotonic() >= self.read_started + self.limits.push_wait_s
                ):
                    self.at_tip = link.behind == 0
                    if self._to_shard_end() and not self.cols:
                        self._confirm_end()  # a closed shard whose server stopped pushing (kinesis-local)
                    elif self._to_shard_end():
                        self.at_tip = False
                    return True
                if self._over():
                    return True
                if idle >= _REPLAY_IDLE_WAITS:
                    self._failed(ConnectionError("no event from the subscription for a minute"), self.resume)
                    return False
                continue
            idle = 0
            if self._absorb(response) or self._over():
                return True
        return False

    def _absorb(self, response: dict) -> bool:
        if response.get("MillisBehindLatest") == 0 and response.get("ReceivedAt", 1e18) < self.read_wall:
            # Pushed before this read started (it waited in the agent): "at the tip" was true then, not
            # now. Taken as the tip it would end an AvailableNow run with records before its cutoff
            # unread, so it proves nothing here; a later event does.
            response = {**response, "MillisBehindLatest": -1}
        over = super()._absorb(response)
        if over and self.at_tip and not (self.stop or self.closed) and self.link and self.link.pending:
            self.at_tip = False  # at the tip when pushed, but more events have come since: read on
            return False
        if over and not (self.closed or self.stop or len(response["Records"])) and self._to_shard_end():
            self._confirm_end()
        return over

    def _confirm_end(self) -> None:
        """(See `_confirm_closed`.) A closed shard is never "at the tip" until its end is confirmed:
        an AvailableNow run takes a shard at the tip as done, and would then never read its children."""
        self._confirm_closed()
        if not self.closed:
            self.at_tip = False

    def _to_shard_end(self) -> bool:
        return self.limits.closed if self.until is None else self.until.kind == END

    def _confirm_closed(self) -> None:
        """A shard known to be closed, read to the tip, whose subscription has not sent the event that
        ends it (ChildShards, no continuation): Kinesis sends that event, but a server that does not
        (kinesis-local) would leave the shard open forever and its children unread. One GetRecords
        from where the read got to settles it: no records and no next iterator is the shard's end."""
        position = self.resume
        if position.kind == INSIDE:
            return  # inside an aggregate: not at an end yet
        try:
            response = self.proxy.get_records(self.proxy.shard_iterator(self.shard, position), 1)
        except CALL_ERRORS:
            return  # the next batch asks again
        if not response["Records"] and response.get("NextShardIterator") is None:
            self.closed, self.at_tip = True, False
            self.children = tuple(c["ShardId"] for c in response.get("ChildShards", []))

    def _failed(self, exc: BaseException, position: Position) -> None:
        """What a failed subscription means: at the tip (a start ahead of the service's clock), data
        gone (the polling rules: a DataLossError or, with failOnDataLoss=false, on from the oldest
        record), or a pause before the next subscription. Anything else propagates."""
        if position.kind == TIMESTAMP and is_future_timestamp(exc):
            self.at_tip = self.stop = True
            return
        if is_not_found(exc) and describe_arn(self.proxy.client, self.consumer) is None:
            raise StreamAccessError(
                f"the enhanced fan-out consumer {self.consumer} of {self.proxy.spec.describe()} is no longer "
                "registered (deregistered while the query ran?). Restart the query: it registers its "
                "consumer again (with consumerArn, give a registered one)."
            ) from None
        if is_not_found(exc) or is_foreign_sequence_number(exc):
            self._gone()
            if not self.closed:
                self.restart_at = Position.trim_horizon()
            return
        code = error_code(exc)
        if not (is_retryable(exc) or code == "ResourceInUseException" or not code):
            raise exc
        self._back_off(exc, "enhanced fan-out: subscribing again")
