"""Polling's page source pinned (src/pyspark_kinesis/source/executor/modes/polling.py): what each failed
call means for the read, the iterator kept for the shard's next batch in this worker, the pacing calls,
and what a GetRecords response says as a page. The proxy is scripted (tests/unit/scripted.py); the
integration tests read real servers through the fault proxy."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from pyspark_kinesis.errors import DataLossError, StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.cutting import ShardLimits
from pyspark_kinesis.source.executor.iterator_cache import ITERATORS
from pyspark_kinesis.source.executor.modes import polling
from pyspark_kinesis.source.executor.modes.polling import PollingPages, classify
from pyspark_kinesis.source.executor.pacing import ITERATOR_PACER
from pyspark_kinesis.source.executor.pages import Fault, FaultKind
from pyspark_kinesis.source.executor.shard_read import fetch_shard
from pyspark_kinesis.source.state.offsets import ShardEnd
from tests.unit.scripted import SHARD, SPEC, FakeProxy, client_error, context, records

TRIM_IT = f"it-{Position.trim_horizon().describe()}"


class IteratorProxy(FakeProxy):
    """FakeProxy whose GetShardIterator answers from `iterators` (an iterator or an exception)."""

    def __init__(self, answers: list[Any] | None = None, iterators: list[Any] | None = None) -> None:
        super().__init__(answers=answers)
        self.iterators = list(iterators or [])

    def shard_iterator(self, shard: str, position: Position, verify: bool = False) -> str:
        self.calls.append(("GetShardIterator", (shard, position, verify)))
        if self.iterators:
            answer = self.iterators.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        return f"it-{position.describe()}"


class Pacing:
    """PACER replaced: records the calls (the real one sleeps to the service's quota)."""

    def __init__(self, monkeypatch) -> None:
        self.before: list[tuple[str, str]] = []
        self.after: list[tuple[tuple[str, str], float, int, int]] = []
        monkeypatch.setattr(polling.PACER, "before_call", lambda key: self.before.append(key) or 42.0)
        monkeypatch.setattr(
            polling.PACER,
            "after_response",
            lambda key, started, n, per_s: self.after.append((key, started, n, per_s)),
        )


@pytest.fixture(autouse=True)
def fresh_iterators():
    """No iterator kept and no shard's turn to wait for (a test that scripts the clock would
    otherwise wait for a turn set by the real one)."""
    ITERATORS.clear()
    ITERATOR_PACER.clear()
    yield
    ITERATORS.clear()
    ITERATOR_PACER.clear()


def pages(proxy: FakeProxy, **ctx: Any) -> PollingPages:
    return PollingPages(context(proxy, **ctx))


def response(seqs=(), *, next_iterator: str | None = "next", behind: int | None = 0, children=None) -> dict:
    answer: dict[str, Any] = {"Records": records(seqs)}
    if next_iterator is not None:
        answer["NextShardIterator"] = next_iterator
    if behind is not None:
        answer["MillisBehindLatest"] = behind
    if children is not None:
        answer["ChildShards"] = [{"ShardId": c} for c in children]
    return answer


# -- what a failure means ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc, kind",
    [
        (client_error("ExpiredIteratorException"), FaultKind.REOPEN),
        (
            client_error("InvalidArgumentException", "Timestamp is in the future", "GetShardIterator"),
            FaultKind.AHEAD,
        ),
        (client_error("ResourceNotFoundException", "Shard does not exist"), FaultKind.GONE),
        (
            client_error("InvalidArgumentException", "StartingSequenceNumber 1 used in GetShardIterator"),
            FaultKind.GONE,
        ),
        # (DynamoDB Streams: a position whose record aged out, and its throttling)
        (client_error("TrimmedDataAccessException", "records trimmed"), FaultKind.GONE),
        (client_error("LimitExceededException"), FaultKind.RETRY),
        (client_error("ProvisionedThroughputExceededException"), FaultKind.RETRY),
        (client_error("SomethingNew", status=503), FaultKind.RETRY),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), FaultKind.RETRY),
    ],
)
def test_each_failure_is_classified_with_its_cause(exc, kind):
    fault = classify(exc, SPEC)
    assert (fault.kind, fault.cause) == (kind, exc)


def test_a_failure_the_read_cannot_handle_is_the_users_error_naming_the_stream():
    with pytest.raises(StreamAccessError, match="AccessDeniedException") as info:
        classify(client_error("AccessDeniedException"), SPEC)
    assert "orders" in str(info.value) and isinstance(info.value.__cause__, ClientError)
    with pytest.raises(StreamAccessError):
        classify(client_error("ValidationException", "bad limit"), SPEC)


def test_a_tables_stream_fails_in_its_own_words():
    table = replace(SPEC, name="orders-table", service="dynamodb")
    with pytest.raises(StreamAccessError) as info:
        classify(client_error("AccessDeniedException"), table)
    message = str(info.value)
    assert "DynamoDB table 'orders-table'" in message and "dynamodb:GetRecords" in message
    assert "kinesis:" not in message


