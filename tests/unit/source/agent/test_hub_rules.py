"""The fan-out agent's rules one at a time (agent/hub.py): what a held subscription queues, remembers
and hands back (`HeldSubscription`), and what the hub's bookkeeping decides (which subscription a
read continues, who is busy, when the agent counts as idle), against scripted event streams and a
scripted clock where a rule depends on time. The rules working together are in test_fanout_hub.py."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent import event_queue
from pyspark_kinesis.source.agent import hub as hub_module
from pyspark_kinesis.source.agent.hub import HeldSubscription, SubscriptionHub, SubscriptionRequest, _from
from pyspark_kinesis.source.agent.spacing import Spacing
from tests.unit.scripted import SPEC
from tests.unit.source.agent.test_fanout_hub import FakeClient, event

CONSUMER, SHARD = SPEC.consumer_arn, "shardId-000000000009"
KEY = (CONSUMER, SHARD)


class Finite:
    """An event stream that pushes the events given (more may be added), then ends when told to."""

    def __init__(self, *events: dict) -> None:
        self.events: queue.Queue = queue.Queue()
        for e in events:
            self.events.put(e)
        self.closed = False
        self.close_fails = False

    def __iter__(self):
        while not self.closed:
            try:
                item = self.events.get(timeout=0.02)
            except queue.Empty:
                continue
            if item is None:
                return
            yield {"SubscribeToShardEvent": item}

    def close(self) -> None:
        self.closed = True
        if self.close_fails:
            raise RuntimeError("the connection was already reset")


class Client:
    """subscribe_to_shard answering with the next stream given (a ClientError is raised)."""

    def __init__(self, *streams: Finite | ClientError) -> None:
        self.streams = list(streams)
        self.calls: list[dict] = []

    def subscribe_to_shard(self, **args: Any) -> dict:
        self.calls.append(args)
        stream = self.streams.pop(0)
        if isinstance(stream, ClientError):
            raise stream
        return {"EventStream": stream}


def held_on(stream: Finite) -> HeldSubscription:
    from pyspark_kinesis.aws.subscribe import Subscription

    return HeldSubscription(KEY, Subscription(Client(stream), CONSUMER, SHARD, Position.trim_horizon()))


def seqs(item: tuple[str, Any] | None) -> list[str]:
    assert item is not None and item[0] == "event", item
    return item[1]["Records"].seqs.to_pylist()


def eventually(check, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(hub_module, "FIRST_MESSAGE_WAIT_S", 0.2)
    from pyspark_kinesis.source.agent import spacing

    monkeypatch.setattr(spacing, "SUBSCRIBE_SPACING_S", 0.0)
    monkeypatch.setattr(spacing, "RESUBSCRIBE_AFTER_S", 0.0)


# -- `_from`: an event's records from a position on --------------------------------------------------
def test_the_rest_of_an_event_keeps_its_other_members() -> None:
    response = held_on(Finite(event([1, 2, 3], behind=77))).take(2.0)
    assert response is not None
    whole = response[1]
    assert _from(whole, Position.after("0")) is whole  # nothing to cut: the event itself
    rest = _from(whole, Position.after("1"))
    assert rest is not None and rest["Records"].seqs.to_pylist() == ["2", "3"]
    assert {k: v for k, v in rest.items() if k != "Records"} == {
        k: v for k, v in whole.items() if k != "Records"
    }
    assert _from(whole, Position.after("3")) is None
    assert _from(whole, Position.trim_horizon()) is whole


# -- `HeldSubscription` -----------------------------------------------------------------------------
def test_a_new_held_subscription_is_unclaimed_and_remembers_nothing() -> None:
    before = time.monotonic()
    held = held_on(Finite())
    assert held.position is None and held.batch == "" and held.relay_key == b""
    assert held.behind == -1 and held.subscribed_ms == 0
    assert held.read.start is None and held.read.verified is False and held.read.events == []
    assert held.read.bytes == 0 and held.read.last_event is None and held.read.requeued is False
    assert held.closing is False and before <= held.since <= time.monotonic()
    pumps = [t for t in threading.enumerate() if t.name == f"efo-{SHARD}"]
    assert pumps and all(t.daemon for t in pumps)  # its pump never keeps the agent alive
    held.close()


def test_events_are_stamped_when_received_and_the_end_follows_them() -> None:
    stream = Finite(event([1]), None)
    held = held_on(stream)
    before = time.time()
    item = held.take(2.0)
    assert seqs(item) == ["1"]
    assert item is not None and before - 5 <= item[1]["ReceivedAt"] <= time.time()
    assert held.take(2.0) == ("end", None)


def test_the_pump_reads_ahead_only_so_far(monkeypatch) -> None:
    monkeypatch.setattr(event_queue, "QUEUE_EVENTS", 2)
    stream = Finite(*(event([n]) for n in range(1, 6)), None)
    held = held_on(stream)
    assert eventually(lambda: held.pending == 2)
    time.sleep(0.2)
    assert held.pending == 2  # the rest waits in the stream (TCP holds the service back)
    taken = [seqs(held.take(2.0)) for _ in range(5)]
    assert taken == [["1"], ["2"], ["3"], ["4"], ["5"]] and held.take(2.0) == ("end", None)


def test_a_subscription_nobody_takes_from_is_closed_with_an_error(monkeypatch) -> None:
    monkeypatch.setattr(event_queue, "QUEUE_EVENTS", 1)
    monkeypatch.setattr(event_queue, "MAX_QUEUE_WAITS", 2)  # (x 0.5 s)
    stream = Finite(event([1]), event([2]))
    held = held_on(stream)
    assert eventually(lambda: held.closing, within_s=2.5), "not closed after its waits"
    assert stream.closed
    assert seqs(held.take(1.0)) == ["1"]
    kind, error = held.take(1.0) or ("", None)
    assert kind == "error" and isinstance(error, TimeoutError)
    assert str(error) == "no read took this subscription's events for an hour"
    assert held.take(0.3) is None  # its pump stopped there: no end after the error


def test_a_closed_subscription_stops_its_pump_without_an_end(monkeypatch) -> None:
    monkeypatch.setattr(event_queue, "QUEUE_EVENTS", 1)
    stream = Finite(event([1]), event([2]), event([3]), None)
    held = held_on(stream)
    assert eventually(lambda: held.pending == 1)
    held.close()
    pumps = [t for t in threading.enumerate() if t.name == f"efo-{SHARD}"]
    for pump in pumps:
        pump.join(3.0)
    assert seqs(held.take(0.1)) == ["1"] and held.take(0.1) is None  # no more events, and no "end"


def test_closing_a_dead_connection_is_quiet() -> None:
    stream = Finite()
    stream.close_fails = True
    held = held_on(stream)
    held.close()
    assert held.closing


def test_a_peek_leaves_the_event_and_the_state_alone() -> None:
    held = held_on(Finite(event([1, 2], behind=900)))
    first = held.take(2.0, peek=True)
    assert held.take(2.0, peek=True) is first and held.pending == 1
    assert held.behind == -1 and held.read.last_event is None
    held.read.requeued = True
    assert held.take(2.0) is first
    assert held.behind == 900 and held.read.last_event is first[1] and held.read.requeued is False


def test_behind_is_minus_one_for_an_event_that_does_not_say() -> None:
    plain = event([1])
    del plain["MillisBehindLatest"]
    held = held_on(Finite(event([1], behind=5), plain))
    held.take(2.0)
    assert held.behind == 5
    held.take(2.0)
    assert held.behind == -1


def test_a_take_returns_as_soon_as_an_event_comes() -> None:
    stream = Finite()
    held = held_on(stream)
    threading.Timer(0.2, lambda: stream.events.put(event([1]))).start()
    began = time.monotonic()
    assert seqs(held.take(10.0)) == ["1"]
    assert time.monotonic() - began < 5.0  # (not the whole wait)


def test_a_read_remembers_its_events_up_to_the_cap_counted_over_the_whole_read(monkeypatch) -> None:
    monkeypatch.setattr(hub_module, "REWIND_MAX_BYTES", 4)
    held = held_on(Finite(event([1, 2]), event([3, 4]), event([5])))  # 1 payload byte a record
    held.hand_to("", Position.after("0"))
    held.take(2.0)
    held.take(2.0)
    assert held.read.bytes == 4 and len(held.read.events) == 2  # at the cap: still remembered
    held.take(2.0)
    assert held.read.start is None and held.read.events == []  # past it: no rewind for this read
    held.hand_to("", Position.after("5"))
    assert held.read.bytes == 0 and held.read.verified is False and held.read.last_event is None


def test_requeueing_after_the_last_event_puts_back_nothing() -> None:
    held = held_on(Finite(event([1, 2])))
    assert held.requeue_after(Position.after("1")) == 0  # nothing taken yet
    held.take(2.0)
    assert held.requeue_after(Position.after("2")) == 0 and held.read.requeued is False
    assert held.requeue_after(Position.after("1")) == 1 and held.read.requeued is True


def test_a_rewind_keeps_events_pushed_since_and_forgets_the_read() -> None:
    stream = Finite(event([1, 2]))
    held = held_on(stream)
    held.hand_to("", Position.after("0"))
    assert seqs(held.take(2.0)) == ["1", "2"]
    assert held.requeue_after(Position.after("2")) == 0  # the read ended at the event's end
    assert held.rewind(Position.after("0"))  # nothing waits in the queue: nothing to drop
    assert held.read.requeued is False and held.read.events == []
    assert seqs(held.take(2.0)) == ["1", "2"]
    held.close()


def test_a_rewind_leaves_an_event_pushed_after_the_read() -> None:
    stream = Finite(event([1, 2]))
    held = held_on(stream)
    held.hand_to("", Position.after("0"))
    assert seqs(held.take(2.0)) == ["1", "2"]
    assert held.requeue_after(Position.after("2")) == 0 and held.read.requeued is False
    stream.events.put(event([3]))
    assert eventually(lambda: held.pending == 1)  # pushed since, not taken by the read
    assert held.rewind(Position.after("0"))
    assert [seqs(held.take(2.0)) for _ in range(2)] == [["1", "2"], ["3"]]
    held.close()


# -- `SubscriptionHub` ------------------------------------------------------------------------------
class Clock:
    """time's stand-in for the hub: monotonic() and time() as set."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def request(position: Position, **kwargs: Any) -> SubscriptionRequest:
    return SubscriptionRequest(SPEC, CONSUMER, SHARD, position, kwargs.pop("reuse", True), **kwargs)


