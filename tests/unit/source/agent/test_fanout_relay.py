"""A subscription stays with the agent that opened it, and a read on another executor takes its events
from there (agent/relay.py): two agents in this process stand for two executors' agents, a scripted
SubscribeToShard for the service. Only a read that proves the query run's key gets events, only a
holder that proves it is believed, a tampered frame is dropped, and a read whose holder is lost
subscribes where it runs."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent import hub as hub_module
from pyspark_kinesis.source.agent import link as link_module
from pyspark_kinesis.source.agent import process, relay, spacing
from pyspark_kinesis.source.agent.hub import SubscriptionRequest
from pyspark_kinesis.source.agent.link import AgentLink, UnixChannel
from pyspark_kinesis.source.executor.modes.fanout import FanOutPages, holder_hint
from tests.unit.scripted import SHARD, SPEC, FakeProxy, context, records
from tests.unit.source.agent.test_fanout_hub import FakeClient, event

CONSUMER = SPEC.consumer_arn
KEY = b"k" * 32


@pytest.fixture
def service(monkeypatch):
    monkeypatch.setattr(spacing, "SUBSCRIBE_SPACING_S", 0.05)
    monkeypatch.setattr(spacing, "RESUBSCRIBE_AFTER_S", 0.2)
    monkeypatch.setattr(hub_module, "FIRST_MESSAGE_WAIT_S", 0.1)
    monkeypatch.setattr(process, "IDLE_EXIT_S", 3.0)  # the agents below end on their own
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "127.0.0.1")
    return FakeClient()


def start_agent(client: FakeClient) -> Path:
    """An agent serving in a thread of this process (as one executor's would), on its own socket."""
    path = Path(tempfile.mkdtemp(prefix="relay-", dir="/tmp")) / "agent.sock"
    threading.Thread(
        target=process.serve, args=(str(path), os.getpid(), lambda spec: client), daemon=True
    ).start()
    for _wait in range(500):  # listening once a connection is taken (the socket file comes at bind)
        with contextlib.suppress(OSError), contextlib.closing(socket.socket(socket.AF_UNIX)) as probe:
            probe.connect(str(path))
            return path
        time.sleep(0.01)
    raise AssertionError("the agent did not start")


def address(where: str) -> str:
    """The relay address in a kept subscription's hint (`host:port@ms`)."""
    return holder_hint(where)[0]


def local_link(path: Path) -> AgentLink:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return AgentLink(channel=UnixChannel(sock))


def kept_on(path: Path, client: FakeClient, key: bytes = KEY) -> str:
    """A read on the agent at `path` subscribes, takes one event and keeps the subscription after
    record 2; returns where it was kept."""
    link = local_link(path)
    assert link.open(
        SubscriptionRequest(SPEC, CONSUMER, SHARD, Position.trim_horizon(), False, "t#0", relay_key=key)
    )
    client.streams[-1].events.put(event([1, 2]))
    assert [r for r in link.next_event(2.0)["Records"].seqs.to_pylist()] == ["1", "2"]
    where = link.keep(Position.after("2"))
    link.close()
    return where


def test_a_read_on_another_executor_continues_the_subscription_its_holder_keeps(service):
    where = kept_on(start_agent(service), service)
    assert where.startswith("127.0.0.1:")
    remote = AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY)
    remote.resume(Position.after("2"), "t#1")
    service.streams[-1].events.put(event([3]))
    assert remote.next_event(2.0)["Records"].seqs.to_pylist() == ["3"]
    assert len(service.calls) == 1  # the same subscription: no SubscribeToShard from the second executor
    assert remote.keep(Position.after("3")) == where  # and it stays with its holder
    remote.close()
    again = AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY)
    again.resume(Position.after("3"), "t#2")
    again.close()
    assert len(service.calls) == 1


