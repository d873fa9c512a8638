"""Executor-side reading with enhanced fan-out: one shard, one batch, through SubscribeToShard.

The batch logic is polling's (`fetching.ShardRead`): events arrive shaped like GetRecords responses
(`aws.subscribe`), and `_absorb` takes each one under the same limits, aggregate handling, replay
bound and caught-up rule, so every exactly-once invariant holds the same way: the batch end is
still recorded first-writer-wins by the task, and a replay reads exactly to it. What differs is how
records arrive:

- A read subscribes from the batch's start position (LATEST is pinned to a timestamp by the planner
  as in polling, so a start at LATEST never waits for new data forever) and takes events until a
  limit, the tip (an event with MillisBehindLatest 0), the shard's end (an event with ChildShards and
  no continuation), the replay bound or the batch's time budget.
- A subscription that ends (the service ends each after 5 minutes) or fails with a transient error is
  made again from where the read got to. The service's rules are kept before it is refused: one
  SubscribeToShard per second per consumer and shard, none within 5 s of the last successful one
  (`worker_state.SUBSCRIPTIONS`); a ResourceInUseException (another subscription still open, e.g.
  one a previous attempt's worker has not closed yet) is retried after a backoff.
- A shard known to be closed whose subscription reaches the tip without the event that ends it is
  checked with one GetRecords (`_confirm_end`): Kinesis sends that event, kinesis-local does not.
- A read that ends between two events leaves its subscription open for the next batch of the shard
  in this worker, which continues it from exactly this batch's end (see `worker_state.Subscriptions`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
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
from ..aws.kinesis import KinesisProxy
from ..aws.subscribe import subscribe
from ..errors import StreamAccessError
from ..model import END, INSIDE, TIMESTAMP, Position
from .columns import Columns
from .fetching import ShardRead
from .offsets import ShardEnd
from .worker_state import SUBSCRIPTIONS

_MAX_SUBSCRIPTIONS = 10_000  # hard bound on one shard's subscriptions in one batch (time stops it first)
_MAX_EVENTS = 1_000_000  # hard bound on the events one subscription is read for
_STREAM_ERRORS = (*CALL_ERRORS, StreamBroken, OSError)


class FanOutRead(ShardRead):
    """`ShardRead` whose records come from SubscribeToShard events instead of GetRecords calls."""

    def run(self) -> tuple[Columns, ShardEnd]:
        start, until = self.start, self.until
        if start.is_end or (until is not None and until == start):
            return self.cols, ShardEnd(start=start, end=start)
        consumer = self.proxy.spec.consumer_arn
        if consumer is None:
            raise RuntimeError(f"{self.proxy.spec.describe()} has no consumer: the query start registers one")
        self.consumer = consumer
        # SubscribeToShard without botocore's own retries: every attempt must go through the spacing
        # below (botocore would retry a LimitExceeded within half a second, against the service's rule).
        self.subscriber = KinesisProxy(self.proxy.spec, agent="reader", max_attempts=1).client
        self.sub_key = (consumer, self.shard)
        self.restart_at: Position | None = None  # where to subscribe after data loss was accepted
        events = SUBSCRIPTIONS.take(self.sub_key, start) if start.kind != INSIDE else None
        for _subscription in range(_MAX_SUBSCRIPTIONS):
            if self._over():
                break
            if events is None:
                events = self._subscribe()
                if events is None:
                    continue
            if self._drain(events):
                break
            events = None  # the subscription ended or broke: a new one from where the read got to
        between_events = not (self.stop or self.closed) and self.resume.kind != INSIDE
        if events is not None and until is None and between_events:
            SUBSCRIPTIONS.put(self.sub_key, self.resume, events)
        elif events is not None:
            events.close()
        return self.cols, self._end()

    def _over(self) -> bool:
        return self.stop or self.closed or (self.until is None and time.monotonic() > self.limits.deadline)

    def _subscribe(self) -> Iterator[dict[str, Any]] | None:
        """A new subscription from where the read got to (its first event already waiting), or None
        after a failure the read survives."""
        position = self.restart_at or self.resume
        self.restart_at = None
        SUBSCRIPTIONS.before_subscribe(self.sub_key)
        try:
            events = subscribe(self.subscriber, self.consumer, self.shard, position)
            first = next(events)  # the call itself runs here: its errors are caught below
        except StopIteration:
            SUBSCRIPTIONS.answered(self.sub_key, ok=True)
            return None
        except _STREAM_ERRORS as exc:
            SUBSCRIPTIONS.answered(self.sub_key, ok=False)
            self._failed(exc, position)
            return None
        SUBSCRIPTIONS.answered(self.sub_key, ok=True)
        self.skip_from = position
        self.failures = 0
        return _Closing(itertools.chain([first], events), events)

    def _drain(self, events: Iterator[dict[str, Any]]) -> bool:
        """Take events until the read is over (True) or the subscription ends or breaks (False)."""
        for _event in range(_MAX_EVENTS):
            try:
                response = next(events)
            except StopIteration:
                return False
            except _STREAM_ERRORS as exc:
                self._failed(exc, self.resume)
                return False
            if self._absorb(response) or self._over():
                return True
        return False

    def _absorb(self, response: dict) -> bool:
        over = super()._absorb(response)
        if over and not (self.closed or self.stop or len(response["Records"])) and self._to_shard_end():
            self._confirm_end()
        return over

    def _to_shard_end(self) -> bool:
        return self.limits.closed if self.until is None else self.until.kind == END

    def _confirm_end(self) -> None:
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


class _Closing:
    """The subscription's events with its first one put back in front; close() closes the
    subscription (the generator behind the chain)."""

    def __init__(self, events: Iterator[dict[str, Any]], subscription: Any) -> None:
        self.events, self.subscription = events, subscription

    def __iter__(self) -> _Closing:
        return self

    def __next__(self) -> dict[str, Any]:
        return next(self.events)

    def close(self) -> None:
        self.subscription.close()