class Recording(Spacing):
    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[tuple[str, str], bool]] = []

    def answered(self, key, ok):  # type: ignore[override]
        self.answers.append((key, ok))
        super().answered(key, ok)


def test_a_new_hub_is_idle_until_a_read_enters(monkeypatch) -> None:
    hub = SubscriptionHub(lambda spec: None)
    assert hub.relayed_at == float("-inf")
    clock = Clock()
    monkeypatch.setattr(hub_module, "time", clock)
    hub.idle_since = 5.0
    hub.reap()
    assert hub.idle_since == 5.0  # no read, nothing kept: idle since then
    hub.enter()
    hub.enter()
    hub.leave()
    hub.idle_since = 5.0
    hub.reap()
    assert hub.idle_since == clock.now  # one read still in
    hub.leave()
    hub.idle_since = 5.0
    hub.reap()
    assert hub.idle_since == 5.0


def test_subscribing_asks_for_the_consumer_and_shard_with_the_streams_client() -> None:
    client = FakeClient()
    specs: list[Any] = []
    hub = SubscriptionHub(lambda spec: specs.append(spec) or client)
    before = time.time()
    held, fresh = hub.open(request(Position.trim_horizon(), batch="t#1"))
    assert fresh and specs == [SPEC]
    assert client.calls[-1][1]["ConsumerARN"] == CONSUMER and client.calls[-1][1]["ShardId"] == SHARD
    assert before * 1000 - 1 <= held.subscribed_ms <= time.time() * 1000 + 1
    held.close()