def test_only_a_read_of_the_same_query_run_gets_in(service):
    where = kept_on(start_agent(service), service)
    # (another run's key is answered as a subscription not kept: a stranger learns nothing of what is)
    with pytest.raises(relay.RelayRefused, match="keeps no subscription"):
        AgentLink.to_holder(address(where), CONSUMER, SHARD, b"x" * 32)
    other_consumer = CONSUMER + "-other"  # another query's consumer: nothing of its own is kept there
    with pytest.raises(relay.RelayRefused, match="keeps no subscription"):
        AgentLink.to_holder(address(where), other_consumer, SHARD, KEY)
    remote = AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY)
    with pytest.raises(relay.RelayRefused, match="not kept at that position"):
        remote.resume(Position.after("1"), "t#1")
    remote.close()
    assert (
        AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY) is not None
    )  # still kept for the right read


def test_a_run_without_a_key_keeps_nothing_for_other_executors(service):
    assert address(kept_on(start_agent(service), service, key=b"")) == ""


def test_a_reader_that_does_not_know_the_key_is_refused_by_the_holder():
    """The holder checks the reader's proof before anything else is read (here a reader that skips
    checking the holder's proof and answers with a made-up one)."""
    server, client = socket.socketpair()
    refused: list[BaseException] = []

    def holder() -> None:
        try:
            relay.accept(server, lambda consumer, shard: KEY)
        except relay.RelayRefused as exc:
            refused.append(exc)

    thread = threading.Thread(target=holder)
    thread.start()
    nonce = b"\x00" * relay.NONCE
    hello = {
        "consumer": "c",
        "shard": "s",
        "nonce": nonce.hex(),
        "proof": relay._hello_proof(KEY, "c", "s", nonce).hex(),
    }
    relay.send_frame(client, relay.orjson.dumps(hello))  # (a hello seen on the wire, replayed)
    assert relay._hello_frame(client)["held"]
    relay.send_frame(client, b'{"proof":"' + b"ab" * 32 + b'"}')
    assert relay._hello_frame(client) == {"ok": False, "why": "wrong proof"}
    thread.join(5)
    assert refused and "does not know" in str(refused[0])
    server.close()
    client.close()


def test_a_tampered_frame_is_dropped_before_it_is_unpickled():
    a, b = socket.socketpair()
    sender = relay.SealedChannel(a, b"s" * 32, client=True)
    receiver = relay.SealedChannel(b, b"s" * 32, client=False)
    sender.send(("next", 1.0, False))
    assert receiver.receive() == ("next", 1.0, False)
    payload = b"\x80\x05N."  # a pickle of None
    relay.send_frame(a, b"\x00" * relay.TAG + payload)
    with pytest.raises(ConnectionError, match="integrity"):
        receiver.receive()
    a.close()
    b.close()


def test_a_read_whose_holder_is_lost_subscribes_where_it_runs(service, monkeypatch):
    """Executor A's agent kept the subscription; the shard's next read runs on executor B. With A
    reachable, B's read continues A's subscription; with A gone, B subscribes itself from the read's
    position (and then holds it)."""
    a_path, b_path = start_agent(service), start_agent(service)
    where = kept_on(a_path, service)
    monkeypatch.setattr(link_module, "socket_path", lambda owner: b_path)  # this worker is on B

    def read_on_b(holder: str, start: Position) -> FanOutPages:
        ctx = replace(context(FakeProxy(), seconds=2.0), holder=holder, relay_key=KEY)
        pages = FanOutPages(ctx)
        assert pages.open(start, verify=False, reuse=True) is (holder != where)
        return pages

    pages = read_on_b(where, Position.after("2"))
    service.streams[-1].events.put(event([3]))
    assert pages.next_page(100).records.seqs.to_pylist() == ["3"]
    assert pages.keep(Position.after("3")) == where and len(service.calls) == 1
    pages.close()
    with contextlib.closing(socket.socket()) as probe:  # a port nothing listens on: the holder is lost
        probe.bind(("127.0.0.1", 0))
        lost = f"127.0.0.1:{probe.getsockname()[1]}"
    pages = read_on_b(lost, Position.after("3"))
    assert len(service.calls) == 2 and service.calls[-1][1]["StartingPosition"] == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "3",
    }
    service.streams[-1].events.put(event([4]))
    assert pages.next_page(100).records.seqs.to_pylist() == ["4"]
    b_where = pages.keep(Position.after("4"))
    assert b_where.startswith("127.0.0.1:") and b_where != where  # B holds it now
    pages.close()


