"""The agent process's own parts (agent/process.py), each on its own: a read's session against a
scripted hub (every message a read may send, and what it answers), the relay listener's start and
what it tells operators, the peer and owner checks, and what the process logs. The agent serving
real reads is in test_fanout_relay.py and test_agent_lifecycle.py."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pyspark_kinesis.aws.error_kinds import encode_error
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent import process, relay
from pyspark_kinesis.source.agent.hub import SubscriptionHub, SubscriptionRequest
from pyspark_kinesis.source.agent.process import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_PEER
from tests.helpers import missing_tool
from tests.unit.scripted import SPEC

KEY = (SPEC.consumer_arn, "shardId-000000000004")
AGENT_LOG = "pyspark_kinesis.source.agent"


class Held:
    def __init__(self, relay_key: bytes = b"", subscribed_ms: int = 1234, pending: int = 3) -> None:
        self.relay_key, self.subscribed_ms, self.pending = relay_key, subscribed_ms, pending
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class Hub:
    """The hub's calls a session makes, recorded; answers as set."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.opened: Any = (Held(), True)
        self.resumed: Held | None = None
        self.busy_with: tuple[str, int] | None = None
        self.next_item: tuple[str, Any] = ("idle", 5)
        self.reads = 0

    def open(self, want: Any) -> tuple[Held, bool]:
        self.calls.append(("open", want))
        if isinstance(self.opened, BaseException):
            raise self.opened
        return self.opened

    def resume(self, *args: Any) -> Held | None:
        self.calls.append(("resume", *args))
        return self.resumed

    def busy(self, *args: Any) -> tuple[str, int] | None:
        self.calls.append(("busy", *args))
        return self.busy_with

    def next_for(self, held: Held, wait_s: float, settle: bool) -> tuple[str, Any]:
        self.calls.append(("next_for", held, wait_s, settle))
        return self.next_item

    def keep(self, held: Held, position: Position) -> None:
        self.calls.append(("keep", held, position))

    def enter(self) -> None:
        self.reads += 1

    def leave(self) -> None:
        self.reads -= 1


def session(hub: Hub, remote: Any = None) -> tuple[process._Session, list[bool]]:
    starts: list[bool] = []

    def relay_at(start: bool) -> str:
        starts.append(start)
        return "10.0.0.9:7000"

    return process._Session(hub, relay_at, remote=remote), starts  # type: ignore[arg-type]


def want(relay_key: bytes = b"") -> SubscriptionRequest:
    return SubscriptionRequest(
        SPEC, KEY[0], KEY[1], Position.trim_horizon(), True, "t#1", relay_key=relay_key
    )


# -- a read's session ---------------------------------------------------------------------------------
def test_an_open_answers_whether_the_subscription_is_new() -> None:
    hub = Hub()
    talk, starts = session(hub)
    assert talk.answer(("open", want())) == ("ok", True)
    assert starts == []  # no relay for a query run that gave no key
    hub.opened = (Held(), False)
    first = talk.held
    assert talk.answer(("open", want(b"k"))) == ("ok", False)
    assert first is not None and first.closed == 1  # the read's previous subscription is closed first
    assert starts == [True]  # a query run with the relay on starts it


def test_an_open_the_service_refuses_answers_its_error_and_leaves_nothing_open() -> None:
    hub = Hub()
    talk, _ = session(hub)
    talk.answer(("open", want()))
    refusal = ClientError({"Error": {"Code": "ResourceInUseException"}}, "SubscribeToShard")
    hub.opened = refusal
    assert talk.answer(("open", want())) == ("error", encode_error(refusal))
    assert talk.held is None
    assert talk.answer(("next", 1.0, False)) == (
        "error",
        encode_error(RuntimeError("'next' without an open subscription")),
    )


def test_continue_is_only_for_reads_from_other_executors() -> None:
    talk, _ = session(Hub())
    assert talk.answer(("continue", Position.after("1"), "t#2")) == (
        "refused",
        "continue is for reads from other executors",
    )
    remote, _ = session(Hub(), remote=(KEY, b"k"))
    assert remote.answer(("open", want(b"k"))) == (
        "refused",
        "a read from another executor only continues a kept subscription",
    )