def test_the_spacing_hears_every_answer() -> None:
    """A refusal of the call, one inside the stream, and an acceptance: each is told to the spacing
    (it counts from the answer; an acceptance also starts the service's 5 s)."""

    class Refusing(FakeClient):
        def subscribe_to_shard(self, **args: Any) -> dict:
            if not self.calls:
                self.calls.append((time.monotonic(), args))
                raise ClientError({"Error": {"Code": "LimitExceededException"}}, "SubscribeToShard")
            return super().subscribe_to_shard(**args)

    client = Refusing()
    hub = SubscriptionHub(lambda spec: client)
    hub.spacing = Recording()
    with pytest.raises(ClientError, match="LimitExceeded"):
        hub.open(request(Position.trim_horizon(), reuse=False))
    client.refuse_next = ClientError({"Error": {"Code": "ResourceInUseException"}}, "SubscribeToShard")
    with pytest.raises(ClientError, match="ResourceInUse"):
        hub.open(request(Position.trim_horizon(), reuse=False))
    held, _ = hub.open(request(Position.trim_horizon(), reuse=False))
    assert hub.spacing.answers == [(KEY, False), (KEY, False), (KEY, True)]
    held.close()


def test_the_first_event_waits_for_the_read() -> None:
    client = Client(Finite(event([1, 2])))
    hub = SubscriptionHub(lambda spec: client)
    held, fresh = hub.open(request(Position.trim_horizon()))
    assert fresh and seqs(hub.next_for(held, 2.0, settle=False)) == ["1", "2"]  # not eaten by the open
    held.close()


