"""The fan-out agent: one process per executor that holds its enhanced fan-out subscriptions.

Why a process of its own: Kinesis refuses a new subscription on a shard within 5 s of the last
successful one, so a shard is read with low latency only while one subscription stays open from
batch to batch. Spark runs each task in whichever of the executor's Python workers is idle, so a
subscription kept inside a worker is mostly not where the shard's next task runs. The agent is where
subscriptions live instead: every Python worker of the executor reaches it over a local socket
(`link`), and the shard's next task, in whichever worker, continues the subscription the
last read left, from exactly the position that batch ended.

What it does, and what it leaves to the reader:
- It holds subscriptions and the events already pushed; it never decides what a batch reads. The
  reading worker applies the batch's limits, aggregates, replay bound and caught-up rule
  (`executor.shard_read` over `executor.modes.fanout`) and says where it stopped. A subscription is kept only when its read took
  whole events, and handed again only to a read that starts exactly there; anything else gets a new
  subscription from the read's own position.
- SubscribeToShard calls on one consumer and shard are spaced for the whole executor: one per
  second, none within 5 s of the last successful one, counted from the answer.
- A subscription's events wait in a small queue, then in TCP (the service is held back; nothing is
  lost). A kept subscription not taken again within `hub.MAX_IDLE_S` is closed.
- A batch ends when its slowest read does, so reads of one batch settle together: a read waiting for
  a push ends as soon as another read of the same batch on this executor has taken records (the batch
  then carries them at once instead of waiting out the quiet shards).
- Those rules live in `hub`; this module is the process around them (socket, peers, exit).
- It ends when its owner (the executor's Python daemon) is gone, or after `IDLE_EXIT_S` without
  reads or kept subscriptions.

Run as `python -m pyspark_kinesis.source.agent.process SOCKET OWNER_PID`; `link` does that.
"""

from __future__ import annotations

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

from ...aws.error_kinds import encode_error
from ...aws.kinesis import KinesisProxy
from ...config.stream_specs import StreamSpec
from ...switches import AGENT_HOST
from . import relay
from .hub import ConsumerShard, HeldSubscription, SubscriptionHub
from .link import UnixChannel

log = logging.getLogger("pyspark_kinesis.source.agent")

MAX_MESSAGES = 10_000_000  # hard bound on one connection's messages
# The agent ends after this long without reads or kept subscriptions. Longer than Spark keeps idle
# Python workers (a minute): after a quiet spell the next batch runs in new workers, and an agent
# still there spares it the agent's start and, within `hub.MAX_IDLE_S`, its subscriptions
# (docs/performance.md, `bench-latency-modes-quiet`). An idle agent costs a sleeping process.
IDLE_EXIT_S = 600.0
# Connections from other executors not yet authenticated, at once: more are closed as they come, so
# that peers which connect and say nothing (or a byte at a time) cannot take the threads the
# subscriptions need. Each has `relay.HANDSHAKE_TIMEOUT_S` for its whole handshake.
MAX_HANDSHAKES = 16
# ...and from one peer address at once: a peer that floods the port takes a few, not every one.
MAX_HANDSHAKES_PER_PEER = 4
# Connections the kernel queues before the relay takes them (Python's default of 5 made a burst of
# strangers' connections refuse real readers' connects, which then subscribed anew behind the
# service's 5 s spacing).
RELAY_BACKLOG = 128
# The relay listens only while a query run that enables it (`fanOutRelay`, the default) has used a
# subscription here within this long: with `fanOutRelay=false` no port is open.
RELAY_IDLE_S = 60.0


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this user (Linux tells; elsewhere the private directory is the guard)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return uid == os.getuid()