def test_a_remote_continue_is_answered_ok_busy_or_refused() -> None:
    hub = Hub()
    talk, _ = session(hub, remote=(KEY, b"k"))
    hub.resumed = Held(b"k")
    assert talk.answer(("continue", Position.after("1"), "t#2")) == ("ok", False)
    assert hub.calls[-1] == ("resume", KEY, b"k", Position.after("1"), "t#2") and talk.held is hub.resumed
    hub.resumed = None
    hub.busy_with = ("t#2", 99)
    assert talk.answer(("continue", Position.after("1"), "t#2")) == ("busy", ("t#2", 99))
    hub.busy_with = None
    assert talk.answer(("continue", Position.after("1"), "t#2")) == ("refused", "not kept at that position")


@pytest.mark.parametrize("kind", ["event", "idle", "settle"])
def test_next_passes_what_the_hub_has_and_keeps_the_subscription(kind: str) -> None:
    hub = Hub()
    talk, _ = session(hub)
    talk.answer(("open", want()))
    hub.next_item = (kind, {"Records": []} if kind == "event" else 40)
    assert talk.answer(("next", "2.5", 1)) == hub.next_item
    assert hub.calls[-1] == ("next_for", talk.held, 2.5, True)
    assert talk.answer(("next", 0, 0)) == hub.next_item
    assert hub.calls[-1][2:] == (0.0, False) and talk.held is not None and talk.held.closed == 0


def test_the_end_or_an_error_of_a_subscription_closes_it() -> None:
    hub = Hub()
    talk, _ = session(hub)
    talk.answer(("open", want()))
    held = talk.held
    hub.next_item = ("end", None)
    assert talk.answer(("next", 1.0, False)) == ("end", None)
    assert talk.held is None and held is not None and held.closed == 1
    talk.answer(("open", want()))
    broken = ConnectionResetError("reset by peer")
    hub.next_item = ("error", broken)
    assert talk.answer(("next", 1.0, False)) == ("error", encode_error(broken))
    assert talk.held is None


def test_keep_says_where_the_subscription_is_kept() -> None:
    hub = Hub()
    talk, starts = session(hub)
    hub.opened = (Held(b"k", subscribed_ms=777), True)
    talk.answer(("open", want(b"k")))
    held = talk.held
    assert talk.answer(("keep", Position.after("9"))) == ("ok", "10.0.0.9:7000@777")
    assert hub.calls[-1] == ("keep", held, Position.after("9")) and talk.held is None
    assert starts == [True, False]  # (asked for the address, not started again)
    hub.opened = (Held(b"", subscribed_ms=55), True)
    talk.answer(("open", want()))
    assert talk.answer(("keep", Position.after("9"))) == ("ok", "@55")  # no key: only this executor's reads


def test_close_closes_the_subscription() -> None:
    hub = Hub()
    talk, _ = session(hub)
    talk.answer(("open", want()))
    held = talk.held
    assert talk.answer(("close",)) == ("ok", None)
    assert held is not None and held.closed == 1 and talk.held is None


class Channel:
    def __init__(self, *messages: Any) -> None:
        self.messages, self.sent = list(messages), []

    def receive(self) -> Any:
        return self.messages.pop(0) if self.messages else None

    def send(self, reply: Any) -> None:
        self.sent.append(reply)


def test_every_reply_says_how_many_events_wait() -> None:
    hub = Hub()
    talk, _ = session(hub)
    hub.opened = (Held(pending=3), True)
    channel = Channel(("next", 0, False), ("open", want()), ("next", 0, False), ("close",))
    talk.serve(channel)
    assert [reply[-1] for reply in channel.sent] == [0, 3, 3, 0]
    assert hub.reads == 0  # entered and left


# -- the relay listener --------------------------------------------------------------------------------
@pytest.fixture
def no_host_env(monkeypatch):
    monkeypatch.delenv("PYSPARK_KINESIS_AGENT_HOST", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)


def started(hub: SubscriptionHub) -> process._RelayServer:
    server = process._start_relay(hub)
    assert server is not None
    return server


def stop(server: process._RelayServer) -> None:
    server.shutdown()
    server.server_close()