def test_only_a_reusing_read_continues_a_kept_subscription() -> None:
    client = Client(Finite(), Finite())
    hub = SubscriptionHub(lambda spec: client)
    held, _ = hub.open(request(Position.trim_horizon(), relay_key=b"k"))
    hub.keep(held, Position.after("3"))
    again, fresh = hub.open(request(Position.after("3"), reuse=False, relay_key=b"k"))
    assert fresh and again is not held and held.closing
    again.close()


def test_a_continued_subscription_is_busy_with_its_batch_and_can_be_retried() -> None:
    stream = Finite(event([4, 5]))
    client = Client(Finite(), stream)
    hub = SubscriptionHub(lambda spec: client)
    first, _ = hub.open(request(Position.trim_horizon(), batch="t#1", relay_key=b"k"))
    first.close()
    held, _ = hub.open(request(Position.after("3"), batch="t#1", relay_key=b"k"))
    hub.keep(held, Position.after("3"))
    again, fresh = hub.open(request(Position.after("3"), batch="t#2", relay_key=b"k"))
    assert again is held and not fresh
    assert hub.busy(KEY, b"k") == ("t#2", held.subscribed_ms)
    assert seqs(hub.next_for(again, 2.0, settle=False)) == ["4", "5"]
    hub.keep(again, Position.after("5"))
    retry, fresh = hub.open(request(Position.after("3"), batch="t#2", relay_key=b"k"))  # where t#2 started
    assert retry is held and not fresh and seqs(hub.next_for(retry, 2.0, settle=False)) == ["4", "5"]
    retry.close()
    assert hub.busy(KEY, b"k") is None  # closing: not busy any more


def test_a_verified_reads_retries_stay_verified() -> None:
    client = Client(Finite(event([5, 6])))
    hub = SubscriptionHub(lambda spec: client)
    start = Position.after("5")
    held, fresh = hub.open(request(start, batch="t#0", verify=True))
    assert fresh and seqs(hub.next_for(held, 2.0, settle=False)) == ["5", "6"]
    for _attempt in range(2):
        hub.keep(held, Position.after("6"))
        retry, fresh = hub.open(request(start, batch="t#0", verify=True))
        assert retry is held and fresh and held.read.verified is True and held.read.start == start
        assert held.batch == "t#0"
        assert seqs(hub.next_for(retry, 2.0, settle=False)) == ["5", "6"]
    held.close()


