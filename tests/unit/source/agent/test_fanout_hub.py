"""The fan-out agent's rules (agent/hub.py) against a scripted SubscribeToShard: a kept subscription
goes only to a read that starts where it was left, SubscribeToShard calls keep the service's spacing,
a refusal inside the stream is the caller's, reads of one batch settle together, and idle kept
subscriptions are closed."""

from __future__ import annotations

import queue
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent import hub as hub_module
from pyspark_kinesis.source.agent import process, spacing
from pyspark_kinesis.source.agent.hub import SubscriptionHub, SubscriptionRequest
from tests.unit.scripted import SPEC

CONSUMER, SHARD = SPEC.consumer_arn, "shardId-000000000001"


class FakeStream:
    """One subscription's event stream: the events put in its queue, until closed."""

    def __init__(self, refuse: ClientError | None = None) -> None:
        self.events: queue.Queue = queue.Queue()
        self.refuse, self.closed = refuse, False

    def __iter__(self):
        if self.refuse is not None:
            raise self.refuse
        while not self.closed:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            yield {"SubscribeToShardEvent": event}

    def close(self) -> None:
        self.closed = True


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[float, dict]] = []
        self.streams: list[FakeStream] = []
        self.refuse_next: ClientError | None = None

    def subscribe_to_shard(self, **args):
        self.calls.append((time.monotonic(), args))
        stream = FakeStream(self.refuse_next)
        self.refuse_next = None
        self.streams.append(stream)
        return {"EventStream": stream}


def open_(hub: SubscriptionHub, *args, **kwargs):
    return hub.open(SubscriptionRequest(*args, **kwargs))


def event(seqs: list[int], behind: int = 0) -> dict:
    stamp = datetime.now(UTC)
    return {
        "Records": [
            {
                "SequenceNumber": str(s),
                "PartitionKey": "k",
                "Data": b"x",
                "ApproximateArrivalTimestamp": stamp,
            }
            for s in seqs
        ],
        "ContinuationSequenceNumber": str(seqs[-1]) if seqs else "1",
        "MillisBehindLatest": behind,
    }


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr(spacing, "SUBSCRIBE_SPACING_S", 0.05)
    monkeypatch.setattr(spacing, "RESUBSCRIBE_AFTER_S", 0.2)
    monkeypatch.setattr(hub_module, "FIRST_MESSAGE_WAIT_S", 0.1)
    return FakeClient()


def test_a_kept_subscription_goes_only_to_a_read_starting_where_it_was_left(client):
    hub = SubscriptionHub(lambda spec: client)
    held, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=True, batch="t#0")
    assert fresh and len(client.calls) == 1
    hub.keep(held, Position.after("10"))
    again, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("10"), reuse=True, batch="t#1")
    assert again is held and not fresh and len(client.calls) == 1  # continued: no SubscribeToShard
    hub.keep(again, Position.after("20"))
    other, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("15"), reuse=True, batch="t#2")
    assert fresh and other is not held and held.closing  # another position: the kept one is closed
    assert client.calls[-1][1]["StartingPosition"] == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "15",
    }


def test_a_verified_open_starts_at_the_sequence_number_itself(client):
    hub = SubscriptionHub(lambda spec: client)
    open_(hub, SPEC, CONSUMER, SHARD, Position.after("15"), reuse=False, verify=True)
    assert client.calls[-1][1]["StartingPosition"] == {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": "15"}


def test_subscribe_calls_keep_the_service_spacing(client):
    """One call per second per consumer and shard, none within 5 s of the last successful one (here
    scaled down: 0.05 s and 0.2 s)."""
    hub = SubscriptionHub(lambda spec: client)
    for _round in range(3):
        held, _fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=False)
        held.close()
    gaps = [b[0] - a[0] for a, b in zip(client.calls, client.calls[1:], strict=False)]
    assert len(gaps) == 2 and all(g >= 0.19 for g in gaps), gaps


def test_a_refusal_inside_the_stream_is_raised_to_the_read(client):
    hub = SubscriptionHub(lambda spec: client)
    client.refuse_next = ClientError({"Error": {"Code": "ResourceInUseException"}}, "SubscribeToShard")
    with pytest.raises(ClientError, match="ResourceInUse"):
        open_(hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=False)


