"""A Python worker's side of the fan-out agent: find (or start) the executor's agent, and talk to it.

The agent (`process`) holds the executor's enhanced fan-out subscriptions; a read in any of the
executor's Python workers reaches it over a Unix socket. One agent serves one owner: the process
that forked the Python workers (Spark's `pyspark.daemon`, one per executor), so every worker of the
executor, and no other executor, finds the same one. The first read that finds none starts it (under
a file lock, so two workers never start two), detached from the worker: Spark ends idle workers, the
agent outlives them and ends itself when its owner is gone.

The socket and its lock live in a directory only this user may enter (created 0700 and checked), and
the agent also checks its peer's user id, because what travels over the socket is pickled: stream
settings (which may carry credentials) one way, events the other.

Wire: every message is a 4-byte big-endian length and a pickle. A read sends ("open", want) (a
`hub.SubscriptionRequest`), or to the agent of another executor ("continue", position, batch) (see `relay`), then
("next", wait_s, settle) as often as it wants an event, and ends with ("keep", position) or
("close",); the agent answers each with
(kind, value, pending): "ok", "event", "idle" (nothing within wait_s), "settle" (nothing yet, and
another read of the same batch on this executor already took records), "end", "error" or "refused" (no kept
subscription to continue there), and how many events already wait. "keep" answers with where the
subscription is kept (`host:port`, or "" when only this executor can reach it). With "idle" and "settle" the value is the MillisBehindLatest of the
subscription's last event handed out (-1 before any).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ...aws.error_kinds import decode_error
from ...errors import StreamAccessError
from ...model import Position
from . import relay
from .framing import receive_frame, send_frame
from .hub import SubscriptionRequest
from .relay import SealedChannel

_MAX_MESSAGE = 512 * 1024 * 1024  # larger than any event (events carry at most a few MB)
START_TIMEOUT_S = 20.0  # an agent that does not listen by then failed to start
REPLY_MARGIN_S = (
    30.0  # how long past its own wait the agent may take to answer before the link counts as broken
)


class SubscriptionEnded(Exception):
    """The subscription ended (the service ends each after 5 minutes, or the shard's end was sent)."""


# -- finding or starting the agent -------------------------------------------------------------------
def agent_dir() -> Path:
    """This user's private directory for agent sockets (created 0700; refused if anyone else could
    enter it, since whoever can reach the socket can read the events)."""
    base = Path(tempfile.gettempdir())
    if len(str(base)) > 60:  # a Unix socket path holds ~100 bytes
        base = Path("/tmp")
    path = base / f"pyspark-kinesis-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise StreamAccessError(
            f"{path} (the enhanced fan-out agent's socket directory) is not private to this user: "
            "remove it, or make it mode 0700 and owned by the user running Spark's executors."
        )
    return path


def socket_path(owner: int) -> Path:
    return agent_dir() / f"fanout-{owner}.sock"


def _try_connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def connect_agent(owner: int | None = None) -> socket.socket:
    """A connection to the agent of `owner` (default: the process that forked this worker), started
    here if none listens."""
    owner = os.getppid() if owner is None else owner
    try:
        path = socket_path(owner)
        sock = _try_connect(path)
        return sock if sock is not None else _start_and_connect(path, owner)
    except OSError as exc:  # the directory, the lock or the process could not be made: not transient
        raise StreamAccessError(
            f"cannot start the enhanced fan-out agent ({exc.__class__.__name__}: {exc}). It needs a "
            "writable temporary directory and permission to start a process on the executor."
        ) from None