class BrokenAtOnce:
    """An event stream whose connection breaks before its first event: the service took the call."""

    def __iter__(self):
        from urllib3.exceptions import ProtocolError

        raise ProtocolError("Connection broken: reset by peer")
        yield  # (a generator, as botocore's event stream is)

    def close(self) -> None:
        pass


def test_a_connection_broken_right_after_the_answer_is_a_subscription_the_service_took() -> None:
    """Found by the chaos run of 2026-11-29 (seed 10, fan-out, subscriptions reset by the proxy): the
    agent counted a subscription whose connection broke before its first event as refused, and
    subscribed again 1 s later, inside the service's 5 s after a successful call."""
    from urllib3.exceptions import ProtocolError

    hub = SubscriptionHub(lambda spec: Client(BrokenAtOnce()))  # type: ignore[arg-type]
    hub.spacing = Recording()
    with pytest.raises(ProtocolError):
        hub.open(request(Position.trim_horizon(), reuse=False))
    assert hub.spacing.answers == [(KEY, True)]


def test_a_call_that_broke_may_have_been_taken_and_a_refusal_was_not() -> None:
    """Found by the second chaos run of 2026-11-29 (seed 10, run 4): a SubscribeToShard whose
    connection broke before its answer was read was counted as refused, and the agent subscribed again
    1 s later; the service may have taken it (and then refuses another call within 5 s)."""
    from botocore.exceptions import ConnectionClosedError

    class Breaking(FakeClient):
        def subscribe_to_shard(self, **args: Any) -> dict:
            raise ConnectionClosedError(endpoint_url="http://127.0.0.1:9")

    hub = SubscriptionHub(lambda spec: Breaking())
    hub.spacing = Recording()
    with pytest.raises(ConnectionClosedError):
        hub.open(request(Position.trim_horizon(), reuse=False))
    assert hub.spacing.answers == [(KEY, True)]
    assert hub_module.refused(ClientError({"Error": {"Code": "LimitExceededException"}}, "SubscribeToShard"))
    assert not hub_module.refused(ConnectionClosedError(endpoint_url="http://127.0.0.1:9"))


def test_a_newer_kept_subscription_closes_the_one_kept_before() -> None:
    client = Client(Finite(), Finite())
    hub = SubscriptionHub(lambda spec: client)
    old, _ = hub.open(request(Position.trim_horizon(), reuse=False))
    new, _ = hub.open(request(Position.trim_horizon(), reuse=False))
    hub.keep(old, Position.after("1"))
    hub.keep(old, Position.after("2"))  # kept again: not closed by itself
    assert not old.closing
    hub.keep(new, Position.after("2"))
    assert old.closing and not new.closing
    new.close()


def test_a_relayed_read_continues_from_where_its_batch_started() -> None:
    client = Client(Finite(event([1, 2])))
    hub = SubscriptionHub(lambda spec: client)
    held, _ = hub.open(request(Position.after("0"), batch="t#0", relay_key=b"k"))
    assert seqs(hub.next_for(held, 2.0, settle=False)) == ["1", "2"]
    hub.keep(held, Position.after("2"))
    hub.relayed_at = float("-inf")
    retried = hub.resume(KEY, b"k", Position.after("0"), "t#0")  # a retry, relayed to this holder
    assert retried is held and hub.busy(KEY, b"k") == ("t#0", held.subscribed_ms)
    assert hub.relayed_at > float("-inf") and held.read.start == Position.after("0")
    assert seqs(hub.next_for(held, 2.0, settle=False)) == ["1", "2"]
    hub.keep(held, Position.after("2"))
    assert hub.resume(KEY, b"k", Position.after("0"), "t#0") is held  # its retry in turn
    held.close()
    assert hub.relay_key_of(KEY) is None  # in use by a read, but closing