class _Session:
    """One read's conversation with the agent: open (or continue), next..., keep or close (see `link`).
    A read from another executor (`remote`) may only continue a subscription kept for its query run."""

    def __init__(
        self,
        hub: SubscriptionHub,
        relay: Callable[[bool], str],
        remote: tuple[ConsumerShard, bytes] | None = None,
    ) -> None:
        """`relay(start)`: this agent's relay address (started first with `start`; "" when none);
        `remote`: for a read from another executor, the (consumer, shard) and the query run's key its
        handshake proved."""
        self.hub, self.relay, self.remote = hub, relay, remote
        self.held: HeldSubscription | None = None

    def serve(self, channel: Any) -> None:
        self.hub.enter()
        try:
            for _message in range(MAX_MESSAGES):
                message = channel.receive()
                if message is None:
                    break
                reply = self.answer(message)
                channel.send((*reply, self.held.pending if self.held is not None else 0))
        except (OSError, EOFError):
            pass  # the read's worker went away: its subscription is closed below
        finally:
            if self.held is not None:
                self.held.close()
            self.hub.leave()

    def _where(self, held: HeldSubscription) -> str:
        """Where a kept subscription can be continued from, `address@ms`: this agent's relay address
        (for the reads of a query run that gave a key; else empty) and when the subscription was opened
        (a read elsewhere that cannot continue it keeps the service's spacing from then: see `Spacing`)."""
        return f"{self.relay(False) if held.relay_key else ''}@{held.subscribed_ms}"

    def answer(self, message: tuple) -> tuple[str, Any]:
        hub, held, op = self.hub, self.held, message[0]
        if op == "mine":  # is `address` this agent's relay (a read whose holder is this executor's agent)
            return ("ok", bool(message[1]) and message[1] == self.relay(False))
        if op in ("open", "continue"):
            if held is not None:
                held.close()
                self.held = None
            if op == "continue":
                if self.remote is None:
                    return ("refused", "continue is for reads from other executors")
                (key, relay_key) = self.remote
                self.held = hub.resume(key, relay_key, message[1], message[2])
                if self.held is not None:
                    return ("ok", False)
                busy = hub.busy(key, relay_key)
                return ("busy", busy) if busy is not None else ("refused", "not kept at that position")
            if self.remote is not None:
                return ("refused", "a read from another executor only continues a kept subscription")
            if message[1].relay_key:
                self.relay(True)  # its query run lets other executors continue what it keeps here
            try:
                self.held, fresh = hub.open(message[1])
            except Exception as exc:
                return ("error", encode_error(exc))
            return ("ok", fresh)
        if held is None:
            return ("error", encode_error(RuntimeError(f"'{op}' without an open subscription")))
        if op == "next":
            kind, value = hub.next_for(held, float(message[1]), bool(message[2]))
            if kind in ("event", "idle", "settle"):
                return (kind, value)
            held.close()
            self.held = None
            return ("end", None) if kind == "end" else ("error", encode_error(value))
        self.held = None
        if op == "keep":
            hub.keep(held, message[1])
            return ("ok", self._where(held))
        held.close()
        return ("ok", None)


class _LocalReads(socketserver.BaseRequestHandler):
    """A connection from a Python worker of this executor, over the Unix socket."""

    def handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        conn: socket.socket = self.request
        if not _same_user(conn):
            log.warning("refused a connection from another user")
            return
        _Session(server.hub, server.relay).serve(UnixChannel(conn))


class _RemoteReads(socketserver.BaseRequestHandler):
    """A connection from another executor's read, over TCP: authenticated first (see `relay`)."""

    def handle(self) -> None:
        server: _RelayServer = self.server  # type: ignore[assignment]
        hub = server.hub
        try:
            try:
                channel, key, relay_key = relay.accept(self.request, lambda *key: hub.relay_key_of(key))
            finally:
                server.handshakes.release(self.client_address[0])
        except (relay.RelayRefused, OSError, ValueError) as exc:
            log.info("relay connection from %s refused: %s", self.client_address, exc)
            return
        address = server.relay_address
        _Session(hub, lambda _start: address, remote=(key, relay_key)).serve(channel)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, hub: SubscriptionHub) -> None:
        self.hub = hub
        self.relay_server: _RelayServer | None = None
        self._relay_lock = threading.Lock()
        super().__init__(path, _LocalReads)

    def relay(self, start: bool) -> str:
        """The relay's address ("" when it is not listening), started first when `start`. Asking to
        start it counts as using it: a read asks before it subscribes, and the hub marks the use only
        once the subscription is open (seconds later, after the service's spacing), so without this the
        watch thread closed a listener it had just started (or one unused for a minute), the read then
        kept its subscription with no address to reach it by, and the shard's next batch on another
        executor, refused by the service while this agent held it, read nothing for its whole budget."""
        with self._relay_lock:
            if start:
                self.hub.relayed_at = time.monotonic()
            if start and self.relay_server is None:
                self.relay_server = _start_relay(self.hub)
            return self.relay_server.relay_address if self.relay_server is not None else ""

    def stop_relay_if_unused(self) -> None:
        """Close the listener once no query run that enables the relay has used a subscription here for
        `RELAY_IDLE_S` (its kept subscriptions are gone or closed)."""
        with self._relay_lock:
            if self.relay_server is None or time.monotonic() - self.hub.relayed_at < RELAY_IDLE_S:
                return
            closing, self.relay_server = self.relay_server, None
        closing.shutdown()
        closing.server_close()
        log.info("relay for other executors' reads closed: no query run uses it here")


