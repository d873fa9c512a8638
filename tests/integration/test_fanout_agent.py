"""The executor's fan-out agent on kinesis-local (through the fault proxy that relays SubscribeToShard),
without Spark: a subscription kept by one read is continued by the next read on another connection
(another Python worker) with no new SubscribeToShard, a read from another position gets its own
subscription, the agent ends with its owner, and a killed agent is replaced by the next read."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from pyspark_kinesis.aws import consumers
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent.hub import SubscriptionRequest
from pyspark_kinesis.source.agent.link import AgentLink, socket_path
from pyspark_kinesis.source.agent.spacing import RESUBSCRIBE_AFTER_S
from pyspark_kinesis.source.options import parse_options
from tests.helpers import assert_subscribe_rules, client, new_stream, put
from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.kinesis


@pytest.fixture
def owner():
    """A stand-in for the executor's Python daemon: the agent serves it and ends when it ends."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()


@pytest.fixture
def efo_stream(kinesis_local):
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 1)
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumer = consumers.ensure_consumer(kinesis, arn, f"agent-{uuid.uuid4().hex[:6]}", 60)
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    return kinesis, stream, consumer.arn, shard


def _spec(endpoint: str, stream: str, consumer: str):
    options = {"streamName": stream, "region": "us-east-1", "endpointUrl": endpoint, "metadataPath": "/m"}
    return parse_options(options, streaming=True).streams[0].with_consumer(consumer)


def _open(link: AgentLink, spec, consumer: str, shard: str, position: Position, reuse: bool) -> bool:
    """`link.open`, retried while kinesis-local still holds a closed subscription (it notices the
    close at its next push, and refuses another subscription until then, as readers back off from)."""
    for _attempt in range(15):
        try:
            return link.open(SubscriptionRequest(spec, consumer, shard, position, reuse))
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceInUseException":
                raise
            time.sleep(1.0)
    raise AssertionError("the subscription stayed refused")


def _records(link: AgentLink, want: int, timeout_s: float = 30.0) -> list[str]:
    """Sequence numbers of the next events' records until `want` were seen (whole events)."""
    seqs: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(seqs) < want and time.monotonic() < deadline:
        event = link.next_event(1.0)
        if event is not None:
            seqs += event["Records"].lists()[0]
    return seqs


def _peer_pid(link: AgentLink) -> int:
    pid, _uid, _gid = struct.unpack(
        "3i", link.channel.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    )
    return pid


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_kept_subscription_is_continued_by_the_next_read_in_another_worker(
    kinesis_local, efo_stream, owner
):
    kinesis, stream, consumer, shard = efo_stream
    put(kinesis, stream, 0, 30)
    with FaultProxy(kinesis_local.endpoint) as proxy:
        spec = _spec(proxy.endpoint, stream, consumer)
        first = AgentLink(owner.pid)
        agent = _peer_pid(first)
        assert first.open(
            SubscriptionRequest(spec, consumer, shard, Position.trim_horizon(), reuse=True)
        )  # a new subscription
        seqs = _records(first, 30)
        assert len(seqs) == 30
        end = Position.after(seqs[-1])
        first.keep(end)
        first.close()

        put(kinesis, stream, 30, 20)
        second = AgentLink(owner.pid)  # another connection, as from another Python worker
        assert _peer_pid(second) == agent
        assert not second.open(SubscriptionRequest(spec, consumer, shard, end, reuse=True)), (
            "the kept subscription was not continued"
        )
        more = _records(second, 20)
        assert len(more) == 20 and int(more[0]) > int(seqs[-1])
        second.close()
        assert len(proxy.subscriptions) == 1, proxy.subscriptions

        # A read from another position (a replay) gets a subscription of its own, spaced by the rules.
        third = AgentLink(owner.pid)
        assert _open(third, spec, consumer, shard, Position.trim_horizon(), reuse=True)
        assert len(_records(third, 50)) == 50
        third.close()
        assert_subscribe_rules([(at, outcome) for at, _pid, _c, _s, outcome in proxy.subscriptions])
        assert proxy.subscriptions[-1][4] == "ok"
        assert {pid for _t, pid, *_ in proxy.subscriptions} == {agent}  # the agent subscribes, not the reads


def test_the_agent_ends_with_its_owner_and_a_killed_agent_is_replaced(kinesis_local, efo_stream, owner):
    kinesis, stream, consumer, shard = efo_stream
    put(kinesis, stream, 0, 5)
    proxy = FaultProxy(kinesis_local.endpoint).__enter__()
    spec = _spec(proxy.endpoint, stream, consumer)
    link = AgentLink(owner.pid)
    agent = _peer_pid(link)
    assert link.open(SubscriptionRequest(spec, consumer, shard, Position.trim_horizon(), reuse=False))
    assert len(_records(link, 5)) == 5

    # Killed under a read: the read sees a broken link (it subscribes again through a new link).
    os.kill(agent, signal.SIGKILL)
    assert _wait_gone(agent, 10)
    with pytest.raises(ConnectionError):
        link.next_event(1.0)
    assert link.broken
    replacement = AgentLink(owner.pid)
    successor = _peer_pid(replacement)
    assert successor != agent
    time.sleep(RESUBSCRIBE_AFTER_S)  # the killed agent's subscription was the last successful one
    assert _open(replacement, spec, consumer, shard, Position.trim_horizon(), reuse=True)
    assert len(_records(replacement, 5)) == 5
    replacement.close()

    # The owner (the executor's daemon) ends: so does its agent, leaving no socket behind.
    owner.kill()
    owner.wait()
    assert _wait_gone(successor, 10), "the agent outlived its owner"
    assert not socket_path(owner.pid).exists()
    proxy.__exit__(None, None, None)