def test_a_wait_with_settle_still_takes_an_event_that_comes_late() -> None:
    stream = Finite()
    client = Client(stream)
    hub = SubscriptionHub(lambda spec: client)
    held, _ = hub.open(request(Position.trim_horizon(), batch="t#3"))
    threading.Timer(0.4, lambda: stream.events.put(event([7]))).start()
    assert seqs(hub.next_for(held, 3.0, settle=True)) == ["7"]
    held.close()


def test_a_short_wait_with_settle_still_takes_a_waiting_event() -> None:
    stream = Finite()
    client = Client(stream)
    hub = SubscriptionHub(lambda spec: client)
    held, _ = hub.open(request(Position.trim_horizon(), batch="t#3"))
    stream.events.put(event([8]))
    assert eventually(lambda: held.pending == 1)
    assert seqs(hub.next_for(held, 0.05, settle=True)) == ["8"]
    held.close()


def test_a_wait_without_settle_ends_at_its_deadline() -> None:
    client = Client(Finite())
    hub = SubscriptionHub(lambda spec: client)
    held, _ = hub.open(request(Position.trim_horizon(), batch="t#3"))
    answers: list[Any] = []
    worker = threading.Thread(
        target=lambda: answers.append(hub.next_for(held, 0.2, settle=False)), daemon=True
    )
    worker.start()
    worker.join(5.0)
    held.close()
    assert answers == [("idle", -1)]
    assert hub.next_for(held, 0.0, settle=False) == ("idle", -1)


def test_only_records_settle_the_batch() -> None:
    empty = event([])
    empty["Records"] = []
    client = Client(Finite(empty), Finite(event([1]), None), Finite())
    hub = SubscriptionHub(lambda spec: client)
    one, _ = hub.open(request(Position.trim_horizon(), batch="t#4"))
    two, _ = hub.open(
        SubscriptionRequest(SPEC, CONSUMER, "shardId-2", Position.trim_horizon(), True, batch="t#4")
    )
    three, _ = hub.open(
        SubscriptionRequest(SPEC, CONSUMER, "shardId-3", Position.trim_horizon(), True, batch="t#4")
    )
    assert hub.next_for(one, 2.0, settle=False)[0] == "event"  # an event without records
    assert hub.next_for(three, 0.2, settle=True)[0] == "idle"
    assert seqs(hub.next_for(two, 2.0, settle=False)) == ["1"]
    assert hub.next_for(two, 2.0, settle=False)[0] == "end"
    assert hub.next_for(three, 0.5, settle=True)[0] == "settle"
    for held in (one, two, three):
        held.close()


def test_batch_marks_are_forgotten_after_their_time(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(hub_module, "time", clock)
    monkeypatch.setattr(hub_module, "BATCH_MARKS_S", 100.0)
    hub = SubscriptionHub(lambda spec: None)
    hub._mark("a")
    clock.now += 100.0
    hub._mark("b")
    assert set(hub._with_records) == {"a", "b"}  # exactly its time: still remembered
    clock.now += 0.5
    hub._mark("c")
    assert set(hub._with_records) == {"b", "c"}


def test_reaping_closes_kept_subscriptions_past_their_idle_time(monkeypatch) -> None:
    client = Client(Finite(), Finite())
    hub = SubscriptionHub(lambda spec: client)
    relayed, _ = hub.open(request(Position.trim_horizon(), relay_key=b"k"))
    clock = Clock()
    monkeypatch.setattr(hub_module, "time", clock)
    monkeypatch.setattr(hub_module, "MAX_IDLE_S", 30.0)
    hub.keep(relayed, Position.after("1"))
    clock.now += 30.0
    hub.reap()
    assert not relayed.closing  # exactly its idle time: still kept
    assert hub.idle_since == clock.now and hub.relayed_at == clock.now
    clock.now += 0.5
    hub.reap()
    assert relayed.closing
