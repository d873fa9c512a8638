"""The fan-out agent: one process per executor that holds its enhanced fan-out subscriptions.

Why a process of its own: Kinesis refuses a new subscription on a shard within 5 s of the last
successful one, so a shard is read with low latency only while one subscription stays open from
batch to batch. Spark runs each task in whichever of the executor's Python workers is idle, so a
subscription kept inside a worker is mostly not where the shard's next task runs. The agent is where
subscriptions live instead: every Python worker of the executor reaches it over a local socket
(`fanout_link`), and the shard's next task, in whichever worker, continues the subscription the
last read left, from exactly the position that batch ended.

What it does, and what it leaves to the reader:
- It holds subscriptions and the events already pushed; it never decides what a batch reads. The
  reading worker applies the batch's limits, aggregates, replay bound and caught-up rule
  (`fanout.FanOutRead`) and says where it stopped. A subscription is kept only when its read took
  whole events, and handed again only to a read that starts exactly there; anything else gets a new
  subscription from the read's own position.
- SubscribeToShard calls on one consumer and shard are spaced for the whole executor: one per second,
  none within 5 s of the last successful one, counted from the answer.
- A subscription's events wait in a small queue, then in TCP (the service is held back; nothing is
  lost). A kept subscription not taken again within `MAX_IDLE_S` is closed.
- A batch ends when its slowest read does, so reads of one batch settle together: a read waiting for
  a push ends as soon as another read of the same batch on this executor has taken records (the batch
  then carries them at once instead of waiting out the quiet shards).
- It ends when its owner (the executor's Python daemon) is gone, or after `IDLE_EXIT_S` without
  reads or kept subscriptions.

Run as `python -m pyspark_kinesis.source.fanout_agent SOCKET OWNER_PID`; `fanout_link` does that.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..aws.kinesis import KinesisProxy
from ..aws.subscribe import Subscription
from ..config.stream_specs import StreamSpec
from ..model import Position
from .fanout_link import encode_error, receive, send

log = logging.getLogger("pyspark_kinesis.fanout_agent")

SUBSCRIBE_SPACING_S = 1.0  # SubscribeToShard: one call per second per consumer and shard
RESUBSCRIBE_AFTER_S = 5.0  # ...and ResourceInUseException within 5 s of the last successful one
FIRST_MESSAGE_WAIT_S = (
    5.0  # how long a new subscription's first message is waited for (a refusal may come as one)
)
QUEUE_EVENTS = 8  # events read ahead per subscription before TCP holds the service back
MAX_IDLE_S = 30.0  # a kept subscription not taken again by then is closed
IDLE_EXIT_S = 60.0  # the agent ends after this long without reads or kept subscriptions
MAX_QUEUE_WAITS = 7_200  # x 0.5 s: a subscription nobody takes events from for an hour is closed
MAX_MESSAGES = 10_000_000  # hard bound on one connection's messages
SETTLE_CHECK_S = 0.05  # how often a waiting read looks whether its batch has records from another read
BATCH_MARKS_S = 600.0  # how long a batch's "has records" mark is remembered

Key = tuple[str, str]  # (consumer ARN, shard id)


class Spacing:
    """When SubscribeToShard was last called and last succeeded, per consumer and shard, so that calls
    wait for the service's spacing instead of being refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._called: dict[Key, float] = {}
        self._succeeded: dict[Key, float] = {}

    def before_subscribe(self, key: Key) -> None:
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

    def answered(self, key: Key, ok: bool) -> None:
        """Spacing counts from the answer: the service saw the call before it answered, so this keeps
        the calls apart as the service sees them."""
        with self._lock:
            now = time.monotonic()
            self._called[key] = max(self._called.get(key, now), now)
            if ok:
                self._succeeded[key] = now