def test_a_read_whose_holder_is_lost_keeps_the_spacing_from_the_holders_subscription(service, monkeypatch):
    """SubscribeToShard is refused within 5 s (here 0.2 s) of the last successful one for the consumer
    and shard, whichever executor made it: a read on B whose holder A is lost learns from the hint when
    A subscribed, and B's agent waits out the rest before it subscribes."""
    a_path, b_path = start_agent(service), start_agent(service)
    where = kept_on(a_path, service)
    monkeypatch.setattr(link_module, "socket_path", lambda owner: b_path)
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        lost = f"127.0.0.1:{probe.getsockname()[1]}@{holder_hint(where)[1]}"
    pages = FanOutPages(replace(context(FakeProxy(), seconds=2.0), holder=lost, relay_key=KEY))
    assert pages.open(Position.after("2"), verify=False, reuse=True) is True
    pages.close()
    (a_call, _a), (b_call, _b) = service.calls
    assert b_call - a_call >= 0.19, b_call - a_call


def test_a_remote_read_may_pause_longer_than_the_handshake_may_take(service, monkeypatch):
    """The handshake is bounded in time; the conversation after it is paced by the read (a backoff
    between two asks must not cost the subscription)."""
    monkeypatch.setattr(relay, "HANDSHAKE_TIMEOUT_S", 0.6)
    where = kept_on(start_agent(service), service)
    remote = AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY)
    time.sleep(1.0)
    remote.resume(Position.after("2"), "t#1")
    time.sleep(1.0)
    service.streams[-1].events.put(event([3]))
    assert remote.next_event(2.0)["Records"].seqs.to_pylist() == ["3"]
    assert len(service.calls) == 1
    remote.close()


def listening_ports() -> set[int]:
    """The TCP ports this process listens on (the agents here serve in threads of this process)."""
    import psutil

    return {
        c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN
    }


def test_the_relay_listens_only_while_a_query_run_that_enables_it_uses_the_agent(service, monkeypatch):
    """fanOutRelay=false (a read with no key) opens no port; a keyed read opens the listener, which
    closes again once no keyed subscription has been used for RELAY_IDLE_S."""
    monkeypatch.setattr(process, "RELAY_IDLE_S", 0.5)
    before = listening_ports()  # (other tests' agents may close theirs meanwhile, never open one)
    path = start_agent(service)
    assert address(kept_on(path, service, key=b"")) == ""
    assert listening_ports() <= before, "an agent whose reads do not use the relay listens on a port"
    link = local_link(path)
    link.open(SubscriptionRequest(SPEC, CONSUMER, SHARD, Position.after("2"), False, "t#1", relay_key=KEY))
    opened = listening_ports() - before
    assert len(opened) == 1, "a read of a query run with the relay on did not start the listener"
    link.close()  # nothing kept: the relay has nothing left to hand
    for _wait in range(40):
        if not opened & listening_ports():
            break
        time.sleep(0.1)
    assert not opened & listening_ports(), "the listener stayed open with no query run using it"


def test_peers_that_trickle_or_say_nothing_cannot_hold_the_agent(service, monkeypatch):
    """Many connections that never finish a handshake: at most MAX_HANDSHAKES get a thread, each for
    HANDSHAKE_TIMEOUT_S in all (a byte every while does not extend it); the rest are closed at once.
    Meanwhile this executor's own reads go on, and a real reader gets in once the deadline has freed
    the slots."""
    monkeypatch.setattr(relay, "HANDSHAKE_TIMEOUT_S", 0.8)
    path = start_agent(service)
    where = kept_on(path, service)
    host, port = relay.split_address(address(where))
    baseline = threading.active_count()
    peers = []
    for _n in range(3 * process.MAX_HANDSHAKES):
        peer = socket.create_connection((host, port), timeout=2)
        peer.sendall(b"\x00")  # the first byte of a frame's length, then a byte every 0.2 s
        peers.append(peer)
    time.sleep(0.2)
    assert threading.active_count() <= baseline + process.MAX_HANDSHAKES + 1

    # A trickling peer is cut at the deadline, not kept alive by its bytes.
    started, closed_at = time.monotonic(), None
    for _tick in range(30):
        try:
            peers[0].sendall(b"\x00")
            peers[0].settimeout(0.2)
            if peers[0].recv(1) == b"":
                closed_at = time.monotonic()
                break
        except TimeoutError:
            continue
        except OSError:
            closed_at = time.monotonic()
            break
    assert closed_at is not None and closed_at - started < 2.5, "a trickling peer held its handshake"

    # The executor's own reads do not wait for the peers.
    local = local_link(path)
    local.open(SubscriptionRequest(SPEC, CONSUMER, SHARD, Position.after("2"), True, "t#1", relay_key=KEY))
    service.streams[-1].events.put(event([3]))
    assert local.next_event(2.0)["Records"].seqs.to_pylist() == ["3"]
    where = local.keep(Position.after("3"))
    local.close()
    for peer in peers:
        peer.close()
    time.sleep(1.0)  # every handshake slot is free again by its deadline
    remote = AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY)
    remote.resume(Position.after("3"), "t#2")
    remote.close()


