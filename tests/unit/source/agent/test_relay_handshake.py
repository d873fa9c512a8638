"""The relay's handshake and sealed frames, end by end (agent/relay.py): each side of `connect` and
`accept` faces a scripted peer on loopback that answers what a broken, slow or foreign peer would, and
the refusal says which step failed. What a whole read through two agents does is in
test_fanout_relay.py."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from pyspark_kinesis.source.agent import relay
from pyspark_kinesis.source.agent.framing import receive_frame, send_frame
from pyspark_kinesis.source.agent.relay import (
    NONCE,
    RelayBusy,
    RelayRefused,
    SealedChannel,
    accept,
    connect,
    join_address,
    reachable_only_here,
    relay_host,
    split_address,
)

KEY = b"q" * 32


def valid_hello(consumer: str = "c", shard: str = "s", key: bytes = KEY) -> dict[str, Any]:
    """A reader's hello as `connect` sends it: the subscription named, a nonce, the proof over both."""
    nonce = b"\x00" * NONCE
    return {
        "consumer": consumer,
        "shard": shard,
        "nonce": nonce.hex(),
        "proof": relay._hello_proof(key, consumer, shard, nonce).hex(),
    }


def _hello(sock: socket.socket) -> dict[str, Any]:
    body = receive_frame(sock, 1 << 16)
    assert body is not None
    return orjson.loads(body)


@contextlib.contextmanager
def holder(script: Callable[[socket.socket], None]) -> Iterator[str]:
    """A holder on loopback that runs `script` on the one connection it takes; yields its address."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            taken.append(conn)
            conn.settimeout(5.0)
            with contextlib.suppress(OSError):
                script(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for conn in taken:
            conn.close()
        thread.join(5.0)


@contextlib.contextmanager
def accepting(key_for: Callable[[str, str], bytes | None]) -> Iterator[tuple[socket.socket, list[Any]]]:
    """`accept` running on the holder's end of a loopback connection; yields the reader's socket and
    a list that gets accept's result, or the exception it raised."""
    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.create_connection(listener.getsockname(), timeout=5.0)
    conn, _ = listener.accept()
    listener.close()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(accept(conn, key_for))
        except Exception as exc:  # the test reads which
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield reader, outcome
    finally:
        thread.join(5.0)
        reader.close()
        conn.close()


def finished(outcome: list[Any], thread_wait_s: float = 5.0) -> Any:
    deadline = time.monotonic() + thread_wait_s
    while not outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcome, "accept did not finish"
    return outcome[0]


# -- addresses ---------------------------------------------------------------------------------------
def test_addresses_split_and_join_with_ipv6_literals() -> None:
    assert split_address("exec-1:7078") == ("exec-1", 7078)
    assert split_address("[fe80::1]:7078") == ("fe80::1", 7078)  # the port is after the last colon
    assert split_address("[::1]:9") == ("::1", 9)
    assert split_address("XenonX:80") == ("XenonX", 80)  # only brackets are taken off
    assert join_address("fe80::1", 7078) == "[fe80::1]:7078"
    assert join_address("exec-1", 7078) == "exec-1:7078"
    for bad in (":80", "host:", "host:http", "host"):
        with pytest.raises(ValueError, match="not a host:port address"):
            split_address(bad)


def test_loopback_addresses_are_reachable_only_here() -> None:
    assert all(reachable_only_here(h) for h in ("localhost", "127.0.0.1", "127.0.1.1", "::1"))
    assert not any(reachable_only_here(h) for h in ("10.0.0.7", "exec-1", "::2", "fe80::1"))


