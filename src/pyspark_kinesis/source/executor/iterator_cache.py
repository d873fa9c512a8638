"""The shard iterators a worker's reads ended with, kept for the same shard's next batch.

Spark reuses executor Python workers from batch to batch, so `ITERATORS` lives as long as the worker.
Enhanced fan-out keeps its continuations (subscriptions left open) in the executor's fan-out agent
instead (`source.agent`), because a worker is not where a shard's next task runs.
"""

from __future__ import annotations

import threading
import time

from ...model import Position


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
