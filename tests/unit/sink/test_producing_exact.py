"""The sink's retry lane pinned exactly (src/pyspark_kinesis/sink/producing.py): what Kinesis would
refuse and the words that say so, which records a call carries, the stats, the backoff schedule, the
errors that end a lane, and how the producer spreads, buffers and flushes records. PutRecords is a
scripted function here (test_sink_lane.py has the retry-until-in behaviour; the sink's integration tests
write to a real local Kinesis through the fault proxy)."""

from __future__ import annotations

import threading
import time
import zlib

import pytest

from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.errors import SinkWriteError
from pyspark_kinesis.sink import producing
from pyspark_kinesis.sink.options import SinkConfig
from pyspark_kinesis.sink.producing import (
    MAX_KEY_CHARS,
    MAX_RECORD_BYTES,
    Entry,
    Lane,
    Producer,
    WriteStats,
    _hash_key_ok,
    invalid_reason,
)

OK = {"SequenceNumber": "1", "ShardId": "shardId-000000000000"}


def refused(
    code: str = "ProvisionedThroughputExceededException", message: str | None = "Rate exceeded"
) -> dict:
    return {"ErrorCode": code} if message is None else {"ErrorCode": code, "ErrorMessage": message}


def config(**changes) -> SinkConfig:
    return SinkConfig("orders", AwsSettings(region="us-east-1"), **changes)


class Script:
    """PutRecords answering each call with the next scripted list of results (or all OK once the
    script runs out), keeping what each call carried and with which settings."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[AwsSettings, str, list[dict]]] = []

    def __call__(self, settings, stream, entries):
        self.calls.append((settings, stream, entries))
        if self.answers:
            answer = self.answers.pop(0)
            return answer(entries) if callable(answer) else answer
        return [OK] * len(entries)


class Sleeps:
    """time.sleep and random.uniform replaced: records each backoff's upper bound, waits not at all."""

    def __init__(self, monkeypatch) -> None:
        self.bounds: list[float] = []
        monkeypatch.setattr(
            producing.random, "uniform", lambda low, high: self.bounds.append((low, high)) or high
        )
        monkeypatch.setattr(producing.time, "sleep", lambda seconds: None)


def entry(data: str, key: str = "k", stream: str = "orders", row: int = 0, **kw) -> Entry:
    return Entry(stream, data.encode(), key, None, row, **kw)


# -- a record ---------------------------------------------------------------------------------------------


def test_an_entry_is_ordered_by_its_key_unless_told_its_shard():
    assert entry("x", "k1").order_key == "k1"
    assert entry("x", "k1", order="shardId-000000000002").order_key == "shardId-000000000002"


def test_an_entrys_size_counts_the_keys_bytes_not_characters():
    assert entry("abc", "é").size == 3 + 2


def test_a_request_carries_the_explicit_hash_key_only_when_given():
    assert entry("x", "k").request() == {"Data": b"x", "PartitionKey": "k"}
    assert Entry("s", b"x", "k", "0", 1).request() == {
        "Data": b"x",
        "PartitionKey": "k",
        "ExplicitHashKey": "0",
    }


@pytest.mark.parametrize(
    "text, ok",
    [
        ("0", True),
        ("9" * 38, True),
        ("10", True),
        ("01", False),  # the service's pattern: 0|([1-9]\d{0,38})
        ("0" * 40, False),
        (str(2**128 - 1), True),  # 39 digits
        (str(2**128), False),
        ("1" * 40, False),
        ("", False),
        ("-1", False),
        ("1.0", False),
        ("١٢", False),  # Arabic-Indic digits: isdigit() but not ASCII
        ("²", False),  # a superscript: isdigit() but int() refuses it
    ],
)
def test_an_explicit_hash_key_is_ascii_digits_below_two_to_the_128(text, ok):
    assert _hash_key_ok(text) is ok