def test_relay_host_falls_back_to_the_resolved_name_then_loopback(monkeypatch) -> None:
    monkeypatch.delenv("PYSPARK_KINESIS_AGENT_HOST", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    asked: list[str] = []
    monkeypatch.setattr(relay.socket, "gethostname", lambda: "exec-7")

    def resolve(name: str) -> str:
        asked.append(name)
        return "10.1.2.3"

    monkeypatch.setattr(relay.socket, "gethostbyname", resolve)
    assert relay_host() == "10.1.2.3"
    assert asked == ["exec-7"]

    def unresolvable(name: str) -> str:
        raise OSError("no such host")

    monkeypatch.setattr(relay.socket, "gethostbyname", unresolvable)
    assert relay_host() == "127.0.0.1"


def test_busy_says_which_batch_holds_the_subscription() -> None:
    busy = RelayBusy("q#12", 1234)
    assert str(busy) == "the subscription is in use by a read of batch q#12"
    assert (busy.batch, busy.subscribed_ms) == ("q#12", 1234)


# -- proofs and sealed frames -------------------------------------------------------------------------
def test_a_proof_binds_its_role_and_both_nonces() -> None:
    a, b = b"a" * NONCE, b"b" * NONCE
    proof = relay._proof(KEY, b"holder", a, b)
    assert proof == hmac.new(KEY, b"holder" + a + b, hashlib.sha256).digest()
    assert len({proof, relay._proof(KEY, b"reader", a, b), relay._proof(KEY, b"holder", b, a)}) == 3


def sealed_pair() -> tuple[SealedChannel, SealedChannel, socket.socket, socket.socket]:
    left, right = socket.socketpair()
    left.settimeout(5.0)
    right.settimeout(5.0)
    return SealedChannel(left, KEY, client=True), SealedChannel(right, KEY, client=False), left, right


def test_sealed_frames_bind_their_sequence_number_and_direction() -> None:
    reader, holder_end, left, right = sealed_pair()
    try:
        reader.send({"n": 1})
        raw = receive_frame(right, relay.MAX_FRAME)
        assert raw is not None
        payload = raw[relay.TAG :]
        assert payload[:2] == bytes([0x80, pickle.HIGHEST_PROTOCOL])  # the highest pickle protocol
        send_frame(left, raw)  # the holder's end takes the frame as sent
        assert holder_end.receive() == {"n": 1}
        send_frame(left, raw)  # the same frame again: its sequence number is behind
        with pytest.raises(ConnectionError) as dropped:
            holder_end.receive()
        assert str(dropped.value) == "a relay frame failed its integrity check: connection dropped"
    finally:
        left.close()
        right.close()
    reader, holder_end, left, right = sealed_pair()
    try:
        holder_end.send("to the reader")
        raw = receive_frame(left, relay.MAX_FRAME)
        assert raw is not None
        send_frame(left, raw)  # reflected back to the holder: tagged for the other direction
        with pytest.raises(ConnectionError, match="failed its integrity check"):
            holder_end.receive()
    finally:
        left.close()
        right.close()


def test_a_sealed_channel_sets_its_timeout_and_closes_quietly() -> None:
    reader, _, left, right = sealed_pair()
    reader.settimeout(0.75)
    assert left.gettimeout() == 0.75

    class Closing:
        def close(self) -> None:
            raise OSError("already gone")

    SealedChannel(Closing(), KEY, client=True).close()  # type: ignore[arg-type]
    left.close()
    right.close()


# -- the reader's end (`connect`) facing scripted holders ---------------------------------------------
def test_an_unreachable_holder_is_refused_with_its_address() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RelayRefused, match=f"holder 127.0.0.1:{port} not reachable"):
        connect(f"127.0.0.1:{port}", "c", "s", KEY)
    with pytest.raises(RelayRefused, match="holder nonsense not reachable"):
        connect("nonsense", "c", "s", KEY)


def connect_within(address: str, wait_s: float) -> tuple[bool, list[BaseException]]:
    """`connect` in a thread given `wait_s`: whether it was still waiting then, and what it raised."""
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            connect(address, "c", "s", KEY)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(wait_s)
    return thread.is_alive(), outcome