def test_reads_of_one_batch_settle_together(client):
    """A read waiting for a push ends as soon as another read of its batch on the executor took records."""
    hub = SubscriptionHub(lambda spec: client)
    quiet, _ = open_(
        hub, SPEC, CONSUMER, "shardId-000000000001", Position.trim_horizon(), reuse=False, batch="t#5"
    )
    busy, _ = open_(
        hub, SPEC, CONSUMER, "shardId-000000000002", Position.trim_horizon(), reuse=False, batch="t#5"
    )
    client.streams[1].events.put(event([1, 2]))
    kind, value = hub.next_for(busy, 2.0, settle=True)
    assert kind == "event" and len(value["Records"]) == 2
    began = time.monotonic()
    kind, _value = hub.next_for(quiet, 5.0, settle=True)
    assert kind == "settle" and time.monotonic() - began < 1.0
    other, _ = open_(
        hub, SPEC, CONSUMER, "shardId-000000000003", Position.trim_horizon(), reuse=False, batch="t#6"
    )
    assert hub.next_for(other, 0.2, settle=True)[0] == "idle"  # another batch: nothing to settle on


def test_kept_subscriptions_nobody_takes_are_closed(client, monkeypatch):
    monkeypatch.setattr(hub_module, "MAX_IDLE_S", 0.05)
    hub = SubscriptionHub(lambda spec: client)
    held, _ = open_(hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=False)
    hub.keep(held, Position.after("3"))
    time.sleep(0.1)
    hub.reap()
    assert held.closing and client.streams[0].closed


def test_a_kept_subscription_and_its_agent_outlast_sparks_idle_workers(client, monkeypatch):
    """Spark ends an executor's idle Python workers after a minute: the first batch after a quiet spell
    runs in new workers, and finds the kept subscription (its records already pushed) and the agent
    still there, until the service would end the subscription anyway (5 minutes)."""
    clock = [1000.0]
    monkeypatch.setattr(hub_module, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    hub = SubscriptionHub(lambda spec: client)
    held, _ = open_(hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=False)
    hub.keep(held, Position.after("3"))
    clock[0] += 150.0  # a quiet spell: no batch, and Spark's idle workers are gone
    hub.reap()
    assert not held.closing
    assert process.IDLE_EXIT_S > 150.0  # (nor does the agent end meanwhile)
    again, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("3"), reuse=True)
    assert again is held and not fresh
    hub.keep(again, Position.after("3"))
    clock[0] += 301.0  # past the service's 5 minutes: closed here
    hub.reap()
    assert held.closing


def test_two_queries_with_their_own_consumers_neither_take_nor_settle_each_others_reads(client):
    """Two queries (or two sources of one query) read the same shard through distinct consumers: each
    continues only its own kept subscription, and one's records never end the other's wait."""
    hub = SubscriptionHub(lambda spec: client)
    other = CONSUMER + "-second-query"
    mine, _ = open_(
        hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=False, batch="a#1", relay_key=b"a"
    )
    theirs, _ = open_(
        hub, SPEC, other, SHARD, Position.trim_horizon(), reuse=False, batch="b#1", relay_key=b"b"
    )
    client.streams[0].events.put(event([1, 2]))
    assert hub.next_for(mine, 2.0, settle=True)[0] == "event"
    assert hub.next_for(theirs, 0.3, settle=True)[0] == "idle"  # not settled by the other query's records
    hub.keep(mine, Position.after("2"))
    hub.keep(theirs, Position.trim_horizon())
    again, fresh = open_(
        hub, SPEC, other, SHARD, Position.after("2"), reuse=True, batch="b#2", relay_key=b"b"
    )
    assert fresh and again is not mine and not mine.closing  # its own consumer: a subscription of its own
    assert hub.resume((CONSUMER, SHARD), b"b", Position.after("2"), "b#2") is None  # not with another key
    assert hub.resume((CONSUMER, SHARD), b"a", Position.after("2"), "a#2") is mine


