"""State an executor's Python worker keeps across batches: call pacing per shard, leftover iterators.

Spark reuses executor Python workers from batch to batch, so module-level objects live as long as the
worker. Two such objects serve every read of a shard in this process:

- `PACER` paces the calls on each shard to the service's read quota: call starts at least 200 ms
  apart (5 calls/s), and after a response of B bytes the next call waits until B /
  shardReadBytesPerSecond has passed (a 10 MB response is followed by a pause, as Kinesis would
  otherwise refuse the calls).
- `ITERATORS` keeps the shard iterator a read ended with, so the next batch of that shard starts
  without a GetShardIterator call.
- `SUBSCRIPTIONS` does both for enhanced fan-out: SubscribeToShard spacing per consumer and shard, and
  the subscriptions reads left open for the next batch.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from ..model import Position

MIN_CALL_SPACING_S = 0.2  # 5 GetRecords calls per second per shard


class Pacer:
    """Per-process pacing of the calls on each shard (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[tuple[str, str], float] = {}

    def before_call(self, key: tuple[str, str]) -> float:
        """Wait for the shard's turn; returns the call's start time."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next.get(key, 0.0))
            self._next[key] = start + MIN_CALL_SPACING_S
        if start > now:
            time.sleep(start - now)
        return start

    def after_response(self, key: tuple[str, str], started: float, n_bytes: int, bytes_per_s: int) -> None:
        if bytes_per_s > 0 and n_bytes > 0:
            with self._lock:
                self._next[key] = max(self._next.get(key, 0.0), started + n_bytes / bytes_per_s)


PACER = Pacer()


class IteratorCache:
    """Shard iterators left over by the last read of a shard in this process, by where they point.

    Kinesis iterators are plain tokens valid for 5 minutes, and `NextShardIterator` points exactly
    after the response it came with. When a read took a whole response, that iterator continues from
    the read's end position, so the next batch of the same shard in this Python worker (workers are
    reused) can start there without a GetShardIterator call: one call fewer per shard per batch, and
    GetShardIterator has its own 5 calls/s quota. A stale or foreign iterator only costs the
    ExpiredIteratorException path, which obtains a fresh one.
    """

    MAX_AGE_S = 240.0
    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, Position], tuple[str, float]] = {}

    def clear(self) -> None:
        """Forget every iterator (a test that must obtain fresh ones)."""
        with self._lock:
            self._entries.clear()

    def take(self, stream: str, shard: str, position: Position) -> str | None:
        with self._lock:
            found = self._entries.pop((stream, shard, position), None)
        if found is None or time.monotonic() - found[1] > self.MAX_AGE_S:
            return None
        return found[0]

    def put(self, stream: str, shard: str, position: Position, iterator: str, obtained: float) -> None:
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[(stream, shard, position)] = (iterator, obtained)


ITERATORS = IteratorCache()


# -- enhanced fan-out --------------------------------------------------------------------------------
SUBSCRIBE_SPACING_S = 1.0  # SubscribeToShard: one call per second per consumer and shard
RESUBSCRIBE_AFTER_S = 5.0  # ...and ResourceInUseException within 5 s of the last successful one


class Subscriptions:
    """Per process, per consumer and shard: when SubscribeToShard was last called and last succeeded
    (calls wait for the service's spacing instead of being refused), and the subscriptions a read left
    open between two events, by the position they continue from.

    Why keep them: a new subscription on a shard is refused for 5 s after the last one, so a query whose
    batches follow each other faster than that would wait on every batch. A read that ends between
    events (at the tip, or out of time) leaves its subscription here; the next batch of that shard in
    this Python worker continues it from exactly where the batch ended. Events pushed meanwhile wait in
    the connection (TCP holds them back; nothing is lost). A subscription not taken within
    `MAX_IDLE_S` (the shard's next task ran in another worker) is closed by a reaper thread, so that
    other worker's subscription is refused for a bounded time only.
    """

    MAX_IDLE_S = 3.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._called: dict[tuple[str, str], float] = {}
        self._succeeded: dict[tuple[str, str], float] = {}
        self._open: dict[tuple[str, str], tuple[Position, Any, float]] = {}
        self._reaper: threading.Thread | None = None

    def before_subscribe(self, key: tuple[str, str]) -> None:
        """Wait until a SubscribeToShard on this consumer and shard may be made."""
        with self._lock:
            now = time.monotonic()
            turn = max(
                now,
                self._called.get(key, -1e9) + SUBSCRIBE_SPACING_S,
                self._succeeded.get(key, -1e9) + RESUBSCRIBE_AFTER_S,
            )
            self._called[key] = turn
        if turn > now:
            time.sleep(turn - now)

    def answered(self, key: tuple[str, str], ok: bool) -> None:
        """The call was answered: the spacing counts from here (the service saw the call before it
        answered, so spacing from the answer keeps the calls apart as the service sees them)."""
        with self._lock:
            now = time.monotonic()
            self._called[key] = max(self._called.get(key, now), now)
            if ok:
                self._succeeded[key] = now

    def take(self, key: tuple[str, str], position: Position) -> Any | None:
        """The open subscription that continues from `position`, if this process holds one."""
        with self._lock:
            found = self._open.get(key)
            if found is None or found[0] != position:
                return None
            del self._open[key]
        return found[1]

    def put(self, key: tuple[str, str], position: Position, events: Any) -> None:
        with self._lock:
            old = self._open.pop(key, None)
            self._open[key] = (position, events, time.monotonic())
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="efo-reaper", daemon=True)
                self._reaper.start()
        if old is not None:
            old[1].close()

    def close_all(self) -> None:
        """Close every open subscription (tests; a worker about to end)."""
        with self._lock:
            entries, self._open = list(self._open.values()), {}
        for _position, events, _since in entries:
            events.close()

    def _reap(self) -> None:
        while True:
            time.sleep(self.MAX_IDLE_S / 3)
            now = time.monotonic()
            with self._lock:
                stale = [k for k, (_p, _e, since) in self._open.items() if now - since > self.MAX_IDLE_S]
                closing = [self._open.pop(k)[1] for k in stale]
            for events in closing:
                with contextlib.suppress(Exception):  # closing a dead connection may fail in any way
                    events.close()


SUBSCRIPTIONS = Subscriptions()
