"""Test-only: the quotas and rules of Kinesis that the local servers do not enforce, for the fault
proxy's strict mode.

kinesis-local and kinesalite answer any number of calls, hand out iterators that never expire and
pages of any size. Kinesis does not: a connector that is correct against them can still be throttled
for good, or lose its iterators, in production. In strict mode the proxy keeps the service's books
and answers a call that breaks a rule as Kinesis answers it, and counts it as a violation (the
connector's: nothing else calls through the proxy during a test):

- GetRecords: 5 calls per second per shard, and 2 MiB per second per shard read (counted over a
  5-second window: a 10 MiB page is allowed, then the shard's reads are throttled until the window
  passes), at most 10,000 records asked for per call;
- GetShardIterator: 5 calls per second per shard; an iterator expires 5 minutes after it was handed
  out (a `NextShardIterator` too); the clock can be scaled so that tests see expiry in seconds;
- ListShards: 100 calls per second per stream; DescribeStreamSummary: 20 per second per account;
- SubscribeToShard: at most one call per second per consumer and shard, and none within 5 seconds of
  the last successful one.

Never used outside tests and benchmarks on loopback.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable

WINDOW_S = 1.0
READ_BYTES_PER_S = 2 * 1024 * 1024
BYTES_WINDOW_S = 5.0
MAX_LIMIT = 10_000
ITERATOR_TTL_S = 300.0
RATES = {  # operation -> (calls per WINDOW_S, what it is counted per)
    "GetRecords": (5, "shard"),
    "GetShardIterator": (5, "shard"),
    "ListShards": (100, "stream"),
    "DescribeStreamSummary": (20, "account"),
}
THROTTLED = "ProvisionedThroughputExceededException"
LIMITED = "LimitExceededException"


class ServiceRules:
    """The books of one proxy. `refusal` is asked before a call is forwarded; `served` is told what
    a forwarded read answered. A refusal is (HTTP status, error type, message)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, time_scale: float = 1.0) -> None:
        """`time_scale`: how many seconds of an iterator's life pass per second of `clock` (60: an
        iterator expires after 5 s); the rates are kept in real time."""
        self.clock, self.time_scale = clock, time_scale
        self.lock = threading.Lock()
        self.calls: dict[tuple[str, str], deque[float]] = {}
        self.read_bytes: dict[str, deque[tuple[float, int]]] = {}
        self.iterators: dict[str, float] = {}  # iterator -> when it was handed out
        self.subscribed: dict[tuple[str, str], tuple[float, float]] = {}  # -> (last call, last success)
        self.violations: Counter[str] = Counter()
        # SubscribeToShard rules broken only because another process (another executor's agent, a
        # speculative attempt, a killed one's replacement) called or succeeded just before, and a
        # shard's read rates broken only by two processes' calls together: Kinesis refuses or
        # throttles, and nothing in either process can know of the other; the reader must take the
        # refusal and try again. Refused as Kinesis does, counted apart from `violations`.
        self.collisions: Counter[str] = Counter()
        # Each broken rate or SubscribeToShard rule with who made the call and the calls it collided with
        # (callers as their User-Agent names them: role and pid), so a run's log says whose calls they were.
        self.details: list[str] = []
        self._callers: dict[tuple[str, str], deque[str]] = {}  # beside `calls`, the same order
        self._subscribe_callers: dict[
            tuple[str, str], tuple[str, str]
        ] = {}  # -> (last call's, last success's)

    def _now(self) -> float:
        return self.clock()

    def refusal(
        self, operation: str, scope: str, request: dict, caller: str = ""
    ) -> tuple[int, str, str] | None:
        """Whether Kinesis would refuse this call. `scope`: the shard (GetRecords: its iterator's shard,
        '' when unknown), the stream (ListShards) or '' (per account); `caller`: who calls (role and
        pid, from the User-Agent), named with the window's other callers when a rate is broken."""
        now = self._now()
        with self.lock:
            if operation == "GetRecords":
                if int(request.get("Limit", MAX_LIMIT)) > MAX_LIMIT:
                    return self._broken("GetRecords Limit over 10000", 400, "ValidationException")
                issued = self.iterators.get(str(request.get("ShardIterator", "")))
                if issued is not None and (now - issued) * self.time_scale > ITERATOR_TTL_S:
                    return self._broken("expired iterator used", 400, "ExpiredIteratorException")
                if self._bytes(scope, now) > READ_BYTES_PER_S * BYTES_WINDOW_S:
                    return self._broken("GetRecords over 2 MiB/s per shard", 400, THROTTLED)
            if operation in RATES:
                limit, _per = RATES[operation]
                calls = self.calls.setdefault((operation, scope), deque())
                callers = self._callers.setdefault((operation, scope), deque())
                while calls and now - calls[0] >= WINDOW_S:
                    calls.popleft()
                    callers.popleft()
                if len(calls) >= limit:
                    per_shard = operation in ("GetRecords", "GetShardIterator")
                    kind = THROTTLED if per_shard else LIMITED
                    rule = f"{operation} over {limit}/s per {_per}"
                    # A shard's reads by two processes at once (a speculative attempt beside the first,
                    # a task moved off a killed executor) where the caller's own calls keep the rate: a
                    # collision Kinesis throttles and both readers back off from (see `collisions`).
                    # (the planner's looks count as the caller's own: one design paces them together)
                    own = sum(c == caller or not c.startswith("reader") for c in callers)
                    other = per_shard and caller.startswith("reader") and own < limit
                    self.details.append(
                        f"{rule}{' (other processes in the second: a collision)' if other else ''}: "
                        f"{scope or '(account)'} by {caller or '?'}; the second's calls by "
                        f"{', '.join(c or '?' for c in callers)}"
                    )
                    return self._refused(rule, kind, other)
                calls.append(now)
                callers.append(caller)
        return None

    def subscribe_refusal(self, consumer: str, shard: str, caller: str = "") -> tuple[int, str, str] | None:
        """A SubscribeToShard call, before it is forwarded. Only the call is booked here: whether it
        succeeds is known later (`subscribe_succeeded`), since the proxy may still refuse it with an
        injected fault, or the server itself may; a refused call starts no 5-second wait."""
        now = self._now()
        with self.lock:
            last_call, last_ok = self.subscribed.get((consumer, shard), (float("-inf"), float("-inf")))
            call_by, ok_by = self._subscribe_callers.get((consumer, shard), ("", ""))
            self.subscribed[(consumer, shard)] = (now, last_ok)
            self._subscribe_callers[(consumer, shard)] = (caller, ok_by)
            rule, kind, by = "", "", ""
            if now - last_call < 1.0:
                rule, kind, by = "SubscribeToShard more than once a second", LIMITED, call_by
            elif now - last_ok < 5.0:
                rule, kind, by = "SubscribeToShard within 5 s of a success", "ResourceInUseException", ok_by
            if rule:
                other = bool(caller and by and caller != by)
                self.details.append(
                    f"{rule}{' (another process before it: a collision)' if other else ''}: {shard} by "
                    f"{caller or '?'}; last call {now - last_call:.2f} s before by {call_by or '?'}, last "
                    f"success {now - last_ok:.2f} s before by {ok_by or '?'}"
                )
                return self._refused(rule, kind, other)
        return None

    def subscribe_succeeded(self, consumer: str, shard: str) -> None:
        """The last call on (consumer, shard) opened a subscription: the 5 seconds count from that call."""
        with self.lock:
            last_call, _last_ok = self.subscribed.get((consumer, shard), (self._now(), float("-inf")))
            self.subscribed[(consumer, shard)] = (last_call, last_call)
            call_by, _ok_by = self._subscribe_callers.get((consumer, shard), ("", ""))
            self._subscribe_callers[(consumer, shard)] = (call_by, call_by)

    def served(self, operation: str, shard: str, answer: dict, size: int) -> None:
        """A forwarded read's answer: its iterators start their lives, its bytes count."""
        now = self._now()
        with self.lock:
            for key in ("ShardIterator", "NextShardIterator"):
                if answer.get(key):
                    if len(self.iterators) > 200_000:
                        self.iterators.clear()
                    self.iterators[answer[key]] = now
            if operation == "GetRecords" and shard:
                self.read_bytes.setdefault(shard, deque()).append((now, size))

    def _bytes(self, shard: str, now: float) -> int:
        served = self.read_bytes.get(shard)
        if not served:
            return 0
        while served and now - served[0][0] >= BYTES_WINDOW_S:
            served.popleft()
        return sum(size for _at, size in served)

    def _refused(self, rule: str, kind: str, collision: bool) -> tuple[int, str, str]:
        """Refused as Kinesis would: counted as a collision between processes, or as a broken rule."""
        if collision:
            self.collisions[rule] += 1
            return 400, kind, f"{rule} (strict test mode)"
        return self._broken(rule, 400, kind)

    def _broken(self, rule: str, status: int, kind: str) -> tuple[int, str, str]:
        self.violations[rule] += 1
        return status, kind, f"{rule} (strict test mode)"