def test_a_wildcard_address_starts_no_relay_and_says_what_to_set(monkeypatch, caplog, no_host_env) -> None:
    monkeypatch.setenv("SPARK_LOCAL_IP", "0.0.0.0")
    with caplog.at_level(logging.WARNING, logger=AGENT_LOG):
        assert process._start_relay(SubscriptionHub(lambda spec: None)) is None
    assert caplog.messages == [
        "no relay for other executors' reads: SPARK_LOCAL_IP (or PYSPARK_KINESIS_AGENT_HOST) is a wildcard "
        "address, which other executors cannot be told; each executor subscribes for itself (set "
        "PYSPARK_KINESIS_AGENT_HOST to this executor's address to relay)"
    ]


def test_a_loopback_address_from_the_host_name_is_warned_about(monkeypatch, caplog, no_host_env) -> None:
    monkeypatch.setattr(relay, "relay_host", lambda: "127.0.0.1")
    with caplog.at_level(logging.WARNING, logger=AGENT_LOG):
        server = started(SubscriptionHub(lambda spec: None))
    stop(server)
    assert caplog.messages == [
        "the relay for other executors' reads listens on 127.0.0.1, a loopback address (this host's name "
        "resolves to it): only executors on this host reach it. Set PYSPARK_KINESIS_AGENT_HOST (or "
        "SPARK_LOCAL_IP) to this executor's address on the cluster network."
    ]


@pytest.mark.parametrize("name", ["PYSPARK_KINESIS_AGENT_HOST", "SPARK_LOCAL_IP"])
def test_a_loopback_address_set_on_purpose_is_not_warned_about(
    monkeypatch, caplog, no_host_env, name
) -> None:
    monkeypatch.setenv(name, "127.0.0.1")
    with caplog.at_level(logging.WARNING, logger=AGENT_LOG):
        server = started(SubscriptionHub(lambda spec: None))
    try:
        assert caplog.messages == []
        assert server.relay_address.startswith("127.0.0.1:")
        threads = [t for t in threading.enumerate() if t.name == "efo-relay"]
        assert threads and all(t.daemon for t in threads)
    finally:
        stop(server)


def test_an_address_that_cannot_be_listened_on_starts_no_relay(monkeypatch, caplog, no_host_env) -> None:
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "192.0.2.1")  # (not this host's: bind fails)
    with caplog.at_level(logging.WARNING, logger=AGENT_LOG):
        assert process._start_relay(SubscriptionHub(lambda spec: None)) is None
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith("no relay for other executors' reads (cannot listen on 192.0.2.1: ")
    assert "Cannot assign requested address" in caplog.messages[0]


def test_an_ipv6_relay_listens_on_ipv6(monkeypatch, no_host_env) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        missing_tool(f"no IPv6 loopback here: {exc}")
    server = process._RelayServer("::1", SubscriptionHub(lambda spec: None))
    try:
        assert server.address_family == socket.AF_INET6
        assert server.relay_address == f"[::1]:{server.server_address[1]}"
    finally:
        server.server_close()


def test_connections_past_the_handshake_limit_are_closed_at_once(monkeypatch, no_host_env) -> None:
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "127.0.0.1")
    server = started(SubscriptionHub(lambda spec: None))
    try:
        peers = 0
        while server.handshakes.acquire(f"10.0.0.{peers // 4}"):  # every handshake slot taken
            peers += 1
        assert peers == MAX_HANDSHAKES
        host, port = relay.split_address(server.relay_address)
        with socket.create_connection((host, port), timeout=5.0) as peer:
            assert peer.recv(1) == b""  # closed without a thread or a word
    finally:
        stop(server)


def _from(address: str, port: int, source: str) -> socket.socket:
    return socket.create_connection((address, port), timeout=5.0, source_address=(source, 0))


