"""Reading a subscription that another executor's agent holds: the channel between executors.

Why: Spark runs a shard's next task on whichever executor has a free slot (a Python data source's
partitions carry no preferred locations), and Kinesis refuses a new subscription on a shard within
5 s of the last successful one, while a new one takes the shard from the old. Were every executor to
subscribe where its task lands, the executors' agents would take shards from each other and records
would wait tens of seconds. So a subscription stays with the agent that opened it (the *holder*, named
in the batch-end record as `host:port`), and a read on another executor takes its events from there.
Lost holder (its executor gone, the subscription expired or taken by a newer one): the read
subscribes anew where it runs, from its batch's recorded position, exactly as without a holder.

What crosses the network, and how it is guarded:
- Only what a read asks of a subscription (which consumer and shard, from which position, the batch's
  name) and the events (records, as GetRecords returns them). Never stream settings or credentials: a
  remote read can only continue a subscription the holder keeps, never open one.
- Each kept subscription carries the key of the query run that opened it (random, made by the
  driver, sent to tasks inside their partitions as Spark sends any task). A connection proves it knows
  that key and the holder proves it too (HMAC challenge and answer, both ways, over fresh nonces), so
  neither a stranger nor another query reads or feeds events. The reader's hello already carries a
  proof over what it asks for: a peer without the key gets the same refusal whether or not the
  holder keeps that consumer and shard, so it learns nothing of what the holder keeps.
- A handshake is bounded as a whole on both ends (`HANDSHAKE_TIMEOUT_S`), however slowly its bytes
  come, and the holder admits a few unauthenticated connections per peer address at once (the agent's
  `MAX_HANDSHAKES_PER_PEER`): a peer that connects and says nothing, or trickles bytes, holds a read
  or the holder's threads for seconds, not longer, and one peer cannot take every slot. Every frame after that carries an HMAC
  of its payload and sequence number under a key of that session, checked before anything is
  unpickled.
- Events are not encrypted (as Spark's shuffle is not, unless `spark.io.encryption` and
  `spark.network.crypto` are on): where executors talk over an untrusted network, run fan-out with
  `fanOutRelay=false` (each executor subscribes for itself) or on a private network.

Wire: frames of a 4-byte big-endian length and a body. The hello and its answers are JSON; after
them, a body is a 32-byte HMAC-SHA256 tag followed by a pickle (see `SealedChannel`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import orjson

from ...switches import AGENT_HOST
from .framing import receive_frame, send_frame

_SEQ = struct.Struct(">Q")
TAG = 32  # bytes of an HMAC-SHA256 tag
NONCE = 16
MAX_FRAME = 512 * 1024 * 1024  # larger than any event (events carry at most a few MB)
MAX_HELLO = 64 * 1024  # the handshake's JSON frames are small
CONNECT_TIMEOUT_S = 2.0  # a holder that does not answer by then is taken as lost
HANDSHAKE_TIMEOUT_S = 5.0  # the holder's bound on a connection's whole handshake
# After the handshake a reader paces the conversation (a backoff may pause it), but not for ever: a
# session silent this long ends (its subscription is closed), and TCP keepalive finds a reader whose
# host vanished without a FIN or RST within about a minute (idle 30 s, then 3 probes 10 s apart).
SESSION_IDLE_S = 300.0
KEEPALIVE = {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3}


class RelayRefused(Exception):
    """The holder did not hand the subscription (it keeps none for this key, the proofs differ, or it
    could not be reached): the read subscribes where it runs."""


class RelayBusy(RelayRefused):
    """The holder's subscription is in use by a read right now, of `batch` (see `hub.SubscriptionHub.busy`)."""

    def __init__(self, batch: str, subscribed_ms: int) -> None:
        super().__init__(f"the subscription is in use by a read of batch {batch}")
        self.batch, self.subscribed_ms = batch, subscribed_ms


WILDCARDS = ("0.0.0.0", "::", "[::]")


def relay_host() -> str:
    """The address this executor's agent listens on for reads from other executors: where Spark's own
    executor listens (`SPARK_LOCAL_IP`) when set, else this host's name resolved, else loopback.
    `PYSPARK_KINESIS_AGENT_HOST` overrides both (e.g. a pod's IP from the Kubernetes downward API).
    "" when there is none other executors could be told: a wildcard (`SPARK_LOCAL_IP=0.0.0.0` binds
    every interface but names none) turns the relay off, each executor then subscribing for itself."""
    for value in (AGENT_HOST.value(), os.environ.get("SPARK_LOCAL_IP", "").strip()):
        if value in WILDCARDS:
            return ""
        if value:
            return value
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def reachable_only_here(host: str) -> bool:
    """A loopback address: only this host's executors reach it (Debian maps the host name to
    127.0.1.1, which would make every other executor's read subscribe for itself)."""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (the host may be an IPv6 literal in brackets) as a (host, port) pair."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