def _start_and_connect(path: Path, owner: int) -> socket.socket:
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            sock = _try_connect(path)
            if sock is not None:
                return sock
            process = _start(path, owner)
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                sock = _try_connect(path)
                if sock is not None:
                    return sock
                if process.poll() is not None:
                    break
                time.sleep(0.05)
            raise StreamAccessError(
                f"the enhanced fan-out agent did not start (exit code {process.poll()}); its log is "
                f"{path.with_suffix('.log')}."
            )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start(path: Path, owner: int) -> subprocess.Popen:
    """The agent process, detached, with this worker's import path (the connector may have come as
    --py-files). A thread waits for it so that it leaves no zombie behind if it ends first."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a socket left by an agent that was killed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with open(path.with_suffix(".log"), "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pyspark_kinesis.source.agent.process", str(path), str(owner)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    threading.Thread(target=process.wait, name="efo-agent-reaper", daemon=True).start()
    return process


# -- a read's link -----------------------------------------------------------------------------------
class UnixChannel:
    """Plain pickled messages over the executor's own agent socket (private to this user)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: Any) -> None:
        send_frame(self.sock, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def receive(self) -> Any:
        """The next message, or None when the peer closed the connection between messages."""
        body = receive_frame(self.sock, _MAX_MESSAGE)
        return pickle.loads(body) if body is not None else None

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class AgentLink:
    """One read's connection to an agent, for one subscription at a time: the executor's own agent
    (`AgentLink()`), or the agent of another executor that holds the shard's subscription
    (`AgentLink.to_holder`, see `relay`). Any failure of the connection itself (the agent killed, its
    socket gone) raises ConnectionError and marks the link broken; the read then connects again
    (starting a new agent if need be)."""

    def __init__(self, owner: int | None = None, channel: UnixChannel | SealedChannel | None = None) -> None:
        self.channel = channel if channel is not None else UnixChannel(connect_agent(owner))
        self.broken = False
        self.open_now = False
        self.pending = 0  # events that already waited in the agent at its last answer
        self.settled = False  # the last "next" ended early: the batch has records from another read
        self.behind = -1  # with no event: MillisBehindLatest of the subscription's last event

    @staticmethod
    def to_holder(address: str, consumer: str, shard: str, key: bytes) -> AgentLink:
        """A link to the agent at `address` that keeps the subscription of (`consumer`, `shard`) opened
        under the query run's `key`. RelayRefused when there is none to continue there."""
        return AgentLink(channel=relay.connect(address, consumer, shard, key))

    def _ask(self, message: tuple, wait_s: float = 0.0) -> tuple[str, Any, int]:
        try:
            self.channel.settimeout(wait_s + REPLY_MARGIN_S)
            self.channel.send(message)
            reply = self.channel.receive()
        except OSError as exc:
            self.broken = True
            raise ConnectionError(f"enhanced fan-out agent connection failed: {exc}") from None
        if reply is None:
            self.broken = True
            raise ConnectionError("the enhanced fan-out agent closed the connection")
        kind, value, self.pending = reply
        if kind == "refused":
            self.open_now = False
            raise relay.RelayRefused(str(value))
        if kind == "busy":
            self.open_now = False
            raise relay.RelayBusy(str(value[0]), int(value[1]))
        if kind == "error":
            self.open_now = False  # the agent dropped the subscription
            raise decode_error(value)
        return kind, value, self.pending

    def open(self, want: SubscriptionRequest) -> bool:
        """Subscribe as `want` says (see `hub.SubscriptionRequest`); True for a new subscription, False when the one a
        read kept at exactly that position continues. The service's refusals raise as botocore raises
        them."""
        _kind, fresh, _pending = self._ask(("open", want))
        self.open_now = True
        return bool(fresh)

    def is_agent_at(self, address: str) -> bool:
        """On a link to this executor's agent: whether `address` is that agent's relay (a read whose
        holder is this executor's own agent continues over this link, not over TCP)."""
        _kind, mine, _pending = self._ask(("mine", address))
        return bool(mine)

    def resume(self, position: Position, batch: str) -> None:
        """On a holder's link: continue the subscription it keeps at exactly `position` (RelayRefused
        when it keeps it elsewhere, or no longer; RelayBusy when a read holds it right now)."""
        self._ask(("continue", position, batch))
        self.open_now = True

    def next_event(self, wait_s: float, settle: bool = False) -> dict[str, Any] | None:
        """The subscription's next event (a GetRecords-shaped response), or None when none came within
        `wait_s` (with `settle`, sooner once another read of the batch took records: `settled`);
        SubscriptionEnded when the subscription ended."""
        kind, value, _pending = self._ask(("next", wait_s, settle), wait_s)
        if kind == "end":
            self.open_now = False
            raise SubscriptionEnded()
        if kind == "event":
            return value
        self.settled, self.behind = kind == "settle", int(value)
        return None

    def keep(self, position: Position) -> str:
        """Leave the subscription open for the shard's next read, which continues it from `position`.
        Returns where it is kept (the holding agent's `host:port` for reads on other executors), or ""
        when other executors cannot reach it."""
        where = ""
        if self.open_now and not self.broken:
            _kind, value, _pending = self._ask(("keep", position))
            where = str(value or "")
        self.open_now = False
        return where

    def close(self) -> None:
        """End the link; a subscription still open (not kept) is closed by the agent."""
        self.channel.close()
        self.broken = True