def test_a_remote_session_that_goes_silent_ends_and_closes_its_subscription(service, monkeypatch):
    """A reader whose host vanished (no FIN, no RST) leaves a silent session: it ends after
    SESSION_IDLE_S and its subscription is closed, instead of holding both for the agent's life."""
    monkeypatch.setattr(relay, "SESSION_IDLE_S", 0.5)
    where = kept_on(start_agent(service), service)
    remote = AgentLink.to_holder(address(where), CONSUMER, SHARD, KEY)
    remote.resume(Position.after("2"), "t#1")
    stream = service.streams[-1]
    for _wait in range(30):  # the reader says nothing more
        if stream.closed:
            break
        time.sleep(0.1)
    assert stream.closed, "a silent remote session kept its subscription"
    remote.channel.close()


def test_relay_sessions_use_tcp_keepalive():
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as sock:
        relay.keep_alive(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == relay.KEEPALIVE["TCP_KEEPIDLE"]


def test_a_subscription_continued_from_a_holder_that_ends_is_opened_again_where_the_read_runs(
    service, monkeypatch
):
    """Kinesis ends every subscription after 5 minutes. A read on B that continued A's subscription
    through the relay, when it ends, subscribes anew through B's own agent: the relay link only
    continues what A kept (asking it for a new subscription was refused, and failed the task)."""
    a_path, b_path = start_agent(service), start_agent(service)
    where = kept_on(a_path, service)
    monkeypatch.setattr(link_module, "socket_path", lambda owner: b_path)  # this worker is on B
    pages = FanOutPages(replace(context(FakeProxy(), seconds=2.0), holder=where, relay_key=KEY))
    assert pages.open(Position.after("2"), verify=False, reuse=True) is False  # A's, continued
    service.streams[-1].events.put(event([3]))
    assert pages.next_page(100).records.seqs.to_pylist() == ["3"]
    pages.open(Position.after("3"), verify=False, reuse=False)  # (after the service ended A's)
    assert len(service.calls) == 2 and service.calls[-1][1]["StartingPosition"] == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "3",
    }
    service.streams[-1].events.put(event([4]))
    assert pages.next_page(100).records.seqs.to_pylist() == ["4"]
    assert pages.keep(Position.after("4")) != where  # B holds the new one
    pages.close()


def test_where_the_relay_listens(monkeypatch):
    """A wildcard names no address other executors could use: no relay (each subscribes for itself);
    an explicit address wins; a host name that resolves to loopback is only reachable on this host."""
    monkeypatch.delenv("PYSPARK_KINESIS_AGENT_HOST", raising=False)
    monkeypatch.setenv("SPARK_LOCAL_IP", "0.0.0.0")
    assert relay.relay_host() == ""
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "10.1.2.3")
    assert relay.relay_host() == "10.1.2.3"
    monkeypatch.delenv("PYSPARK_KINESIS_AGENT_HOST")
    monkeypatch.delenv("SPARK_LOCAL_IP")
    monkeypatch.setattr(relay.socket, "gethostbyname", lambda name: "127.0.1.1")
    assert relay.relay_host() == "127.0.1.1" and relay.reachable_only_here("127.0.1.1")
    assert not relay.reachable_only_here("10.1.2.3")