def test_what_kinesis_would_refuse_is_named_exactly():
    assert invalid_reason(None, "k", None) == "data is null"
    assert invalid_reason(b"x", "", None) == "partitionKey is empty"
    assert invalid_reason(b"x", None, None) == "partitionKey is empty"
    assert invalid_reason(b"x", "k" * MAX_KEY_CHARS, None) is None
    assert (
        invalid_reason(b"x", "k" * (MAX_KEY_CHARS + 1), None)
        == "partitionKey has 257 characters (at most 256)"
    )
    assert (
        invalid_reason(b"x", "k", "12x")
        == "explicitHashKey is not a decimal number below 2^128 (ASCII digits, no leading zero)"
    )
    assert invalid_reason(b"x", "k", "12") is None
    assert invalid_reason(b"", "k", None) is None


def test_the_size_limit_counts_data_and_the_keys_bytes_up_to_the_streams_own_limit():
    assert invalid_reason(b"x" * (MAX_RECORD_BYTES - 2), "é", None) is None
    assert invalid_reason(b"x" * (MAX_RECORD_BYTES - 1), "é", None) == (
        "record is 1048577 bytes with its partition key (the stream takes at most 1048576; "
        "UpdateMaxRecordSize raises a stream's limit up to 10 MiB)"
    )
    assert invalid_reason(b"x" * 99, "k", None, max_record_bytes=100) is None
    assert invalid_reason(b"x" * 100, "k", None, max_record_bytes=100).startswith("record is 101 bytes")


def test_a_stream_that_places_records_itself_takes_no_partition_key_but_a_bounded_one():
    """AUTO record distribution (`keyless`): a missing key is an empty one, adding no bytes."""
    assert invalid_reason(b"x" * MAX_RECORD_BYTES, None, None, keyless=True) is None
    assert invalid_reason(b"x", "", None, keyless=True) is None
    assert invalid_reason(b"x" * (MAX_RECORD_BYTES - 1), "kk", None, keyless=True).startswith(
        "record is 1048577"
    )
    assert (
        invalid_reason(b"x", "k" * (MAX_KEY_CHARS + 1), None, keyless=True)
        == "partitionKey has 257 characters (at most 256)"
    )


def test_the_first_reason_wins():
    assert invalid_reason(None, "", "x") == "data is null"
    assert invalid_reason(b"x" * MAX_RECORD_BYTES, "", None) == "partitionKey is empty"
    assert invalid_reason(b"x" * MAX_RECORD_BYTES, "k", "x").startswith("record is")


# -- which records a call carries -------------------------------------------------------------------------


def lane_with(pending: list[Entry], **changes) -> Lane:
    one = Lane(config(**changes), WriteStats(), threading.Lock())
    one.pending = list(pending)
    return one


def test_a_call_carries_one_stream_the_first_pending_records():
    pending = [
        entry("a", stream="s1"),
        entry("b", stream="s2"),
        entry("c", stream="s1"),
        entry("d", stream="s2"),
    ]
    assert lane_with(pending)._next_call() == ("s1", [0, 2])
    assert lane_with(pending[1:])._next_call() == ("s2", [0, 2])


def test_a_call_stops_at_the_record_limit_and_at_the_byte_limit_inclusive():
    ten = [entry(f"{n:04d}", "k") for n in range(10)]  # 5 bytes each with the key
    assert lane_with(ten, max_records_per_request=3)._next_call() == ("orders", [0, 1, 2])
    assert lane_with(ten, max_bytes_per_request=15)._next_call() == ("orders", [0, 1, 2])
    assert lane_with(ten, max_bytes_per_request=14)._next_call() == ("orders", [0, 1])
    assert lane_with(ten, max_bytes_per_request=15, max_records_per_request=2)._next_call() == (
        "orders",
        [0, 1],
    )


def test_a_record_larger_than_the_byte_limit_still_goes_alone():
    pending = [entry("x" * 50), entry("y")]
    assert lane_with(pending, max_bytes_per_request=10)._next_call() == ("orders", [0])


def test_a_call_stops_at_the_first_record_that_does_not_fit():
    """The lane keeps records in order: a smaller record after one that does not fit waits too."""
    pending = [entry("x" * 4), entry("y" * 9), entry("z")]
    assert lane_with(pending, max_bytes_per_request=10)._next_call() == ("orders", [0])


def test_with_preserve_order_a_call_has_the_oldest_record_of_each_key_only():
    pending = [entry("1", "a"), entry("2", "a"), entry("3", "b"), entry("4", "c", order="a"), entry("5", "c")]
    assert lane_with(pending, preserve_order=True)._next_call() == ("orders", [0, 2, 4])
    assert lane_with(pending)._next_call() == ("orders", [0, 1, 2, 3, 4])