def test_connecting_to_a_holder_whose_backlog_is_full_gives_up_at_the_connect_timeout(monkeypatch) -> None:
    monkeypatch.setattr(relay, "CONNECT_TIMEOUT_S", 0.3)
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    filler = socket.create_connection(listener.getsockname(), timeout=1.0)  # the one slot the queue has
    alive, outcome = connect_within(address, 3.0)
    filler.close()
    listener.close()
    assert not alive, "connect waited past its connect timeout"
    assert isinstance(outcome[0], RelayRefused) and "not reachable" in str(outcome[0])


def test_a_silent_holder_is_given_up_at_the_handshake_timeout(monkeypatch) -> None:
    monkeypatch.setattr(relay, "HANDSHAKE_TIMEOUT_S", 0.3)
    done = threading.Event()
    with holder(lambda conn: done.wait(10.0)) as address:  # takes the connection, never answers
        alive, outcome = connect_within(address, 3.0)
        done.set()
    assert not alive, "connect waited past its handshake timeout"
    assert isinstance(outcome[0], RelayRefused)
    assert f"holder {address}: handshake failed" in str(outcome[0])


def answering(*answers: dict[str, Any], proving: bool = False) -> Callable[[socket.socket], None]:
    """A holder's script: read the hello, send the answers in turn (the first with a good nonce and
    proof when `proving`), reading the reader's proof between them."""

    def script(conn: socket.socket) -> None:
        hello = _hello(conn)
        for number, answer in enumerate(answers):
            if number == 0 and proving:
                mine = os.urandom(NONCE)
                theirs = bytes.fromhex(hello["nonce"])
                answer = {
                    **answer,
                    "nonce": mine.hex(),
                    "proof": relay._proof(KEY, b"holder", theirs, mine).hex(),
                }
            send_frame(conn, orjson.dumps(answer))
            if number + 1 < len(answers):
                _hello(conn)
        with contextlib.suppress(OSError):
            receive_frame(conn, 1 << 16)  # until the reader hangs up

    return script


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"held": False}, "keeps no subscription of s for this query"),
        ({"held": True}, "did not prove it holds this query's subscription"),  # no nonce
        (
            {"held": True, "nonce": "00" * NONCE},
            "did not prove it holds this query's subscription",
        ),  # no proof
        ({"held": True, "nonce": "00" * NONCE, "proof": "11" * 32}, "did not prove it holds"),
        ({"held": True, "nonce": "zz", "proof": "11"}, "handshake failed"),  # not hex
    ],
)
def test_a_holder_that_does_not_hold_or_prove_is_refused(answer: dict[str, Any], why: str) -> None:
    with holder(answering(answer)) as address, pytest.raises(RelayRefused, match=why):
        connect(address, "c", "s", KEY)


@pytest.mark.parametrize(
    ("verdict", "why"),
    [
        ({"ok": False, "why": "busy"}, "refused the read: busy$"),
        ({"ok": False}, "refused the read: no reason$"),
    ],
)
def test_a_holder_that_refuses_the_read_says_why(verdict: dict[str, Any], why: str) -> None:
    with (
        holder(answering({"held": True}, verdict, proving=True)) as address,
        pytest.raises(RelayRefused, match=why),
    ):
        connect(address, "c", "s", KEY)


def test_the_reader_hello_names_the_subscription_with_a_fresh_nonce() -> None:
    hellos: list[dict[str, Any]] = []

    def script(conn: socket.socket) -> None:
        hellos.append(_hello(conn))
        send_frame(conn, orjson.dumps({"held": False}))

    for _ in range(2):
        with holder(script) as address, pytest.raises(RelayRefused):
            connect(address, "arn:consumer", "shardId-7", KEY)
    assert [(h["consumer"], h["shard"]) for h in hellos] == [("arn:consumer", "shardId-7")] * 2
    assert len(bytes.fromhex(hellos[0]["nonce"])) == NONCE and hellos[0]["nonce"] != hellos[1]["nonce"]


