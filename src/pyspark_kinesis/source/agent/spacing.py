"""The service's spacing of SubscribeToShard, kept by the agent for its whole executor so that calls
wait for their turn instead of being refused (see `Spacing`)."""

from __future__ import annotations

import threading
import time

SUBSCRIBE_SPACING_S = 1.0  # SubscribeToShard: one call per second per consumer and shard
RESUBSCRIBE_AFTER_S = 5.0  # ...and ResourceInUseException within 5 s of the last successful one

ConsumerShard = tuple[str, str]  # (consumer ARN, shard id): what the service spaces SubscribeToShard calls by


class Spacing:
    """When SubscribeToShard was last called and last succeeded, per consumer and shard, so that calls
    wait for the service's spacing instead of being refused. What another executor's agent did is known
    only through the read (`SubscriptionRequest.subscribed_ms`, from the shard's last batch-end record): a read whose
    holder was lost still waits out the 5 s after that holder's subscription."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._called: dict[ConsumerShard, float] = {}
        self._succeeded: dict[ConsumerShard, float] = {}

    def before_subscribe(self, key: ConsumerShard, elsewhere_ms: int = 0) -> None:
        """Wait for the key's turn; `elsewhere_ms`: the wall-clock time of a successful subscription
        another agent made (another executor's clock: never waited on for more than the rule's 5 s)."""
        with self._lock:
            now = time.monotonic()
            elsewhere = 0.0
            if elsewhere_ms > 0:
                elsewhere = elsewhere_ms / 1000.0 + RESUBSCRIBE_AFTER_S - time.time()
                elsewhere = min(max(0.0, elsewhere), RESUBSCRIBE_AFTER_S)
            turn = max(
                now + elsewhere,
                self._called.get(key, -1e9) + SUBSCRIBE_SPACING_S,
                self._succeeded.get(key, -1e9) + RESUBSCRIBE_AFTER_S,
            )
            self._called[key] = turn
        if turn > now:
            time.sleep(turn - now)

    def answered(self, key: ConsumerShard, ok: bool) -> None:
        """Spacing counts from the answer: the service saw the call before it answered, so this keeps
        the calls apart as the service sees them."""
        with self._lock:
            now = time.monotonic()
            self._called[key] = max(self._called.get(key, now), now)
            if ok:
                self._succeeded[key] = now