def test_with_preserve_order_a_key_waiting_in_another_streams_call_holds_its_later_records():
    pending = [entry("1", "a", "s1"), entry("2", "b", "s2"), entry("3", "b", "s1"), entry("4", "c", "s1")]
    assert lane_with(pending, preserve_order=True)._next_call() == ("s1", [0, 3])
    assert lane_with(pending)._next_call() == ("s1", [0, 2, 3])


def test_with_preserve_order_a_held_key_does_not_use_up_the_record_limit():
    pending = [entry("1", "a"), entry("2", "a"), entry("3", "a"), entry("4", "b")]
    assert lane_with(pending, preserve_order=True, max_records_per_request=2)._next_call() == (
        "orders",
        [0, 3],
    )


# -- a lane's calls -----------------------------------------------------------------------------------------


def test_a_lane_counts_calls_records_bytes_and_retries(monkeypatch):
    Sleeps(monkeypatch)
    put = Script([OK, refused(), OK], [refused(), OK], [OK])
    monkeypatch.setattr(producing, "put_records", put)
    one = lane_with([entry("aa"), entry("bbb"), entry("c"), entry("dddd")], max_records_per_request=3)
    one.drain(time.monotonic() + 60)
    sent = [[e["Data"] for e in entries] for _, _, entries in put.calls]
    assert sent == [[b"aa", b"bbb", b"c"], [b"bbb", b"dddd"], [b"bbb"]]
    assert one.stats == WriteStats(records=4, bytes=3 + 4 + 2 + 5, calls=3, retried=2)
    assert one.pending == []


def test_a_lane_sends_with_the_streams_own_settings(monkeypatch):
    put = Script()
    monkeypatch.setattr(producing, "put_records", put)
    one = lane_with([entry("a", stream="s1"), entry("b", stream="s2")])
    other = AwsSettings(region="eu-west-1")
    monkeypatch.setattr(
        SinkConfig, "settings_for", lambda self, stream: other if stream == "s2" else self.aws
    )
    one.drain(time.monotonic() + 60)
    assert [(settings.region, stream) for settings, stream, _ in put.calls] == [
        ("us-east-1", "s1"),
        ("eu-west-1", "s2"),
    ]


def test_the_backoff_grows_while_calls_make_no_progress_and_restarts_after_some(monkeypatch):
    sleeps = Sleeps(monkeypatch)
    monkeypatch.setattr(producing, "BASE_BACKOFF_S", 0.1)
    monkeypatch.setattr(producing, "MAX_BACKOFF_S", 0.5)
    all_refused = [refused(), refused()]
    put = Script(all_refused, all_refused, all_refused, all_refused, [OK, refused()], [refused()], [OK])
    monkeypatch.setattr(producing, "put_records", put)
    lane_with([entry("a", "k1"), entry("b", "k2")]).drain(time.monotonic() + 60)
    assert [high for _, high in sleeps.bounds] == pytest.approx([0.2, 0.4, 0.5, 0.5, 0.1, 0.2])
    assert {low for low, _ in sleeps.bounds} == {0}


def test_a_call_with_nothing_refused_does_not_wait(monkeypatch):
    sleeps = Sleeps(monkeypatch)
    monkeypatch.setattr(producing, "put_records", Script())
    lane_with([entry(str(n)) for n in range(5)], max_records_per_request=2).drain(time.monotonic() + 60)
    assert sleeps.bounds == []


def test_after_a_clean_call_the_backoff_starts_again_from_its_first_step(monkeypatch):
    sleeps = Sleeps(monkeypatch)
    monkeypatch.setattr(producing, "BASE_BACKOFF_S", 0.1)
    put = Script([refused()], [refused()], [OK], [refused()], [OK])
    monkeypatch.setattr(producing, "put_records", put)
    lane_with([entry("a"), entry("b")], max_records_per_request=1).drain(time.monotonic() + 60)
    assert [high for _, high in sleeps.bounds] == pytest.approx([0.2, 0.4, 0.2])


