"""Enhanced fan-out's page source pinned (src/pyspark_kinesis/source/executor/modes/fanout.py): what a
failed subscription means, what the read asks the agent for, how long it waits for a push, when a quiet
subscription settles or counts as broken, what an event says as a page, and the one GetRecords that
confirms a closed shard's end. The agent link is scripted here (tests/unit/source/agent/test_fanout_relay.py and
test_fanout_hub.py run real agents in-process; tests/integration subscribe through kinesis-local)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.agent.link import SubscriptionEnded
from pyspark_kinesis.source.executor.modes import fanout
from pyspark_kinesis.source.executor.modes.fanout import (
    EVENT_WAIT_S,
    SILENT_WAITS,
    FanOutPages,
    holder_hint,
)
from pyspark_kinesis.source.executor.pages import Fault, FaultKind
from tests.unit.scripted import SHARD, SPEC, FakeProxy, client_error, context, records

CONSUMER = SPEC.consumer_arn


class Link:
    """The agent link, scripted: `events` are handed out by next_event (an exception is raised)."""

    def __init__(self, *events: Any, fresh: bool = True) -> None:
        self.events = list(events)
        self.fresh = fresh
        self.pending, self.settled, self.behind, self.broken = 0, False, -1, False
        self.wants: list[Any] = []
        self.waits: list[tuple[float, bool]] = []
        self.kept: list[Position] = []
        self.closed = 0

    def open(self, want: Any) -> bool:
        self.wants.append(want)
        return self.fresh

    def next_event(self, wait_s: float, settle: bool = False) -> dict | None:
        self.waits.append((wait_s, settle))
        if not self.events:
            return None
        event = self.events.pop(0)
        if isinstance(event, BaseException):
            raise event
        return event

    def keep(self, position: Position) -> str:
        self.kept.append(position)
        return "10.0.0.2:4000@5"

    def close(self) -> None:
        self.closed += 1


def event(
    seqs=(), *, behind: int = 0, next_iterator: str | None = "next", children=None, received=None
) -> dict:
    answer: dict[str, Any] = {
        "Records": records(seqs),
        "MillisBehindLatest": behind,
        "ReceivedAt": time.time() + 1 if received is None else received,
    }
    if next_iterator is not None:
        answer["NextShardIterator"] = next_iterator
    if children is not None:
        answer["ChildShards"] = [{"ShardId": c} for c in children]
    return answer


def source_with(link: Link, proxy: FakeProxy | None = None, **ctx: Any) -> FanOutPages:
    pages = FanOutPages(context(proxy, **ctx))
    pages.link = link  # type: ignore[assignment]
    pages.position, pages.subscribed = Position.after("100"), True
    return pages


# -- holder hints --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hint", "parsed"),
    [
        ("10.0.0.2:4000@1700000000000", ("10.0.0.2:4000", 1700000000000)),
        ("10.0.0.2:4000", ("10.0.0.2:4000", 0)),  # written before the time was added
        ("10.0.0.2:4000@soon", ("10.0.0.2:4000", 0)),
        ("", ("", 0)),
    ],
)
def test_a_holder_hint_is_an_address_and_when_it_subscribed(hint, parsed):
    assert holder_hint(hint) == parsed


# -- what a failed subscription means ---------------------------------------------------------------------


@pytest.fixture
def consumer_registered(monkeypatch):
    monkeypatch.setattr(fanout, "describe_arn", lambda client, arn: object())


AFTER_5 = Position.after("5")


def classify(exc: Exception, position: Position | None = AFTER_5, broken: bool = False) -> Fault:
    return FanOutPages(context())._classify(exc, position, broken)


def test_a_future_timestamp_start_is_at_the_tip(consumer_registered):
    exc = client_error("InvalidArgumentException", "Timestamp is in the future")
    assert classify(exc, Position.at_timestamp(1)).kind is FaultKind.AHEAD
    for other in (Position.after("5"), None):  # (no timestamp asked for: not a start ahead of the clock)
        with pytest.raises(StreamAccessError, match="Timestamp is in the future"):
            classify(exc, other)


def test_a_missing_shard_or_an_unknown_sequence_number_is_gone(consumer_registered):
    assert classify(client_error("ResourceNotFoundException", "Shard gone")).kind is FaultKind.GONE
    exc = client_error("InvalidArgumentException", "StartingSequenceNumber 5 is invalid")
    assert classify(exc).kind is FaultKind.GONE


def test_a_missing_consumer_is_the_users_to_fix(monkeypatch):
    asked = []
    monkeypatch.setattr(fanout, "describe_arn", lambda client, arn: asked.append(arn))
    with pytest.raises(StreamAccessError) as info:
        classify(client_error("ResourceNotFoundException", "Consumer gone"))
    assert str(info.value) == (
        f"the enhanced fan-out consumer {CONSUMER} of {SPEC.describe()} is no longer registered (deregistered "
        "while the query ran?). Restart the query: it registers its consumer again (with consumerArn, give a "
        "registered one)."
    )
    assert asked == [CONSUMER]


@pytest.mark.parametrize(
    "exc",
    [
        client_error("LimitExceededException"),
        client_error("ResourceInUseException", "Another active subscription exists"),
        client_error("SomethingNew", status=503),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        ConnectionResetError("cut"),
    ],
)
def test_refusals_and_transient_failures_are_retried_or_broken(consumer_registered, exc):
    assert (classify(exc).kind, classify(exc, broken=True).kind) == (FaultKind.RETRY, FaultKind.BROKEN)
    assert classify(exc).cause is exc


def test_any_other_refusal_is_the_users_error(consumer_registered):
    with pytest.raises(StreamAccessError, match="AccessDeniedException"):
        classify(client_error("AccessDeniedException"))


# -- opening ------------------------------------------------------------------------------------------------


def test_an_open_asks_the_agent_for_a_subscription_from_the_read_position(monkeypatch):
    link = Link(fresh=True)
    monkeypatch.setattr(fanout, "AgentLink", lambda: link)
    ctx = context()
    pages = FanOutPages(ctx)
    assert pages.open(Position.after("7"), verify=True, reuse=False) is True
    [want] = link.wants
    assert (want.consumer, want.shard, want.position, want.reuse, want.verify) == (
        CONSUMER,
        SHARD,
        Position.after("7"),
        False,
        True,
    )
    assert (want.batch, want.relay_key, want.subscribed_ms) == ("tok#7", b"", 0)
    assert (pages.subscribed, pages.position, pages.idle) == (True, Position.after("7"), 0)


def test_a_broken_link_is_replaced_and_a_working_one_kept(monkeypatch):
    made: list[Link] = []
    monkeypatch.setattr(fanout, "AgentLink", lambda: made.append(Link()) or made[-1])
    pages = FanOutPages(context())
    pages.open(Position.after("7"), verify=False, reuse=False)
    pages.open(Position.after("8"), verify=False, reuse=False)
    assert len(made) == 1
    made[0].broken = True
    pages.open(Position.after("9"), verify=False, reuse=False)
    assert len(made) == 2 and made[0].closed == 1


def test_a_refused_open_is_a_fault(monkeypatch, consumer_registered):
    class Refusing(Link):
        def open(self, want: Any) -> bool:
            raise client_error("ResourceInUseException")

    monkeypatch.setattr(fanout, "AgentLink", lambda: Refusing())
    with pytest.raises(Fault) as info:
        FanOutPages(context()).open(Position.after("7"), verify=False, reuse=False)
    assert info.value.kind is FaultKind.RETRY


def test_open_oldest_asks_for_trim_horizon_after_the_shard_is_found(monkeypatch):
    link = Link()
    monkeypatch.setattr(fanout, "AgentLink", lambda: link)
    proxy = FakeProxy()
    assert FanOutPages(context(proxy)).open_oldest() is True
    assert proxy.calls == [("GetShardIterator", Position.trim_horizon())]
    [want] = link.wants
    assert (want.position, want.verify, want.reuse) == (Position.trim_horizon(), False, False)


def test_open_oldest_of_a_gone_shard_is_false_and_other_failures_are_faults(monkeypatch, consumer_registered):
    class Missing(FakeProxy):
        def __init__(self, exc: Exception) -> None:
            super().__init__()
            self.exc = exc

        def shard_iterator(self, shard: str, position: Position, verify: bool = False) -> str:
            raise self.exc

    monkeypatch.setattr(fanout, "AgentLink", Link)
    assert FanOutPages(context(Missing(client_error("ResourceNotFoundException")))).open_oldest() is False
    with pytest.raises(Fault) as info:
        FanOutPages(context(Missing(client_error("LimitExceededException")))).open_oldest()
    assert info.value.kind is FaultKind.RETRY


# -- waiting for pushes ---------------------------------------------------------------------------------


def test_a_running_querys_read_waits_for_a_push_at_most_its_push_wait():
    link = Link(event([1], behind=500))
    pages = source_with(link, seconds=30, push_wait_s=0.5)
    pages.next_page(100)
    [(wait, settle)] = link.waits
    assert 0.4 < wait <= 0.5 and settle is True


def test_an_available_now_read_waits_to_its_deadline_and_never_settles():
    link = Link(event([1], behind=500))
    pages = source_with(link, seconds=3, cutoff_ms=int(time.time() * 1000), push_wait_s=0.5)
    pages.next_page(100)
    [(wait, settle)] = link.waits
    assert 2.5 < wait <= 3 and settle is False


def test_a_read_waits_ten_seconds_at_a_time_at_most():
    link = Link(event([1], behind=500))
    pages = source_with(link, seconds=60, cutoff_ms=int(time.time() * 1000))
    pages.next_page(100)
    assert link.waits == [(EVENT_WAIT_S, False)]


def test_a_replay_reads_by_get_records_and_never_subscribes():
    """A replay reads a recorded range: a subscription of its own would take the shard's subscription
    from the agent that holds it for the shard's next read (and be refused within the service's 5 s of
    it), so it asks GetRecords, as polling does."""
    answer = {"Records": records(["5", "6"]), "MillisBehindLatest": 0, "NextShardIterator": "it-next"}
    proxy = FakeProxy(answers=[answer])
    pages = FanOutPages(context(proxy, until=Position.after("6")))
    assert pages.open(Position.after("4"), verify=False, reuse=True) is True
    assert pages.link is None  # (no agent asked: no SubscribeToShard)
    assert pages.next_page(100).records.seqs.to_pylist() == ["5", "6"]
    assert [call for call, _arg in proxy.calls] == ["GetShardIterator", "GetRecords"]
    pages.close()


def test_a_wait_past_the_deadline_still_waits_a_moment():
    link = Link()
    pages = source_with(link, seconds=-1, cutoff_ms=1)
    pages.next_page(100)
    assert link.waits == [(0.01, False)]


def test_a_quiet_running_read_settles_once_its_push_wait_has_passed(monkeypatch):
    link = Link()
    link.behind = 0
    pages = source_with(link, seconds=30, push_wait_s=0.5)
    pages.read_started = time.monotonic() - 1
    page = pages.next_page(100)
    assert page is not None and page.settled and page.behind_ms == 0 and not len(page.records)


def test_a_quiet_read_settles_at_once_when_its_batch_settled():
    link = Link()
    link.settled, link.behind = True, 2500
    page = source_with(link, seconds=30, push_wait_s=5).next_page(100)
    assert page is not None and page.settled and page.behind_ms == 2500


def test_a_quiet_read_before_its_push_wait_is_nothing_yet():
    assert source_with(Link(), seconds=30, push_wait_s=5).next_page(100) is None


def test_a_subscription_silent_for_six_waits_is_broken():
    pages = source_with(Link(), seconds=120, cutoff_ms=1)
    for _wait in range(SILENT_WAITS - 1):
        assert pages.next_page(100) is None
    with pytest.raises(Fault) as info:
        pages.next_page(100)
    assert info.value.kind is FaultKind.BROKEN and "no event from the subscription for a minute" in str(
        info.value
    )
    assert pages.subscribed is False


def test_an_event_resets_the_count_of_quiet_waits():
    pages = source_with(Link(None, None, event([1], behind=500), None), seconds=120, cutoff_ms=1)
    for _wait in range(4):
        pages.next_page(100)
    assert pages.idle == 1


def test_an_ended_subscription_is_opened_again_and_a_broken_one_is_a_fault(consumer_registered):
    pages = source_with(Link(SubscriptionEnded()))
    with pytest.raises(Fault) as info:
        pages.next_page(100)
    assert info.value.kind is FaultKind.REOPEN and pages.subscribed is False
    pages = source_with(Link(ConnectionResetError("cut")))
    with pytest.raises(Fault) as info:
        pages.next_page(100)
    assert info.value.kind is FaultKind.BROKEN and pages.subscribed is False


# -- what an event says --------------------------------------------------------------------------------


def test_an_event_is_a_page_and_moves_the_position():
    pages = source_with(Link(event([101, 102], behind=700)))
    page = pages.next_page(100)
    assert page is not None and [s.as_py() for s in page.records.seqs] == ["101", "102"]
    assert (page.behind_ms, page.full, page.ended, page.settled) == (700, False, False, False)
    assert pages.position == Position.after("102")


def test_an_event_without_millis_behind_is_not_known():
    answer = event([101])
    del answer["MillisBehindLatest"]
    assert source_with(Link(answer)).next_page(100).behind_ms == -1


def test_an_event_at_the_tip_pushed_before_the_read_started_is_not_known():
    pages = source_with(Link())
    assert pages._page(event([101], behind=0, received=pages.read_wall - 1)).behind_ms == -1
    assert pages._page(event([102], behind=0, received=pages.read_wall)).behind_ms == 0
    assert pages._page(event([103], behind=5, received=pages.read_wall - 1)).behind_ms == 5


def test_an_event_without_a_continuation_ends_the_shard_with_its_children():
    page = source_with(Link())._page(event([], next_iterator=None, children=["c1", "c2"]))
    assert (page.ended, page.children) == (True, ("c1", "c2"))


def test_the_last_event_of_a_closed_shard_keeps_its_records_and_how_far_behind_it_was():
    page = source_with(Link())._page(event([101, 102], behind=300, next_iterator=None))
    assert [s.as_py() for s in page.records.seqs] == ["101", "102"]
    assert (page.behind_ms, page.ended, page.children) == (300, True, ())  # (no ChildShards given)


def test_an_empty_event_keeps_the_position():
    pages = source_with(Link())
    pages._page(event([], behind=500))
    assert pages.position == Position.after("100")


def test_events_waiting_behind_make_a_full_page_that_is_not_confirmed():
    link = Link()
    link.pending = 1
    proxy = FakeProxy()
    page = source_with(link, proxy, closed=True)._page(event([], behind=0))
    assert page.full and proxy.calls == []  # more is coming: no end to confirm yet


# -- confirming a closed shard's end -------------------------------------------------------------------------


def test_a_closed_shard_at_the_tip_is_confirmed_with_one_get_records_from_the_read_position():
    proxy = FakeProxy(answers=[{"Records": records([]), "ChildShards": [{"ShardId": "c1"}]}])
    page = source_with(Link(), proxy, closed=True)._page(event([], behind=0))
    assert (page.ended, page.children, page.behind_ms) == (True, ("c1",), 0)
    assert proxy.calls == [
        ("GetShardIterator", Position.after("100")),
        ("GetRecords", f"it-{Position.after('100').describe()}"),
    ]


def test_records_or_a_next_iterator_mean_the_closed_shard_has_not_ended():
    more = {"Records": records(["101"]), "NextShardIterator": "n"}
    going = {"Records": records([]), "NextShardIterator": "n"}
    for answer in (more, going):
        page = source_with(Link(), FakeProxy(answers=[answer]), closed=True)._page(event([], behind=0))
        assert (page.ended, page.behind_ms) == (False, -1)


def test_an_unconfirmable_end_is_not_the_tip():
    failing = FakeProxy(answers=[client_error("ProvisionedThroughputExceededException")])
    page = source_with(Link(), failing, closed=True)._page(event([], behind=0))
    assert (page.ended, page.behind_ms) == (False, -1)
    inside = source_with(Link(), FakeProxy(), closed=True)
    inside.position = Position.inside("100", 2)
    assert inside._page(event([], behind=0)).behind_ms == -1 and inside.context.proxy.calls == []


def test_an_open_shard_and_a_page_with_records_are_never_confirmed():
    proxy = FakeProxy()
    assert source_with(Link(), proxy, closed=False)._page(event([], behind=0)).behind_ms == 0
    assert source_with(Link(), proxy, closed=True)._page(event([101], behind=0)).behind_ms == 0
    assert source_with(Link(), proxy, closed=True)._page(event([], behind=9)).behind_ms == 9
    assert proxy.calls == []


def test_an_end_left_unconfirmed_is_an_empty_page_that_keeps_whether_it_settled():
    link = Link()
    link.settled, link.behind = True, 0
    inside = source_with(link, FakeProxy(), closed=True, seconds=30)
    inside.position = Position.inside("100", 2)  # (inside an aggregate: not at an end)
    page = inside.next_page(100)
    assert page is not None and len(page.records) == 0 and (page.behind_ms, page.settled) == (-1, True)
    going = FakeProxy(answers=[{"Records": records([]), "NextShardIterator": "n"}])
    page = source_with(link, going, closed=True, seconds=30).next_page(100)
    assert page is not None and len(page.records) == 0 and (page.behind_ms, page.settled) == (-1, True)


def test_a_settled_quiet_closed_shard_at_the_tip_is_confirmed_too():
    link = Link()
    link.settled, link.behind = True, 0
    proxy = FakeProxy(answers=[{"Records": records([])}])
    page = source_with(link, proxy, closed=True, seconds=30).next_page(100)
    assert page is not None and page.ended and page.settled is False


# -- keeping and closing -----------------------------------------------------------------------------------


def test_keep_hands_the_subscription_to_the_agent_unless_it_broke():
    link = Link()
    pages = source_with(link)
    assert pages.keep(Position.after("120")) == "10.0.0.2:4000@5" and link.kept == [Position.after("120")]
    link.broken = True
    assert pages.keep(Position.after("121")) == ""
    pages.subscribed, link.broken = False, False
    assert pages.keep(Position.after("122")) == "" and len(link.kept) == 1


def test_close_closes_the_link():
    link = Link()
    source_with(link).close()
    assert link.closed == 1
    FanOutPages(context()).close()  # never opened: nothing to close
