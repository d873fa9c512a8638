"""State an executor's Python worker keeps across batches: call pacing per shard, leftover iterators.

Spark reuses executor Python workers from batch to batch, so module-level objects live as long as the
worker. Two such objects serve every read of a shard in this process:

- `PACER` paces the GetRecords calls on each shard to the service's read quota: call starts at least
  200 ms apart (5 calls/s), and after a response of B bytes the next call waits until B /
  shardReadBytesPerSecond has passed (a 10 MB response is followed by a pause, as Kinesis would
  otherwise refuse the calls).
- `ITERATOR_PACER` spaces this process's GetShardIterator calls on each shard 400 ms apart: half the
  shard's 5 calls/s, since another process may be asking too (a speculative copy of the task, a retried
  attempt on another executor). A read that loses its iterator again and again (expired, trimmed
  position) would otherwise ask as fast as its GetRecords pace allows and add the calls of its open.
- `ITERATORS` keeps the shard iterator a read ended with, so the next batch of that shard starts
  without a GetShardIterator call.

Enhanced fan-out keeps its state (subscription spacing, subscriptions left open for the next batch)
in the executor's fan-out agent instead (`source.agent`), because a worker is not where a shard's
next task runs.
"""

from __future__ import annotations

import threading
import time

from ...model import Position

MIN_CALL_SPACING_S = 0.2  # 5 GetRecords calls per second per shard
ITERATOR_SPACING_S = 0.4  # GetShardIterator: 5 calls per second per shard, shared with other processes


class Pacer:
    """Per-process pacing of one kind of call on each shard (see the module docstring)."""

    def __init__(self, spacing_s: float = MIN_CALL_SPACING_S) -> None:
        self.spacing_s = spacing_s
        self._lock = threading.Lock()
        self._next: dict[tuple[str, str], float] = {}

    def clear(self) -> None:
        """Forget every shard's turn (a test that starts from a quiet process)."""
        with self._lock:
            self._next.clear()

    def before_call(self, key: tuple[str, str]) -> float:
        """Wait for the shard's turn; returns the call's start time."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next.get(key, 0.0))
            self._next[key] = start + self.spacing_s
        if start > now:
            time.sleep(start - now)
        return start

    def after_response(self, key: tuple[str, str], started: float, n_bytes: int, bytes_per_s: int) -> None:
        if bytes_per_s > 0 and n_bytes > 0:
            with self._lock:
                self._next[key] = max(self._next.get(key, 0.0), started + n_bytes / bytes_per_s)


PACER = Pacer()
ITERATOR_PACER = Pacer(ITERATOR_SPACING_S)


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
