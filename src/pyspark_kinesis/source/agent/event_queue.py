"""One subscription's pump thread and the events it reads ahead, apart from who holds the subscription
(`hub.HeldSubscription`): the queue is the only state two threads share, so its lock and its rules
(how far it reads ahead, when an unread queue gives up) live here and nowhere else.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

from ...aws.subscribe import Subscription

QUEUE_EVENTS = 8  # events read ahead per subscription before TCP holds the service back
MAX_QUEUE_WAITS = 7_200  # x 0.5 s: a subscription nobody takes events from for an hour is closed

Message = tuple[str, Any]


class EventQueue:
    """The messages a subscription's pump thread has taken from it: ("event", response), then
    ("end", None) or ("error", exception)."""

    def __init__(self, subscription: Subscription, name: str) -> None:
        self.subscription = subscription
        self.closing = False
        self._items: collections.deque[Message] = collections.deque()
        self._ready = threading.Condition()
        threading.Thread(target=self._pump, name=name, daemon=True).start()

    def _pump(self) -> None:
        try:
            for response in self.subscription.events():
                response["ReceivedAt"] = time.time()  # see `executor.modes.fanout.FanOutPages._page`
                if not self._put(("event", response)):
                    return
            self._put(("end", None))
        except Exception as exc:  # the stream's failure is the reader's to handle: hand it over
            if not self.closing:  # (once closed here, the failure is the closing itself)
                self._put(("error", exc))

    def _put(self, item: Message) -> bool:
        with self._ready:
            for _wait in range(MAX_QUEUE_WAITS):
                if len(self._items) < QUEUE_EVENTS or item[0] != "event":
                    self._items.append(item)
                    self._ready.notify_all()
                    return True
                if self.closing:
                    return False
                self._ready.wait(0.5)
            self._items.append(("error", TimeoutError("no read took this subscription's events for an hour")))
            self._ready.notify_all()
        self.close()
        return False

    def take(self, wait_s: float, peek: bool = False) -> Message | None:
        """The next message (left in place with `peek`), or None if none came within `wait_s`."""
        with self._ready:
            if not self._items:
                self._ready.wait_for(lambda: bool(self._items), timeout=max(0.0, wait_s))
            if not self._items:
                return None
            item = self._items[0] if peek else self._items.popleft()
            self._ready.notify_all()
            return item

    def push_front(self, events: Iterable[dict[str, Any]], drop_front_event: bool = False) -> None:
        """Put `events` back in front of the queue, in their order, in one step (a reader never sees
        half of them); `drop_front_event` first takes away an event at the front (a rest put back
        before, which `events` replace)."""
        with self._ready:
            if drop_front_event and self._items and self._items[0][0] == "event":
                self._items.popleft()
            for event in reversed(list(events)):
                self._items.appendleft(("event", event))
            self._ready.notify_all()

    @property
    def pending(self) -> int:
        with self._ready:
            return sum(1 for kind, _value in self._items if kind == "event")

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(Exception):  # closing a dead connection may fail in any way
            self.subscription.close()
        with self._ready:
            self._ready.notify_all()