class Held:
    """One open subscription and the messages its pump thread has taken from it: ("event", response),
    then ("end", None) or ("error", exception)."""

    def __init__(self, key: Key, subscription: Subscription) -> None:
        self.key, self.subscription = key, subscription
        self.position: Position | None = None  # where a kept subscription continues from
        self.batch = ""  # the batch of the read that holds it (see `Hub.next_for`)
        self.behind = -1  # MillisBehindLatest of the last event handed out
        self.since = time.monotonic()
        self.closing = False
        self._items: collections.deque[tuple[str, Any]] = collections.deque()
        self._ready = threading.Condition()
        threading.Thread(target=self._pump, name=f"efo-{key[1]}", daemon=True).start()

    def _pump(self) -> None:
        try:
            for response in self.subscription.events():
                response["ReceivedAt"] = time.time()  # see `fanout.FanOutRead._absorb`
                if not self._put(("event", response)):
                    return
            self._put(("end", None))
        except Exception as exc:  # the stream's failure is the reader's to handle: hand it over
            if not self.closing:  # (once closed here, the failure is the closing itself)
                self._put(("error", exc))

    def _put(self, item: tuple[str, Any]) -> bool:
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

    def take(self, wait_s: float, peek: bool = False) -> tuple[str, Any] | None:
        """The next message, or None if none came within `wait_s`."""
        with self._ready:
            if not self._items:
                self._ready.wait_for(lambda: bool(self._items), timeout=max(0.0, wait_s))
            if not self._items:
                return None
            item = self._items[0] if peek else self._items.popleft()
            if not peek and item[0] == "event":
                self.behind = int(item[1].get("MillisBehindLatest", -1))
            self._ready.notify_all()
            return item

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


class Hub:
    """The agent's subscriptions: opened (or continued) for reads, kept between them, reaped."""

    def __init__(self, client_for: Callable[[StreamSpec], Any]) -> None:
        self.client_for = client_for
        self.spacing = Spacing()
        self._lock = threading.Lock()
        self._kept: dict[Key, Held] = {}
        self._with_records: dict[str, float] = {}  # batches a read has taken records for, since when
        self._reads = 0
        self.idle_since = time.monotonic()

    def open(
        self, spec: StreamSpec, consumer: str, shard: str, position: Position, reuse: bool, batch: str = ""
    ) -> tuple[Held, bool]:
        """The subscription a read continues (reuse, same position) or a new one from `position`;
        True for a new one. A refusal raises as botocore raised it."""
        key = (consumer, shard)
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is not None:
            if reuse and kept.position == position:
                kept.batch = batch
                return kept, False
            kept.close()
        self.spacing.before_subscribe(key)
        try:
            subscription = Subscription(self.client_for(spec), consumer, shard, position)
        except BaseException:
            self.spacing.answered(key, ok=False)
            raise
        held = Held(key, subscription)
        held.batch = batch
        first = held.take(FIRST_MESSAGE_WAIT_S, peek=True)
        if first is not None and first[0] == "error":  # refused inside the stream (kinesis-local does this)
            held.close()
            self.spacing.answered(key, ok=False)
            raise first[1]
        self.spacing.answered(key, ok=True)
        return held, True

    def next_for(self, held: Held, wait_s: float, settle: bool) -> tuple[str, Any]:
        """The read's next message within `wait_s`: ("event", response), ("end"/"error", ...),
        ("idle", behind) when none came, or with `settle` ("settle", behind) as soon as another read
        of the same batch has taken records."""
        deadline = time.monotonic() + max(0.0, wait_s)
        for _slice in range(int(max(0.0, wait_s) / SETTLE_CHECK_S) + 2):
            remaining = deadline - time.monotonic()
            item = held.take(min(SETTLE_CHECK_S, remaining) if settle else remaining)
            if item is not None:
                if item[0] == "event" and len(item[1]["Records"]) and held.batch:
                    self._mark(held.batch)
                return item
            if settle and held.batch in self._with_records:
                return ("settle", held.behind)
            if time.monotonic() >= deadline:
                break
        return ("idle", held.behind)

    def _mark(self, batch: str) -> None:
        with self._lock:
            now = time.monotonic()
            if batch not in self._with_records:
                old = [b for b, since in self._with_records.items() if now - since > BATCH_MARKS_S]
                for b in old:
                    del self._with_records[b]
                self._with_records[batch] = now

    def keep(self, held: Held, position: Position) -> None:
        held.position, held.since = position, time.monotonic()
        with self._lock:
            old = self._kept.pop(held.key, None)
            self._kept[held.key] = held
        if old is not None and old is not held:
            old.close()

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [k for k, held in self._kept.items() if now - held.since > MAX_IDLE_S]
            closing = [self._kept.pop(k) for k in stale]
            if self._reads or self._kept:
                self.idle_since = now
        for held in closing:
            held.close()

    def enter(self) -> None:
        with self._lock:
            self._reads += 1

    def leave(self) -> None:
        with self._lock:
            self._reads -= 1
            self.idle_since = time.monotonic()

    def close_all(self) -> None:
        with self._lock:
            closing, self._kept = list(self._kept.values()), {}
        for held in closing:
            held.close()


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this user (Linux tells; elsewhere the private directory is the guard)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return uid == os.getuid()