def test_one_peer_gets_a_few_handshake_slots_and_all_peers_together_a_bounded_number(
    monkeypatch, no_host_env
) -> None:
    """Issue #61 items 7 and 9: any peer could keep the relay's handshake slots busy, and real readers'
    connects were then closed (they subscribed anew, behind the service's 5 s spacing). One peer
    address now takes MAX_HANDSHAKES_PER_PEER; all of them together MAX_HANDSHAKES. (Silent
    connections from loopback addresses of their own.)"""
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "127.0.0.1")
    monkeypatch.setattr(relay, "HANDSHAKE_TIMEOUT_S", 30.0)  # (the silent ones keep their slots here)
    server = started(SubscriptionHub(lambda spec: None))
    host, port = relay.split_address(server.relay_address)
    silent: list[socket.socket] = []
    try:
        silent += [_from(host, port, "127.0.0.2") for _ in range(MAX_HANDSHAKES_PER_PEER)]
        with _from(host, port, "127.0.0.2") as again:
            assert again.recv(1) == b""  # that peer's next one: closed at once
        with _from(host, port, "127.0.0.3") as reader:  # another peer still gets its handshake
            reader.sendall(b"\x00\x00\x00\x02{}")
            assert reader.recv(64).endswith(b'{"held":false}')
        for peer in ("127.0.0.3", "127.0.0.4", "127.0.0.5"):
            silent += [_from(host, port, peer) for _ in range(MAX_HANDSHAKES_PER_PEER)]
        assert len(silent) == MAX_HANDSHAKES
        with _from(host, port, "127.0.0.6") as late:
            assert late.recv(1) == b""  # every slot taken: closed at once, whoever asks
    finally:
        for sock in silent:
            sock.close()
        stop(server)


def test_the_relay_queues_a_burst_of_connects():
    assert process._RelayServer.request_queue_size == process.RELAY_BACKLOG >= 128


def test_a_refused_relay_connection_is_logged_with_its_peer(monkeypatch, caplog, no_host_env) -> None:
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "127.0.0.1")
    server = started(SubscriptionHub(lambda spec: None))
    try:
        host, port = relay.split_address(server.relay_address)
        with (
            caplog.at_level(logging.INFO, logger=AGENT_LOG),
            socket.create_connection((host, port), 5.0) as peer,
        ):
            peer.sendall(b"\x00\x00\x00\x02{}")  # a hello naming nothing: no subscription kept
            assert peer.recv(64)  # the answer {"held": false}
            peer.settimeout(5.0)
            with contextlib.suppress(OSError):
                peer.recv(1)  # then closed
            local = peer.getsockname()
        for _wait in range(200):
            if caplog.messages:
                break
            threading.Event().wait(0.01)
        assert caplog.messages == [
            f"relay connection from {local!r} refused: no subscription of  kept here for that reader"
        ]
    finally:
        stop(server)


def test_the_relay_starts_only_when_asked_and_stops_when_unused(monkeypatch, caplog, no_host_env) -> None:
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "127.0.0.1")
    base = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    hub = SubscriptionHub(lambda spec: None)
    server = process._Server(str(base / "a.sock"), hub)
    try:
        assert server.relay(False) == "" and server.relay_server is None  # not started for an address
        address = server.relay(True)
        assert address and server.relay(False) == address
        hub.relayed_at = process.time.monotonic()
        server.stop_relay_if_unused()
        assert server.relay_server is not None  # used just now
        hub.relayed_at = float("-inf")
        with caplog.at_level(logging.INFO, logger=AGENT_LOG):
            server.stop_relay_if_unused()
        assert server.relay_server is None and server.relay(False) == ""
        assert caplog.messages == ["relay for other executors' reads closed: no query run uses it here"]
    finally:
        server.server_close()
        shutil.rmtree(base, ignore_errors=True)


def test_asking_for_the_relay_counts_as_using_it(monkeypatch, no_host_env) -> None:
    """A read asks for the relay before it subscribes; the watch thread must not close the listener in
    the seconds the subscription takes (the read would keep it with no address to reach it by)."""
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "127.0.0.1")
    base = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    hub = SubscriptionHub(lambda spec: None)
    server = process._Server(str(base / "a.sock"), hub)
    try:
        address = server.relay(True)  # started: nothing used a subscription here yet
        server.stop_relay_if_unused()
        assert server.relay(False) == address
        hub.relayed_at = float("-inf")  # running, unused for longer than RELAY_IDLE_S...
        assert server.relay(True) == address  # ...and asked for again by a read
        server.stop_relay_if_unused()
        assert server.relay(False) == address
    finally:
        server.server_close()
        if server.relay_server is not None:
            server.relay_server.shutdown()
            server.relay_server.server_close()
        shutil.rmtree(base, ignore_errors=True)


# -- the process's checks and logging ------------------------------------------------------------------
def test_the_owner_check_only_asks_whether_the_owner_lives(monkeypatch) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, signal: int) -> None:
        sent.append((pid, signal))
        if pid == 2:
            raise PermissionError("not ours")
        if pid == 3:
            raise ProcessLookupError("gone")

    monkeypatch.setattr(process.os, "kill", kill)
    assert process._owner_alive(1) and process._owner_alive(2) and not process._owner_alive(3)
    assert sent == [(1, 0), (2, 0), (3, 0)]  # signal 0: a check, never a signal