def join_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _proof(key: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(key, role + client_nonce + server_nonce, hashlib.sha256).digest()


def _hello_proof(key: bytes, consumer: str, shard: str, nonce: bytes) -> bytes:
    """The reader's proof in its hello: it knows the key of the subscription it names (see the module
    docstring: what a stranger's hello is answered)."""
    named = orjson.dumps([consumer, shard])
    return hmac.new(key, b"hello" + nonce + named, hashlib.sha256).digest()


# -- framing -----------------------------------------------------------------------------------------
def _hello_frame(sock: socket.socket, deadline: float | None = None) -> dict[str, Any]:
    body = receive_frame(sock, MAX_HELLO, deadline)
    if body is None:
        raise RelayRefused("the peer closed the connection during the handshake")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RelayRefused("not a relay handshake") from None
    if not isinstance(data, dict):
        raise RelayRefused("not a relay handshake")
    return data


class SealedChannel:
    """Pickled messages, each with an HMAC of (direction, sequence number, payload) under the session's
    key, checked before the payload is unpickled: only the authenticated peer's frames, in order, are
    ever loaded."""

    def __init__(self, sock: socket.socket, session_key: bytes, *, client: bool) -> None:
        self.sock = sock
        self._key = session_key
        self._out = b"c" if client else b"s"
        self._in = b"s" if client else b"c"
        self._sent = 0
        self._received = 0

    def _tag(self, direction: bytes, seq: int, payload: bytes) -> bytes:
        mac = hmac.new(self._key, direction + _SEQ.pack(seq), hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def send(self, message: Any) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        send_frame(self.sock, self._tag(self._out, self._sent, payload) + payload)
        self._sent += 1

    def receive(self) -> Any:
        """The next message, or None when the peer closed the connection between messages."""
        body = receive_frame(self.sock, MAX_FRAME)
        if body is None:
            return None
        tag, payload = body[:TAG], body[TAG:]
        if not hmac.compare_digest(tag, self._tag(self._in, self._received, payload)):
            raise ConnectionError("a relay frame failed its integrity check: connection dropped")
        self._received += 1
        return pickle.loads(payload)

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# -- the two ends of the handshake -------------------------------------------------------------------
def connect(address: str, consumer: str, shard: str, key: bytes) -> SealedChannel:
    """A channel to the holder at `address` for the subscription of (`consumer`, `shard`) opened under
    the query run's `key`. RelayRefused when the holder is unreachable or keeps no such subscription,
    or when it cannot prove it knows the key."""
    try:
        host, port = split_address(address)
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except (OSError, ValueError) as exc:
        raise RelayRefused(f"holder {address} not reachable: {exc}") from None
    try:
        # (the whole handshake, however slowly a peer at a stale holder address trickles its bytes)
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine = os.urandom(NONCE)
        hello = {"consumer": consumer, "shard": shard, "nonce": mine.hex()}
        hello["proof"] = _hello_proof(key, consumer, shard, mine).hex()
        send_frame(sock, orjson.dumps(hello))
        answer = _hello_frame(sock, deadline)
        if not answer.get("held"):
            raise RelayRefused(f"holder {address} keeps no subscription of {shard} for this query")
        theirs = bytes.fromhex(str(answer.get("nonce", "")))
        proof = bytes.fromhex(str(answer.get("proof", "")))
        if len(theirs) != NONCE or not hmac.compare_digest(proof, _proof(key, b"holder", mine, theirs)):
            raise RelayRefused(f"holder {address} did not prove it holds this query's subscription")
        send_frame(sock, orjson.dumps({"proof": _proof(key, b"reader", mine, theirs).hex()}))
        verdict = _hello_frame(sock, deadline)
        if not verdict.get("ok"):
            raise RelayRefused(f"holder {address} refused the read: {verdict.get('why', 'no reason')}")
        return SealedChannel(sock, _proof(key, b"session", mine, theirs), client=True)
    except (OSError, ValueError, RelayRefused) as exc:  # (TimeoutError, ConnectionError: OSError)
        with contextlib.suppress(OSError):
            sock.close()
        if isinstance(exc, RelayRefused):
            raise
        raise RelayRefused(f"holder {address}: handshake failed: {exc}") from None


def accept(
    sock: socket.socket, key_for: Callable[[str, str], bytes | None]
) -> tuple[SealedChannel, tuple[str, str], bytes]:
    """The holder's end: read the hello, find the key of the subscription it names (`key_for`:
    (consumer, shard) -> the query run's key of the subscription kept there, or None), exchange proofs.
    Returns the channel, the (consumer, shard) asked for and the key both proved; RelayRefused
    otherwise."""
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    hello = _hello_frame(sock, deadline)
    consumer, shard = str(hello.get("consumer", "")), str(hello.get("shard", ""))
    try:
        theirs = bytes.fromhex(str(hello.get("nonce", "")))
        shown = bytes.fromhex(str(hello.get("proof", "")))
    except ValueError:
        theirs = shown = b""
    key = key_for(consumer, shard) if len(theirs) == NONCE else None
    if key is None or not hmac.compare_digest(shown, _hello_proof(key, consumer, shard, theirs)):
        # (the same answer whether nothing is kept or the peer does not know the key: see the docstring)
        send_frame(sock, orjson.dumps({"held": False}))
        raise RelayRefused(f"no subscription of {shard} kept here for that reader")
    mine = os.urandom(NONCE)
    proof = _proof(key, b"holder", theirs, mine)
    send_frame(sock, orjson.dumps({"held": True, "nonce": mine.hex(), "proof": proof.hex()}))
    answer = _hello_frame(sock, deadline)
    try:
        given = bytes.fromhex(str(answer.get("proof", "")))
    except ValueError:
        given = b""
    if not hmac.compare_digest(given, _proof(key, b"reader", theirs, mine)):
        send_frame(sock, orjson.dumps({"ok": False, "why": "wrong proof"}))
        raise RelayRefused("a reader that does not know the query's key")
    send_frame(sock, orjson.dumps({"ok": True}))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    keep_alive(sock)
    # The reader paces the conversation from here (a backoff may pause it), within SESSION_IDLE_S.
    sock.settimeout(SESSION_IDLE_S)
    return SealedChannel(sock, _proof(key, b"session", theirs, mine), client=False), (consumer, shard), key


def keep_alive(sock: socket.socket) -> None:
    """TCP keepalive with `KEEPALIVE`'s timing, where the platform has those options."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE.items():
        option = getattr(socket, name, None)
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