# -- the holder's end (`accept`) facing scripted readers -----------------------------------------------
def test_a_hello_without_a_name_asks_for_empty_names() -> None:
    asked: list[tuple[str, str]] = []

    def key_for(consumer: str, shard: str) -> bytes | None:
        asked.append((consumer, shard))
        return None

    with accepting(key_for) as (reader, outcome):
        send_frame(reader, orjson.dumps({"nonce": "00" * NONCE}))
        assert _hello(reader) == {"held": False}
        refused = finished(outcome)
    assert asked == [("", "")]
    assert (
        isinstance(refused, RelayRefused) and str(refused) == "no subscription of  kept here for that reader"
    )


@pytest.mark.parametrize("nonce", ["zz", "00" * (NONCE - 1), None])
def test_a_hello_without_a_proper_nonce_is_not_looked_up(nonce: str | None) -> None:
    asked: list[tuple[str, str]] = []

    def key_for(consumer: str, shard: str) -> bytes | None:
        asked.append((consumer, shard))
        return KEY

    hello = {"consumer": "c", "shard": "s"} | ({} if nonce is None else {"nonce": nonce})
    with accepting(key_for) as (reader, outcome):
        send_frame(reader, orjson.dumps(hello))
        assert _hello(reader) == {"held": False}
        refused = finished(outcome)
    assert asked == []
    assert (
        isinstance(refused, RelayRefused) and str(refused) == "no subscription of s kept here for that reader"
    )


@pytest.mark.parametrize("proof", [None, "zz", "11" * 32, "other key"])
def test_a_stranger_learns_nothing_of_what_the_holder_keeps(proof: str | None) -> None:
    """Issue #61 item 9: before the reader proved it knew the key, the holder answered whether it kept
    the subscription a hello named. Now a hello without the key's proof is answered as one naming
    nothing kept."""
    hello = {"consumer": "c", "shard": "s", "nonce": "00" * NONCE}
    if proof == "other key":
        hello = valid_hello(key=b"x" * 32)
    elif proof is not None:
        hello["proof"] = proof
    with accepting(lambda consumer, shard: KEY) as (reader, outcome):
        send_frame(reader, orjson.dumps(hello))
        assert _hello(reader) == {"held": False}
        refused = finished(outcome)
    assert (
        isinstance(refused, RelayRefused) and str(refused) == "no subscription of s kept here for that reader"
    )


@pytest.mark.parametrize("proof", [None, "zz", "11" * 32])
def test_a_reader_without_the_key_is_refused(proof: str | None) -> None:
    """(a peer that replays a hello it saw, without the key: the second proof, over the holder's fresh
    nonce, fails)"""
    with accepting(lambda consumer, shard: KEY) as (reader, outcome):
        send_frame(reader, orjson.dumps(valid_hello()))
        answer = _hello(reader)
        assert answer["held"] is True
        send_frame(reader, orjson.dumps({} if proof is None else {"proof": proof}))
        assert _hello(reader) == {"ok": False, "why": "wrong proof"}
        refused = finished(outcome)
    assert isinstance(refused, RelayRefused) and str(refused) == "a reader that does not know the query's key"


@pytest.mark.parametrize(
    "frame",
    [None, b"not json", orjson.dumps(["a", "list"])],
    ids=["closed", "not-json", "not-an-object"],
)
def test_a_hello_that_is_not_one_is_refused(frame: bytes | None) -> None:
    with accepting(lambda consumer, shard: KEY) as (reader, outcome):
        if frame is None:
            reader.shutdown(socket.SHUT_WR)
        else:
            send_frame(reader, frame)
        refused = finished(outcome)
    assert isinstance(refused, RelayRefused)
    want = "the peer closed the connection during the handshake" if frame is None else "not a relay handshake"
    assert str(refused) == want