def test_an_agent_with_a_wildcard_address_relays_nothing_and_says_why(service, monkeypatch, caplog):
    monkeypatch.setenv("PYSPARK_KINESIS_AGENT_HOST", "0.0.0.0")
    before = listening_ports()
    path = start_agent(service)
    with caplog.at_level("WARNING", logger="pyspark_kinesis.source.agent"):
        assert address(kept_on(path, service)) == ""  # a keyed read: the relay would start here
    assert listening_ports() <= before
    assert any("wildcard" in r.getMessage() for r in caplog.records)


def test_a_second_attempt_of_a_read_whose_subscription_is_in_use_reads_by_get_records(service, monkeypatch):
    """Spark speculates a slow read on another executor. The first attempt (on A) holds the shard's
    subscription; a second subscription from B would take it from A (the service keeps one per consumer
    and shard, and refuses a second within 5 s), and A would subscribe back. So the second attempt of
    the same batch's read takes its records by GetRecords, and hands the shard's next read back to A;
    a read of another batch that finds it in use still subscribes where it runs."""
    a_path, b_path = start_agent(service), start_agent(service)
    where = kept_on(a_path, service)
    first = local_link(a_path)  # the first attempt of batch tok#7's read, on A
    assert (
        first.open(
            SubscriptionRequest(SPEC, CONSUMER, SHARD, Position.after("2"), True, "tok#7", relay_key=KEY)
        )
        is False
    )
    monkeypatch.setattr(link_module, "socket_path", lambda owner: b_path)  # the second attempt, on B
    answer = {"Records": records(["3", "4"]), "MillisBehindLatest": 0, "NextShardIterator": "it-next"}
    proxy = FakeProxy(answers=[answer])
    pages = FanOutPages(replace(context(proxy, seconds=2.0), holder=where, relay_key=KEY))
    assert pages.open(Position.after("2"), verify=False, reuse=True) is True
    assert proxy.calls[0] == ("GetShardIterator", Position.after("2"))
    assert pages.next_page(100).records.seqs.to_pylist() == ["3", "4"]
    assert pages.keep(Position.after("4")) == where  # the holder keeps the shard's subscription
    pages.close()
    assert len(service.calls) == 1  # no SubscribeToShard from B
    other = FanOutPages(
        replace(context(FakeProxy(), seconds=2.0), holder=where, relay_key=KEY, batch_key="tok#8")
    )
    assert other.open(Position.after("2"), verify=False, reuse=True) is True
    other.close()
    assert len(service.calls) == 2  # (not a second attempt: it subscribes, as before)
    first.close()


def test_a_read_whose_holder_is_its_own_executors_agent_continues_over_the_local_link(service, monkeypatch):
    """Issue #61 item 7: a read tried its holder over TCP even when the holder was its own executor's
    agent, so strangers flooding the relay port (or a relay slow to answer) sent it to a new
    subscription behind the service's 5 s spacing. Now the agent says whether an address is its own,
    and such a read continues the kept subscription over the Unix socket: no relay connection at all."""
    a_path = start_agent(service)
    where = kept_on(a_path, service)
    monkeypatch.setattr(link_module, "socket_path", lambda owner: a_path)  # this worker is on A too
    tcp: list[str] = []
    monkeypatch.setattr(relay, "connect", lambda *args: tcp.append(args[0]) or pytest.fail("over TCP"))
    pages = FanOutPages(replace(context(FakeProxy(), seconds=2.0), holder=where, relay_key=KEY))
    assert pages.open(Position.after("2"), verify=False, reuse=True) is False  # the kept one, continued
    service.streams[-1].events.put(event([3]))
    assert pages.next_page(100).records.seqs.to_pylist() == ["3"]
    assert tcp == [] and len(service.calls) == 1
    assert pages.keep(Position.after("3")) == where
    pages.close()
    other = local_link(a_path)
    assert (
        other.is_agent_at(address(where))
        and not other.is_agent_at("127.0.0.1:1")
        and not other.is_agent_at("")
    )
    other.close()