# -- opening ----------------------------------------------------------------------------------------


def test_a_fresh_open_asks_for_an_iterator_at_the_position_verified_or_not():
    proxy = IteratorProxy(iterators=["it-1"])
    source = pages(proxy)
    assert source.open(Position.after("5"), verify=True, reuse=False) is True
    assert source.iterator == "it-1" and proxy.calls == [
        ("GetShardIterator", (SHARD, Position.after("5"), True))
    ]


def test_a_reused_open_takes_the_iterator_kept_at_exactly_that_position():
    proxy = IteratorProxy()
    ITERATORS.put(SPEC.resolved_arn, SHARD, Position.after("5"), "kept-it", time.monotonic())
    source = pages(proxy)
    assert source.open(Position.after("5"), verify=True, reuse=True) is False  # not fresh: no anchor check
    assert source.iterator == "kept-it" and proxy.calls == []
    assert ITERATORS.take(SPEC.resolved_arn, SHARD, Position.after("5")) is None  # taken, not shared


def test_a_reused_open_without_a_kept_iterator_asks_for_one():
    proxy = IteratorProxy()
    ITERATORS.put(SPEC.resolved_arn, SHARD, Position.after("4"), "elsewhere", time.monotonic())
    source = pages(proxy)
    assert source.open(Position.after("5"), verify=False, reuse=True) is True
    assert source.iterator == f"it-{Position.after('5').describe()}"
    assert [c[0] for c in proxy.calls] == ["GetShardIterator"]


def test_a_kept_iterator_is_not_taken_by_a_fresh_open():
    ITERATORS.put(SPEC.resolved_arn, SHARD, Position.after("5"), "kept-it", time.monotonic())
    source = pages(IteratorProxy(iterators=["new-it"]))
    source.open(Position.after("5"), verify=False, reuse=False)
    assert source.iterator == "new-it"
    assert ITERATORS.take(SPEC.resolved_arn, SHARD, Position.after("5")) == "kept-it"


def test_a_failed_open_raises_its_fault():
    source = pages(
        IteratorProxy(iterators=[client_error("ResourceNotFoundException", operation="GetShardIterator")])
    )
    with pytest.raises(Fault) as info:
        source.open(Position.after("5"), verify=True, reuse=False)
    assert info.value.kind is FaultKind.GONE and source.iterator is None


def test_open_oldest_is_trim_horizon_and_false_only_when_the_shard_is_gone():
    proxy = IteratorProxy(iterators=["oldest-it"])
    source = pages(proxy)
    assert source.open_oldest() is True and source.iterator == "oldest-it"
    assert proxy.calls == [("GetShardIterator", (SHARD, Position.trim_horizon(), False))]
    gone = pages(
        IteratorProxy(iterators=[client_error("ResourceNotFoundException", operation="GetShardIterator")])
    )
    assert gone.open_oldest() is False and gone.iterator is None
    throttled = pages(
        IteratorProxy(iterators=[client_error("LimitExceededException", operation="GetShardIterator")])
    )
    with pytest.raises(Fault) as info:
        throttled.open_oldest()
    assert info.value.kind is FaultKind.RETRY


def test_an_open_notes_when_its_iterator_was_obtained(monkeypatch):
    monkeypatch.setattr(polling.time, "monotonic", lambda: 1000.0)
    source = pages(IteratorProxy())
    source.open(Position.trim_horizon(), verify=False, reuse=False)
    assert source.obtained == 1000.0
    monkeypatch.setattr(polling.time, "monotonic", lambda: 1001.0)
    source.open_oldest()
    assert source.obtained == 1001.0


# -- pages ------------------------------------------------------------------------------------------


def opened(proxy: FakeProxy, **ctx: Any) -> PollingPages:
    source = pages(proxy, **ctx)
    source.open(Position.trim_horizon(), verify=False, reuse=False)
    return source


def test_a_response_is_a_page_with_what_it_says_of_the_shard(monkeypatch):
    pacing = Pacing(monkeypatch)
    proxy = IteratorProxy(answers=[response([1, 2], behind=1500)])
    source = opened(proxy)
    page = source.next_page(3)
    assert [s.as_py() for s in page.records.seqs] == ["1", "2"]
    assert (page.behind_ms, page.full, page.ended, page.children) == (1500, False, False, ())
    assert source.iterator == "next" and proxy.calls[-1] == ("GetRecords", TRIM_IT)
    assert pacing.before == [(SPEC.resolved_arn, SHARD)]
    assert pacing.after == [((SPEC.resolved_arn, SHARD), 42.0, records([1, 2]).payload_bytes, 2_000_000)]


def test_a_page_is_full_when_it_holds_the_limit(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([1, 2]), response([3])]))
    assert source.next_page(2).full is True
    assert source.next_page(2).full is False


def test_a_response_without_millis_behind_is_not_known(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([1], behind=None)]))
    assert source.next_page(10).behind_ms == -1