def test_a_read_cut_inside_an_event_keeps_the_subscription_and_the_next_read_gets_the_rest(client):
    """`keep` at a position inside the last event a read took puts that event's records from there
    back in front of the queue: after "2" -> records 3, 4; inside "3" -> records 3, 4 (the read skips
    the aggregate's consumed user records itself); after the event's last record -> nothing."""
    hub = SubscriptionHub(lambda spec: client)
    held, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.trim_horizon(), reuse=True, batch="t#0")
    assert fresh
    client.streams[-1].events.put(event([1, 2, 3, 4]))
    client.streams[-1].events.put(event([5]))

    def next_seqs(held) -> list[str]:
        kind, response = hub.next_for(held, 2.0, settle=False)
        assert kind == "event"
        return response["Records"].seqs.to_pylist()

    assert next_seqs(held) == ["1", "2", "3", "4"]
    hub.keep(held, Position.after("2"))
    again, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("2"), reuse=True, batch="t#1")
    assert again is held and not fresh and next_seqs(again) == ["3", "4"]
    hub.keep(again, Position.inside("3", 1))
    again, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.inside("3", 1), reuse=True, batch="t#2")
    assert again is held and not fresh and next_seqs(again) == ["3", "4"]
    hub.keep(again, Position.after("4"))
    again, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("4"), reuse=True, batch="t#3")
    assert not fresh and next_seqs(again) == ["5"] and len(client.calls) == 1


def test_a_retry_of_a_read_continues_its_kept_subscription_from_where_the_read_started(client):
    """A task failed after its read kept the subscription, before recording its batch end: the retry
    starts where the failed read started. The events that read took come back, from there on, and
    the retry continues the same subscription (a new one within the service's 5 s would be refused:
    batch after batch a retried read then took nothing; found by the chaos suite)."""
    hub = SubscriptionHub(lambda spec: client)
    held, _fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("0"), reuse=True, batch="t#0")
    client.streams[-1].events.put(event([1, 2, 3]))
    client.streams[-1].events.put(event([4, 5]))

    def next_seqs(held) -> list[str]:
        kind, response = hub.next_for(held, 2.0, settle=False)
        assert kind == "event"
        return response["Records"].seqs.to_pylist()

    assert next_seqs(held) == ["1", "2", "3"] and next_seqs(held) == ["4", "5"]
    hub.keep(held, Position.after("4"))  # the read stopped at its limit inside the second event
    retry, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("0"), reuse=True, batch="t#0")
    assert retry is held and not fresh and len(client.calls) == 1
    assert next_seqs(retry) == ["1", "2", "3"] and next_seqs(retry) == ["4", "5"]
    client.streams[-1].events.put(event([6]))
    assert next_seqs(retry) == ["6"]
    # Kept again, where the retry got to; a read from anywhere else subscribes anew.
    hub.keep(retry, Position.after("6"))
    other, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("3"), reuse=True, batch="t#1")
    assert fresh and other is not held and len(client.calls) == 2


def test_a_retry_of_a_verified_read_checks_its_start_again(client):
    """A read that subscribed at S itself to check that S is still there (a start "after S" after a
    restart): its retry gets S back and is answered as a new subscription, so it checks S as its failed
    attempt did and reports the same loss when S aged out (a retry that skipped the check once lost
    the report; found by the chaos suite)."""
    hub = SubscriptionHub(lambda spec: client)
    start = Position.after("5")
    held, fresh = open_(hub, SPEC, CONSUMER, SHARD, start, reuse=True, batch="t#0", verify=True)
    assert fresh
    client.streams[-1].events.put(event([5, 6, 7]))
    _kind, response = hub.next_for(held, 2.0, settle=False)
    assert response["Records"].seqs.to_pylist() == ["5", "6", "7"]
    hub.keep(held, Position.after("6"))
    retry, fresh = open_(hub, SPEC, CONSUMER, SHARD, start, reuse=True, batch="t#0", verify=True)
    assert retry is held and fresh and len(client.calls) == 1
    _kind, response = hub.next_for(retry, 2.0, settle=False)
    assert response["Records"].seqs.to_pylist() == ["5", "6", "7"]


def test_a_long_read_is_not_remembered_for_a_retry_past_the_cap(client, monkeypatch):
    """The events a read took are kept for a retry only up to REWIND_MAX_BYTES (a drained backlog
    read in one go would otherwise sit in the agent): past it, a retry subscribes anew."""
    monkeypatch.setattr(hub_module, "REWIND_MAX_BYTES", 2)
    hub = SubscriptionHub(lambda spec: client)
    held, _fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("0"), reuse=True, batch="t#0")
    client.streams[-1].events.put(event([1, 2, 3]))  # 3 payload bytes
    assert hub.next_for(held, 2.0, settle=False)[0] == "event"
    hub.keep(held, Position.after("3"))
    retry, fresh = open_(hub, SPEC, CONSUMER, SHARD, Position.after("0"), reuse=True, batch="t#0")
    assert fresh and retry is not held and len(client.calls) == 2