def test_past_the_deadline_the_lane_fails_naming_count_stream_setting_and_last_error(monkeypatch):
    Sleeps(monkeypatch)
    put = Script(
        [refused("InternalFailure", "first"), refused("ProvisionedThroughputExceededException", None), OK]
    )
    monkeypatch.setattr(producing, "put_records", put)
    one = lane_with([entry("a"), entry("b"), entry("c")], max_retry_time_ms=1234)
    with pytest.raises(SinkWriteError) as info:
        one.drain(time.monotonic() - 1)
    assert str(info.value) == (
        "2 records could not be written to Kinesis stream 'orders' within maxRetryTimeMs=1234 (last error "
        "ProvisionedThroughputExceededException: ). Nothing was dropped: the task fails and Spark retries "
        "it. Raise maxRetryTimeMs or the stream's capacity."
    )
    assert [e.data for e in one.pending] == [b"a", b"b"] and len(put.calls) == 1


def test_a_lane_past_its_deadline_still_finishes_when_nothing_is_refused(monkeypatch):
    put = Script()
    monkeypatch.setattr(producing, "put_records", put)
    one = lane_with([entry(str(n)) for n in range(3)], max_records_per_request=1)
    one.drain(time.monotonic() - 1)
    assert one.pending == [] and len(put.calls) == 3


def test_the_deadline_is_checked_before_each_wait(monkeypatch):
    Sleeps(monkeypatch)
    now = [100.0]
    monkeypatch.setattr(producing.time, "monotonic", lambda: now[0])

    def refuse_and_tick(entries):
        now[0] += 1
        return [refused()] * len(entries)

    put = Script(refuse_and_tick, refuse_and_tick, refuse_and_tick, refuse_and_tick)
    monkeypatch.setattr(producing, "put_records", put)
    with pytest.raises(SinkWriteError):
        lane_with([entry("a")]).drain(102.0)
    assert len(put.calls) == 3  # at 101 and 102 not past it; at 103 past it


def test_the_last_error_names_its_code_and_message(monkeypatch):
    Sleeps(monkeypatch)
    monkeypatch.setattr(
        producing, "put_records", Script([refused("InternalFailure", "Internal service failure")])
    )
    with pytest.raises(SinkWriteError, match=r"\(last error InternalFailure: Internal service failure\)\."):
        lane_with([entry("a")]).drain(time.monotonic() - 1)


def test_an_answer_with_fewer_results_than_records_sent_is_an_error_not_a_success(monkeypatch):
    """Results pair with records by position: a short answer must not count the unpaired records
    as written (they would be dropped)."""
    monkeypatch.setattr(producing, "put_records", Script([[OK]]))
    one = lane_with([entry("a"), entry("b")])
    with pytest.raises(ValueError, match="zip"):
        one.drain(time.monotonic() + 60)
    assert [e.data for e in one.pending] == [b"a", b"b"] and one.stats.records == 0


def test_a_lane_that_never_finishes_within_its_call_bound_says_it_is_a_bug(monkeypatch):
    Sleeps(monkeypatch)
    monkeypatch.setattr(producing, "MAX_PUT_CALLS", 3)
    put = Script(*([[refused()]] * 5))
    monkeypatch.setattr(producing, "put_records", put)
    with pytest.raises(SinkWriteError) as info:
        lane_with([entry("a")]).drain(time.monotonic() + 60)
    assert str(info.value) == "a write lane made 3 PutRecords calls without finishing: a bug"
    assert len(put.calls) == 3


def test_an_empty_lane_makes_no_call(monkeypatch):
    put = Script()
    monkeypatch.setattr(producing, "put_records", put)
    lane_with([]).drain(time.monotonic() + 60)
    assert put.calls == []


# -- the producer -------------------------------------------------------------------------------------------


def test_without_preserve_order_records_go_round_robin_in_runs_of_a_calls_size():
    producer = Producer(config(concurrency=3, max_records_per_request=2), buffer_records=100)
    try:
        for n in range(8):
            producer.add(entry(str(n)))
        assert [[e.data for e in lane.pending] for lane in producer.lanes] == [
            [b"0", b"1", b"6", b"7"],
            [b"2", b"3"],
            [b"4", b"5"],
        ]
    finally:
        producer.close()


