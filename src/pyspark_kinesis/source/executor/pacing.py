"""Per-process pacing of the calls on each shard, so a worker's reads stay inside the shard's quotas.

Spark reuses executor Python workers from batch to batch, so these module-level pacers live as long
as the worker and serve every read of a shard in this process:

- `PACER` paces the GetRecords calls on each shard to the service's read quota: call starts at least
  200 ms apart (5 calls/s), and after a response of B bytes the next call waits until B /
  shardReadBytesPerSecond has passed (a 10 MB response is followed by a pause, as Kinesis would
  otherwise refuse the calls).
- `ITERATOR_PACER` spaces this process's GetShardIterator calls on each shard 400 ms apart: half the
  shard's 5 calls/s, since another process may be asking too (a speculative copy of the task, a retried
  attempt on another executor). A read that loses its iterator again and again (expired, trimmed
  position) would otherwise ask as fast as its GetRecords pace allows and add the calls of its open.

Enhanced fan-out spaces its subscriptions in the executor's fan-out agent instead (`agent.spacing`),
because a worker is not where a shard's next task runs.
"""

from __future__ import annotations

import threading
import time

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
