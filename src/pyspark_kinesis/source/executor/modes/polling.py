"""Polling: GetRecords pages, one paced call at a time; the continuation is the shard iterator.

- Calls on one shard respect the service's read quota, per process (`pacing.PACER`): 5 calls per
  second, and after a response of B bytes a pause of B / shardReadBytesPerSecond; GetShardIterator
  calls are spaced too (`pacing.ITERATOR_PACER`).
- The iterator a read ends with is kept in the Python worker (`iterator_cache.ITERATORS`) for the
  shard's next batch: one GetShardIterator fewer per shard per batch (it has its own 5 calls/s quota).
"""

from __future__ import annotations

import time

from ....aws.error_kinds import (
    CALL_ERRORS,
    is_expired_iterator,
    is_foreign_sequence_number,
    is_future_timestamp,
    is_not_found,
    is_retryable,
)
from ....aws.kinesis import describe_failure
from ....config.stream_specs import StreamSpec
from ....model import Position
from ..iterator_cache import ITERATORS
from ..pacing import ITERATOR_PACER, PACER
from ..pages import Fault, FaultKind, Page, ReadContext


def classify(exc: Exception, spec: StreamSpec) -> Fault:
    """What a failed Kinesis call means for the read; anything else is the user's to fix, raised as the
    connector's error (aws/ says what to check: credentials, permissions...)."""
    if is_expired_iterator(exc):
        return Fault(FaultKind.REOPEN, exc)
    if is_future_timestamp(exc):
        return Fault(FaultKind.AHEAD, exc)
    if is_not_found(exc) or is_foreign_sequence_number(exc):
        return Fault(FaultKind.GONE, exc)
    if is_retryable(exc):
        return Fault(FaultKind.RETRY, exc)
    raise describe_failure(exc, spec) from exc


class PollingPages:
    """GetRecords pages of one shard read."""

    keeps_partial = False  # an iterator continues after the whole page only

    def __init__(self, context: ReadContext) -> None:
        self.context, self.proxy, self.shard = context, context.proxy, context.shard
        self.shard_ref = (context.proxy.spec.resolved_arn, context.shard)
        self.iterator: str | None = None
        self.obtained = time.monotonic()

    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        if reuse:
            kept = ITERATORS.take(self.shard_ref[0], self.shard, position)
            if kept is not None:
                self.iterator, self.obtained = kept, time.monotonic()
                return False
        ITERATOR_PACER.before_call(self.shard_ref)
        try:
            self.iterator = self.proxy.shard_iterator(self.shard, position, verify=verify)
        except CALL_ERRORS as exc:
            raise classify(exc, self.proxy.spec) from None
        self.obtained = time.monotonic()
        return True

    def open_oldest(self) -> bool:
        ITERATOR_PACER.before_call(self.shard_ref)
        try:
            self.iterator = self.proxy.shard_iterator(self.shard, Position.trim_horizon())
        except CALL_ERRORS as exc:
            if is_not_found(exc):
                return False
            raise classify(exc, self.proxy.spec) from None
        self.obtained = time.monotonic()
        return True

    def next_page(self, limit: int) -> Page:
        assert self.iterator is not None, "next_page before open"
        started = PACER.before_call(self.shard_ref)
        try:
            response = self.proxy.get_records(self.iterator, limit)
        except CALL_ERRORS as exc:
            fault = classify(exc, self.proxy.spec)
            if fault.kind is FaultKind.REOPEN:
                self.iterator = None
            raise fault from None
        records = response["Records"]
        PACER.after_response(
            self.shard_ref, started, records.payload_bytes, self.context.limits.bytes_per_second
        )
        self.iterator, self.obtained = response.get("NextShardIterator"), time.monotonic()
        ended = self.iterator is None
        return Page(
            records,
            behind_ms=int(response.get("MillisBehindLatest", -1)),
            full=len(records) >= limit,
            ended=ended,
            children=tuple(c["ShardId"] for c in response.get("ChildShards", [])) if ended else (),
        )

    def keep(self, position: Position) -> str:
        if self.iterator is not None:
            ITERATORS.put(self.shard_ref[0], self.shard, position, self.iterator, self.obtained)
        return ""  # an iterator is kept in this worker only (another executor asks for its own)

    def close(self) -> None:
        """Nothing to release: an iterator is a token."""
