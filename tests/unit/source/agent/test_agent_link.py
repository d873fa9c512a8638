"""One read's link to an agent (agent/link.py `AgentLink`, `UnixChannel`) against a scripted channel:
which message each call sends, how long it waits for the answer, and what each kind of answer makes
of the link's state (open, broken, settled, behind) and of the caller's exceptions."""

from __future__ import annotations

import pickle
import socket
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent import link
from pyspark_kinesis.source.agent.framing import receive_frame, send_frame
from pyspark_kinesis.source.agent.link import REPLY_MARGIN_S, AgentLink, SubscriptionEnded, UnixChannel
from pyspark_kinesis.source.agent.relay import RelayBusy, RelayRefused


class Scripted:
    """A channel that answers each message with the next scripted reply (an exception is raised)."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.sent: list[tuple] = []
        self.timeouts: list[float | None] = []
        self.closed = False

    def send(self, message: tuple) -> None:
        self.sent.append(message)

    def receive(self) -> Any:
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def settimeout(self, seconds: float | None) -> None:
        self.timeouts.append(seconds)

    def close(self) -> None:
        self.closed = True


def opened(*replies: Any) -> tuple[AgentLink, Scripted]:
    channel = Scripted(("ok", True, 0), *replies)
    agent = AgentLink(channel=channel)  # type: ignore[arg-type]
    assert agent.open(object()) is True  # type: ignore[arg-type]
    return agent, channel


def test_a_new_link_has_nothing_open_and_keeps_nothing() -> None:
    channel = Scripted()
    agent = AgentLink(channel=channel)  # type: ignore[arg-type]
    assert (agent.broken, agent.open_now, agent.pending, agent.settled, agent.behind) == (
        False,
        False,
        0,
        False,
        -1,
    )
    assert agent.keep(Position.after("5")) == ""  # nothing open: nothing asked
    assert channel.sent == []


def test_a_link_made_for_an_owner_connects_to_that_owners_agent(monkeypatch) -> None:
    owners: list[int | None] = []
    left, right = socket.socketpair()

    def connect_agent(owner: int | None = None) -> socket.socket:
        owners.append(owner)
        return left

    monkeypatch.setattr(link, "connect_agent", connect_agent)
    agent = AgentLink(owner=4321)
    assert owners == [4321] and isinstance(agent.channel, UnixChannel) and agent.channel.sock is left
    left.close()
    right.close()


def test_each_question_waits_its_own_wait_plus_the_reply_margin() -> None:
    agent, channel = opened(("idle", 7, 0), ("event", {"Records": []}, 2))
    assert channel.sent[0][0] == "open" and channel.timeouts == [REPLY_MARGIN_S]
    assert agent.next_event(2.5) is None
    assert agent.next_event(0.25, settle=True) == {"Records": []}
    assert channel.sent[1:] == [("next", 2.5, False), ("next", 0.25, True)]
    assert channel.timeouts[1:] == [2.5 + REPLY_MARGIN_S, 0.25 + REPLY_MARGIN_S]
    assert agent.pending == 2


def test_idle_and_settle_answers_say_how_far_behind_and_whether_the_batch_settled() -> None:
    agent, _ = opened(("settle", "1500", 0), ("idle", 40, 0))
    assert agent.next_event(1.0, settle=True) is None
    assert (agent.settled, agent.behind) == (True, 1500)
    assert agent.next_event(1.0) is None
    assert (agent.settled, agent.behind) == (False, 40)


def test_an_ended_subscription_raises_and_leaves_nothing_to_keep() -> None:
    agent, channel = opened(("end", None, 0))
    with pytest.raises(SubscriptionEnded):
        agent.next_event(1.0)
    assert agent.open_now is False
    assert agent.keep(Position.after("9")) == "" and channel.sent[-1][0] == "next"


def test_keep_sends_the_position_and_returns_where_it_is_kept() -> None:
    agent, channel = opened(("ok", "10.0.0.5:4040@17", 0))
    assert agent.keep(Position.after("9")) == "10.0.0.5:4040@17"
    assert channel.sent[-1] == ("keep", Position.after("9"))
    assert agent.open_now is False
    assert agent.keep(Position.after("9")) == ""  # kept once: nothing open any more
    agent, _ = opened(("ok", None, 0))
    assert agent.keep(Position.after("9")) == ""  # only this executor reaches it


def test_a_broken_or_closed_link_keeps_nothing() -> None:
    agent, channel = opened(OSError("reset"))
    with pytest.raises(ConnectionError, match=r"^enhanced fan-out agent connection failed: reset$"):
        agent.next_event(1.0)
    assert agent.broken is True
    assert agent.keep(Position.after("1")) == "" and channel.sent[-1][0] == "next"
    agent, channel = opened(None)
    with pytest.raises(ConnectionError, match=r"^the enhanced fan-out agent closed the connection$"):
        agent.next_event(1.0)
    assert agent.broken is True and agent.keep(Position.after("1")) == ""
    agent, channel = opened()
    agent.close()
    assert channel.closed and agent.broken is True
    assert agent.keep(Position.after("1")) == "" and len(channel.sent) == 1


def test_refusals_and_errors_close_what_was_open() -> None:
    agent, _ = opened(("refused", "kept elsewhere", 0))
    with pytest.raises(RelayRefused, match=r"^kept elsewhere$"):
        agent.next_event(1.0)
    assert agent.open_now is False
    agent, _ = opened(("busy", ("q#3", "1234"), 0))
    with pytest.raises(RelayBusy) as busy:
        agent.next_event(1.0)
    assert (busy.value.batch, busy.value.subscribed_ms) == ("q#3", 1234) and agent.open_now is False
    error = {"Error": {"Code": "ResourceInUseException", "Message": "in use"}}
    agent, _ = opened(("error", ("client", error, "SubscribeToShard"), 0))
    with pytest.raises(ClientError, match="ResourceInUseException"):
        agent.next_event(1.0)
    assert agent.open_now is False
    agent, _ = opened(("error", ("connector", "no such consumer", ""), 0))
    with pytest.raises(StreamAccessError, match="no such consumer"):
        agent.next_event(1.0)


def test_resume_continues_a_kept_subscription_at_its_position() -> None:
    channel = Scripted(("ok", None, 0), ("ok", "h:1@2", 0))
    agent = AgentLink(channel=channel)  # type: ignore[arg-type]
    agent.resume(Position.after("7"), "q#4")
    assert channel.sent == [("continue", Position.after("7"), "q#4")] and agent.open_now is True
    assert agent.keep(Position.after("8")) == "h:1@2"


def test_a_unix_channel_sends_pickles_and_sees_the_peer_close() -> None:
    left, right = socket.socketpair()
    channel = UnixChannel(left)
    channel.settimeout(4.0)
    assert left.gettimeout() == 4.0
    channel.send(("next", 1.0, False))
    body = receive_frame(right, 1 << 20)
    assert body is not None and body[:2] == bytes([0x80, pickle.HIGHEST_PROTOCOL])
    assert pickle.loads(body) == ("next", 1.0, False)
    send_frame(right, pickle.dumps(("ok", 1, 0)))
    assert channel.receive() == ("ok", 1, 0)
    right.close()
    assert channel.receive() is None
    channel.close()
    channel.close()  # (closing twice is quiet)

    class Closing:
        def close(self) -> None:
            raise OSError("already gone")

    UnixChannel(Closing()).close()  # type: ignore[arg-type]