def test_the_last_page_of_a_closed_shard_ends_it_with_its_children(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([], next_iterator=None, children=["c1", "c2"])]))
    page = source.next_page(10)
    assert (page.ended, page.children) == (True, ("c1", "c2")) and source.iterator is None


def test_children_count_only_on_the_page_that_ends_the_shard(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([1], children=["c1"])]))
    page = source.next_page(10)
    assert (page.ended, page.children) == (False, ())


def test_an_expired_iterator_is_dropped_and_reopened(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[client_error("ExpiredIteratorException")]))
    with pytest.raises(Fault) as info:
        source.next_page(10)
    assert info.value.kind is FaultKind.REOPEN and source.iterator is None


def test_a_throttled_call_keeps_the_iterator(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[client_error("ProvisionedThroughputExceededException")]))
    with pytest.raises(Fault) as info:
        source.next_page(10)
    assert info.value.kind is FaultKind.RETRY and source.iterator == TRIM_IT


def test_a_page_notes_when_its_next_iterator_was_obtained(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([1])]))
    monkeypatch.setattr(polling.time, "monotonic", lambda: 2000.0)
    source.next_page(10)
    assert source.obtained == 2000.0


def test_next_page_before_open_is_a_bug():
    with pytest.raises(AssertionError, match="next_page before open"):
        pages(IteratorProxy()).next_page(10)


# -- what is kept -----------------------------------------------------------------------------------


def test_keep_puts_the_iterator_for_the_shards_next_read_in_this_worker(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([1, 2])]))
    source.next_page(10)
    obtained = source.obtained
    assert source.keep(Position.after("2")) == ""
    assert ITERATORS._entries[(SPEC.resolved_arn, SHARD, Position.after("2"))] == ("next", obtained)


def test_keep_without_an_iterator_keeps_nothing(monkeypatch):
    Pacing(monkeypatch)
    source = opened(IteratorProxy(answers=[response([], next_iterator=None)]))
    source.next_page(10)
    assert source.keep(Position.shard_end()) == "" and ITERATORS._entries == {}


# -- fetch_shard: a read by polling -----------------------------------------------------------------


def _seqs(cols) -> list[str]:
    return cols.to_arrow().column("sequenceNumber").to_pylist()


def _limits(**changes: Any) -> ShardLimits:
    return ShardLimits(
        **{"max_records": 100, "max_bytes": 10**9, "deadline": time.monotonic() + 5, **changes}
    )


def test_fetch_shard_reads_by_polling_to_the_tip(monkeypatch):
    Pacing(monkeypatch)
    proxy = IteratorProxy(answers=[response([1, 2], behind=0)])
    cols, end = fetch_shard(proxy, SHARD, Position.trim_horizon(), _limits(), batch=4)
    assert _seqs(cols) == ["1", "2"] and end.reached == Position.after("2") and end.at_tip
    assert end.first == ("1", 0) and proxy.calls[0] == (
        "GetShardIterator",
        (SHARD, Position.trim_horizon(), False),
    )


def test_fetch_shard_replays_exactly_to_the_recorded_end(monkeypatch):
    Pacing(monkeypatch)
    proxy = IteratorProxy(answers=[response([1, 2, 3], behind=0)])
    recorded = ShardEnd(Position.trim_horizon(), Position.after("2"), records=2, first=("1", 0))
    cols, end = fetch_shard(proxy, SHARD, Position.trim_horizon(), _limits(max_records=-1), expect=recorded)
    assert _seqs(cols) == ["1", "2"] and end.reached == Position.after("2")


def test_fetch_shard_judges_a_replay_that_lost_records_by_fail_on_data_loss(monkeypatch):
    Pacing(monkeypatch)
    recorded = ShardEnd(Position.trim_horizon(), Position.after("3"), records=3, first=("1", 0))

    def replay(fail: bool):
        proxy = IteratorProxy(answers=[response([2, 3], behind=0)])  # record 1 aged out since
        return fetch_shard(
            proxy,
            SHARD,
            Position.trim_horizon(),
            _limits(max_records=-1),
            expect=recorded,
            fail_on_data_loss=fail,
        )

    with pytest.raises(DataLossError):
        replay(True)
    cols, _end = replay(False)
    assert _seqs(cols) == ["2", "3"]


def test_fetch_shard_passes_when_the_shard_was_last_at_the_tip(monkeypatch):
    """A first read whose start aged out: at the tip a moment ago (tip_ms) nothing was lost; not known
    to have been at the tip, a loss."""
    Pacing(monkeypatch)
    gone = client_error("ResourceNotFoundException", "Shard not found", "GetShardIterator")

    def read(tip_ms: int):
        proxy = IteratorProxy(answers=[response([7], behind=0)], iterators=[gone, "oldest"])
        proxy.spec = replace(SPEC, retention_ms=24 * 3_600_000)
        return fetch_shard(proxy, SHARD, Position.after("5"), _limits(), tip_ms=tip_ms)

    cols, _end = read(int(time.time() * 1000))
    assert _seqs(cols) == ["7"]
    with pytest.raises(DataLossError):
        read(0)