def trickle(sock: socket.socket, body: bytes, gap_s: float, stop: threading.Event) -> None:
    """Send a frame a byte at a time, `gap_s` apart (each wait shorter than the socket's timeout)."""
    for byte in len(body).to_bytes(4, "big") + body:
        if stop.wait(gap_s):
            return
        with contextlib.suppress(OSError):
            sock.sendall(bytes([byte]))


@pytest.mark.parametrize("step", ["hello", "proof"])
def test_the_whole_handshake_is_bounded_however_slowly_bytes_come(monkeypatch, step: str) -> None:
    monkeypatch.setattr(relay, "HANDSHAKE_TIMEOUT_S", 0.6)
    stop = threading.Event()
    hello = orjson.dumps(valid_hello())
    with accepting(lambda consumer, shard: KEY) as (reader, outcome):
        if step == "hello":
            threading.Thread(target=trickle, args=(reader, hello, 0.1, stop), daemon=True).start()
        else:
            send_frame(reader, hello)
            _hello(reader)
            threading.Thread(
                target=trickle, args=(reader, orjson.dumps({"proof": "11" * 32}), 0.1, stop), daemon=True
            ).start()
        result = finished(outcome, thread_wait_s=4.0)
        stop.set()
    assert isinstance(result, TimeoutError)


def test_a_handshake_both_ways_gives_a_session_both_ends_can_use(monkeypatch) -> None:
    asked: list[tuple[str, str]] = []

    def key_for(consumer: str, shard: str) -> bytes | None:
        asked.append((consumer, shard))
        return KEY

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[Any] = []

    def serve() -> None:
        conn, _ = listener.accept()
        accepted.append((conn, accept(conn, key_for)))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    channel = connect(f"127.0.0.1:{listener.getsockname()[1]}", "arn:c", "shardId-1", KEY)
    thread.join(5.0)
    listener.close()
    conn, (served, names, key) = accepted[0]
    try:
        assert asked == [("arn:c", "shardId-1")] and names == ("arn:c", "shardId-1") and key == KEY
        assert conn.gettimeout() == relay.SESSION_IDLE_S
        assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == relay.KEEPALIVE["TCP_KEEPIDLE"]
        channel.send({"from": "reader"})
        assert served.receive() == {"from": "reader"}
        served.send(["events"])
        assert channel.receive() == ["events"]
    finally:
        channel.close()
        served.close()


def test_keepalive_is_set_where_the_platform_has_it(monkeypatch) -> None:
    """Options the platform lacks are skipped, and one it refuses is no error: the session still runs
    (its idle timeout bounds it)."""
    set_: list[tuple[int, int, int]] = []

    class Sock:
        def setsockopt(self, level: int, option: int, value: int) -> None:
            if level == socket.IPPROTO_TCP:
                raise OSError("not supported here")
            set_.append((level, option, value))

    monkeypatch.delattr(relay.socket, "TCP_KEEPCNT")
    relay.keep_alive(Sock())  # type: ignore[arg-type]
    assert set_ == [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]


def test_a_holder_that_trickles_a_well_formed_answer_is_given_up_at_the_handshake_deadline(
    monkeypatch,
) -> None:
    """Issue #61 item 9: the reader's end bounded each wait, not the whole handshake, so a peer at a stale
    holder address that sent a valid answer a byte at a time held the read for ~12 s per attempt."""
    monkeypatch.setattr(relay, "HANDSHAKE_TIMEOUT_S", 0.5)
    stop = threading.Event()
    answer = orjson.dumps({"held": True, "nonce": "00" * NONCE, "proof": "11" * 32, "pad": "x" * 40})

    def script(conn: socket.socket) -> None:
        _hello(conn)
        trickle(conn, answer, 0.05, stop)  # (each byte well within the socket's timeout)

    with holder(script) as address:
        alive, outcome = connect_within(address, 2.5)
        stop.set()
    assert not alive, "connect waited past its handshake deadline"
    assert isinstance(outcome[0], RelayRefused) and "handshake failed" in str(outcome[0])