def test_with_preserve_order_a_key_always_goes_to_its_lane():
    producer = Producer(config(concurrency=4, preserve_order=True), buffer_records=100)
    try:
        added = [entry(str(n), f"k{n % 5}", stream=f"s{n % 2}") for n in range(20)]
        added.append(entry("agg", "k0", order="shardId-1"))
        for one in added:
            producer.add(one)
        for number, lane in enumerate(producer.lanes):
            for one in lane.pending:
                assert zlib.crc32(f"{one.stream}\0{one.order_key}".encode()) % 4 == number
        assert sum(len(lane.pending) for lane in producer.lanes) == 21
    finally:
        producer.close()


def test_a_full_buffer_flushes_by_count_and_by_bytes(monkeypatch):
    put = Script()
    monkeypatch.setattr(producing, "put_records", put)
    by_count = Producer(config(concurrency=2), buffer_records=3, buffer_bytes=10**9)
    by_bytes = Producer(config(concurrency=2), buffer_records=10**9, buffer_bytes=10)
    try:
        by_count.add(entry("a"))
        by_count.add(entry("b"))
        assert put.calls == [] and by_count._buffered == 2
        by_count.add(entry("c"))
        assert len(put.calls) == 1 and by_count._buffered == 0 and by_count.stats.records == 3
        by_bytes.add(entry("x" * 8))  # 9 bytes with its key
        assert len(put.calls) == 1 and by_bytes._buffered_bytes == 9
        by_bytes.add(entry(""))  # 10
        assert len(put.calls) == 2 and (by_bytes._buffered, by_bytes._buffered_bytes) == (0, 0)
    finally:
        by_count.close()
        by_bytes.close()


def test_flush_sends_every_lane_and_shares_one_stats(monkeypatch):
    put = Script()
    monkeypatch.setattr(producing, "put_records", put)
    producer = Producer(config(concurrency=3, max_records_per_request=1), buffer_records=100)
    try:
        for n in range(5):
            producer.add(entry(str(n)))
        producer.flush()
        assert sorted(e["Data"] for _, _, entries in put.calls for e in entries) == [
            b"0",
            b"1",
            b"2",
            b"3",
            b"4",
        ]
        assert producer.stats.records == 5 and all(lane.stats is producer.stats for lane in producer.lanes)
        assert all(lane.pending == [] for lane in producer.lanes)
    finally:
        producer.close()


def test_flush_lets_every_lane_finish_then_raises_the_first_error(monkeypatch):
    Sleeps(monkeypatch)

    def put(settings, stream, entries):
        return [refused() if e["Data"] == b"0" else OK for e in entries]

    monkeypatch.setattr(producing, "put_records", put)
    producer = Producer(
        config(concurrency=2, max_records_per_request=1, max_retry_time_ms=0), buffer_records=100
    )
    try:
        producer.add(entry("0"))
        producer.add(entry("1"))
        with pytest.raises(SinkWriteError, match=r"^1 records could not be written"):
            producer.flush()
        assert [e.data for e in producer.lanes[0].pending] == [b"0"] and producer.lanes[1].pending == []
        assert producer._buffered == 0
    finally:
        producer.close()


def test_flush_gives_lanes_max_retry_time_from_now(monkeypatch):
    deadlines: list[float] = []
    monkeypatch.setattr(Lane, "drain", lambda self, deadline: deadlines.append(deadline))
    monkeypatch.setattr(producing.time, "monotonic", lambda: 500.0)
    producer = Producer(config(concurrency=2, max_retry_time_ms=2500), buffer_records=100)
    try:
        producer.add(entry("a"))
        producer.flush()
        assert deadlines == [502.5]  # and the empty lane was not drained
    finally:
        producer.close()


def test_a_producer_has_one_lane_and_one_thread_per_concurrency():
    producer = Producer(config(concurrency=3))
    try:
        assert len(producer.lanes) == 3 and producer._pool._max_workers == 3
        assert (producer.buffer_records, producer.buffer_bytes) == (20_000, 64 * 1024 * 1024)
        assert (producer._buffered, producer._buffered_bytes, producer._next_lane) == (0, 0, 0)
        assert all(lane.config is producer.config for lane in producer.lanes)
    finally:
        producer.close()
    with pytest.raises(RuntimeError):
        producer._pool.submit(print)