def test_without_peer_credentials_the_private_directory_is_the_guard(monkeypatch) -> None:
    monkeypatch.delattr(process.socket, "SO_PEERCRED", raising=False)
    left, right = socket.socketpair()
    try:
        assert process._same_user(left)
    finally:
        left.close()
        right.close()


def test_a_connection_from_another_user_is_refused_and_logged(monkeypatch, caplog) -> None:
    monkeypatch.setattr(process, "_same_user", lambda conn: False)
    base = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    server = process._Server(str(base / "a.sock"), SubscriptionHub(lambda spec: None))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger=AGENT_LOG), socket.socket(socket.AF_UNIX) as peer:
            peer.settimeout(5.0)
            peer.connect(str(base / "a.sock"))
            assert peer.recv(1) == b""  # closed without an answer
        assert caplog.messages == ["refused a connection from another user"]
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(base, ignore_errors=True)


def test_the_agent_reads_with_single_attempt_clients_and_logs_a_taken_path(monkeypatch, caplog) -> None:
    made: list[tuple[Any, dict]] = []

    class Proxy:
        def __init__(self, spec: Any, **how: Any) -> None:
            made.append((spec, how))
            self.client = "client"

    hubs: list[SubscriptionHub] = []

    class Recorded(SubscriptionHub):
        def __init__(self, client_for: Any) -> None:
            super().__init__(client_for)
            hubs.append(self)

    monkeypatch.setattr(process, "KinesisProxy", Proxy)
    monkeypatch.setattr(process, "SubscriptionHub", Recorded)
    base = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    path = base / "a.sock"
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.bind(str(path))
    try:
        with caplog.at_level(logging.INFO, logger=AGENT_LOG):
            process.serve(str(path), os.getpid())  # the path is taken: returns at once
        assert hubs[0].client_for(SPEC) == "client"
        assert made == [(SPEC, {"agent": "reader", "max_attempts": 1})]  # every attempt through the spacing
        assert caplog.messages == [f"not serving {path}: [Errno 98] Address already in use"]
    finally:
        first.close()
        shutil.rmtree(base, ignore_errors=True)


def test_the_agents_log_lines_carry_time_process_and_logger(monkeypatch) -> None:
    configured: list[dict] = []
    monkeypatch.setattr(process.logging, "basicConfig", lambda **how: configured.append(how))
    monkeypatch.setattr(process, "serve", lambda path, owner: None)
    assert process.main(["/tmp/x.sock", "7"]) == 0
    assert configured == [
        {"level": logging.WARNING, "format": "%(asctime)s %(process)d %(name)s %(message)s"}
    ]


def test_leftovers_already_gone_are_no_error() -> None:
    base = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    try:
        process._remove_leftovers(str(base / "fanout-1.sock"))  # no lock, no log
        (base / "fanout-1.log").write_text("")
        process._remove_leftovers(str(base / "fanout-1.sock"))
        assert not (base / "fanout-1.log").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_agent_watches_from_a_daemon_thread_and_ends_if_its_socket_is_gone(monkeypatch) -> None:
    """The watch thread (reaping, owner and idle checks) never keeps the process alive by itself; and
    an agent whose socket file was removed meanwhile (a successor took the path, or a cleaner) still
    ends cleanly."""
    monkeypatch.setattr(process, "IDLE_EXIT_S", 1.0)
    base = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    path = base / "fanout-1.sock"
    failures: list[BaseException] = []

    def run() -> None:
        try:
            process.serve(str(path), os.getpid(), lambda spec: None)
        except BaseException as exc:
            failures.append(exc)

    serving = threading.Thread(target=run)  # (not a daemon, as the agent's main thread is not)
    serving.start()
    try:
        watchers: list[threading.Thread] = []
        for _wait in range(500):  # (the socket is bound before the watch thread starts)
            watchers = [t for t in threading.enumerate() if t.name == "efo-agent-watch"]
            if path.exists() and watchers:
                break
            threading.Event().wait(0.01)
        assert watchers and all(t.daemon for t in watchers)
        path.unlink()
        serving.join(10.0)
        assert not serving.is_alive() and failures == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