class _Handshakes:
    """Unauthenticated connections in progress: at most `MAX_HANDSHAKES`, and `MAX_HANDSHAKES_PER_PEER`
    from one peer address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_peer: dict[str, int] = {}

    def acquire(self, peer: str) -> bool:
        with self._lock:
            if (
                sum(self._by_peer.values()) >= MAX_HANDSHAKES
                or self._by_peer.get(peer, 0) >= MAX_HANDSHAKES_PER_PEER
            ):
                return False
            self._by_peer[peer] = self._by_peer.get(peer, 0) + 1
            return True

    def release(self, peer: str) -> None:
        with self._lock:
            left = self._by_peer.get(peer, 0) - 1
            if left > 0:
                self._by_peer[peer] = left
            else:
                self._by_peer.pop(peer, None)


class _RelayServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    address_family = socket.AF_INET
    request_queue_size = RELAY_BACKLOG

    def __init__(self, host: str, hub: SubscriptionHub) -> None:
        self.hub = hub
        self.handshakes = _Handshakes()
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, 0), _RemoteReads)
        self.relay_address = relay.join_address(host, self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection only while the handshakes in progress allow (`_Handshakes`);
        otherwise it is closed at once (a real reader then subscribes where it runs)."""
        if not self.handshakes.acquire(client_address[0]):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.handshakes.release(client_address[0])
            raise


def _start_relay(hub: SubscriptionHub) -> _RelayServer | None:
    """The TCP listener for reads from other executors, on `relay.relay_host()`; None if it cannot
    listen (reads on other executors then subscribe for themselves, as without it)."""
    host = relay.relay_host()
    if not host:
        log.warning(
            "no relay for other executors' reads: SPARK_LOCAL_IP (or PYSPARK_KINESIS_AGENT_HOST) is a wildcard "
            "address, which other executors cannot be told; each executor subscribes for itself (set "
            "PYSPARK_KINESIS_AGENT_HOST to this executor's address to relay)"
        )
        return None
    named = bool(AGENT_HOST.value() or os.environ.get("SPARK_LOCAL_IP", "").strip())
    if (
        relay.reachable_only_here(host) and not named
    ):  # (a loopback address set on purpose: a one-host cluster)
        log.warning(
            "the relay for other executors' reads listens on %s, a loopback address (this host's name "
            "resolves to it): only executors on this host reach it. Set PYSPARK_KINESIS_AGENT_HOST (or "
            "SPARK_LOCAL_IP) to this executor's address on the cluster network.",
            host,
        )
    try:
        server = _RelayServer(host, hub)
    except OSError as exc:
        log.warning("no relay for other executors' reads (cannot listen on %s: %s)", host, exc)
        return None
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="efo-relay", daemon=True
    ).start()
    return server


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
    # SubscribeToShard without botocore's own retries: every attempt must go through `Spacing`
    # (botocore would retry a LimitExceeded within half a second, against the service's rule).
    hub = SubscriptionHub(
        client_for or (lambda spec: KinesisProxy(spec, agent="reader", max_attempts=1).client)
    )
    old_mask = os.umask(0o177)  # the socket is this user's only
    try:
        server = _Server(path, hub)
    except OSError as exc:  # another agent took the path first: it serves
        log.info("not serving %s: %s", path, exc)
        return
    finally:
        os.umask(old_mask)
    ours = os.stat(path).st_ino  # at exit the path is unlinked only if it is still this agent's socket

    def watch() -> None:
        while True:
            time.sleep(0.5)
            hub.reap()
            server.stop_relay_if_unused()
            if not _owner_alive(owner) or time.monotonic() - hub.idle_since > IDLE_EXIT_S:
                server.shutdown()
                return

    threading.Thread(target=watch, name="efo-agent-watch", daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        with server._relay_lock:
            relay_server, server.relay_server = server.relay_server, None
        if relay_server is not None:
            relay_server.shutdown()
            relay_server.server_close()
        hub.close_all()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == ours:  # (a successor started meanwhile owns it otherwise)
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