class _Read(socketserver.BaseRequestHandler):
    """One read's connection: open, next..., keep or close (see `fanout_link`)."""

    def handle(self) -> None:
        hub: Hub = self.server.hub  # type: ignore[attr-defined]
        conn: socket.socket = self.request
        if not _same_user(conn):
            log.warning("refused a connection from another user")
            return
        held: Held | None = None
        hub.enter()
        try:
            for _message in range(MAX_MESSAGES):
                message = receive(conn)
                if message is None:
                    break
                held, reply = self._answer(hub, held, message)
                send(conn, (*reply, held.pending if held is not None else 0))
        except (OSError, EOFError):
            pass  # the read's worker went away: its subscription is closed below
        finally:
            if held is not None:
                held.close()
            hub.leave()

    @staticmethod
    def _answer(hub: Hub, held: Held | None, message: tuple) -> tuple[Held | None, tuple[str, Any]]:
        op = message[0]
        if op == "open":
            if held is not None:
                held.close()
            try:
                held, fresh = hub.open(*message[1:])
            except Exception as exc:
                return None, ("error", encode_error(exc))
            return held, ("ok", fresh)
        if held is None:
            return None, ("error", encode_error(RuntimeError(f"'{op}' without an open subscription")))
        if op == "next":
            kind, value = hub.next_for(held, float(message[1]), bool(message[2]))
            if kind in ("event", "idle", "settle"):
                return held, (kind, value)
            held.close()
            return None, ("end", None) if kind == "end" else ("error", encode_error(value))
        if op == "keep":
            hub.keep(held, message[1])
            return None, ("ok", None)
        held.close()
        return None, ("ok", None)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, hub: Hub) -> None:
        self.hub = hub
        super().__init__(path, _Read)


def _owner_alive(owner: int) -> bool:
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(path: str, owner: int, client_for: Callable[[StreamSpec], Any] | None = None) -> None:
    """Serve reads on the Unix socket `path` until `owner` is gone or nothing has used the agent for
    `IDLE_EXIT_S`."""
    hub = Hub(client_for or (lambda spec: KinesisProxy(spec, agent="reader", max_attempts=1).client))
    old_mask = os.umask(0o177)  # the socket is this user's only
    try:
        server = _Server(path, hub)
    except OSError as exc:  # another agent took the path first: it serves
        log.info("not serving %s: %s", path, exc)
        return
    finally:
        os.umask(old_mask)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            hub.reap()
            if not _owner_alive(owner) or time.monotonic() - hub.idle_since > IDLE_EXIT_S:
                server.shutdown()
                return

    threading.Thread(target=watch, name="efo-agent-watch", daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        hub.close_all()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if not _owner_alive(owner):  # no worker of this owner will come back: leave nothing behind
            _remove_leftovers(path)


def _remove_leftovers(path: str) -> None:
    base = os.path.splitext(path)[0]
    with contextlib.suppress(FileNotFoundError):
        os.unlink(base + ".lock")
    with contextlib.suppress(FileNotFoundError):
        if os.path.getsize(base + ".log") == 0:
            os.unlink(base + ".log")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(message)s")
    path, owner = argv[0], int(argv[1])
    serve(path, owner)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
