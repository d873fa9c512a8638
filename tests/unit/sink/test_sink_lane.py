"""The sink's retry lane against a scripted PutRecords: records refused inside a call are retried in
their place until they are in, nothing is dropped, order holds per key with preserveOrder, and a lane
that cannot finish within maxRetryTimeMs fails naming the count and the error."""

from __future__ import annotations

import threading
import time

import pytest

from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.errors import SinkWriteError
from pyspark_kinesis.sink import producing
from pyspark_kinesis.sink.options import SinkConfig
from pyspark_kinesis.sink.producing import Entry, Lane, WriteStats

THROTTLED = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded"}


class ScriptedPutRecords:
    """PutRecords that refuses the records `refuse(call, data)` says, and keeps the calls' contents."""

    def __init__(self, refuse) -> None:
        self.refuse, self.calls, self.stored = refuse, [], []

    def __call__(self, settings, stream: str, entries: list[dict]) -> list[dict]:
        call = len(self.calls)
        self.calls.append([e["Data"].decode() for e in entries])
        results = []
        for entry in entries:
            data = entry["Data"].decode()
            if self.refuse(call, data):
                results.append(THROTTLED)
            else:
                self.stored.append(data)
                results.append({"SequenceNumber": str(len(self.stored)), "ShardId": "shardId-0"})
        return results


def lane(preserve_order: bool = False, max_retry_ms: int = 5_000, per_call: int = 500) -> Lane:
    config = SinkConfig(
        "orders",
        AwsSettings(region="us-east-1"),
        max_retry_time_ms=max_retry_ms,
        preserve_order=preserve_order,
        max_records_per_request=per_call,
    )
    return Lane(config, WriteStats(), threading.Lock())


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(producing, "BASE_BACKOFF_S", 0.0001)
    monkeypatch.setattr(producing, "MAX_BACKOFF_S", 0.001)


def entries(count: int, keys: int = 3) -> list[Entry]:
    return [Entry("orders", f"r-{n}".encode(), f"k{n % keys}", None, n) for n in range(count)]


def test_records_refused_inside_a_call_are_retried_until_they_are_in(monkeypatch):
    put = ScriptedPutRecords(lambda call, data: call < 3 and int(data[2:]) % 2 == 0)
    monkeypatch.setattr(producing, "put_records", put)
    one = lane()
    one.pending = entries(20)
    one.drain(time.monotonic() + 5)
    assert sorted(put.stored) == sorted(f"r-{n}" for n in range(20)) and len(put.stored) == 20
    assert one.stats.records == 20 and one.stats.retried == 10 * 3 and one.pending == []


def test_with_preserve_order_no_record_overtakes_an_earlier_one_of_its_key(monkeypatch):
    put = ScriptedPutRecords(lambda call, data: call % 2 == 0)  # every other call refuses everything
    monkeypatch.setattr(producing, "put_records", put)
    one = lane(preserve_order=True)
    one.pending = entries(30, keys=4)
    one.drain(time.monotonic() + 5)
    assert len(put.stored) == 30
    for key in range(4):
        mine = [int(d[2:]) for d in put.stored if int(d[2:]) % 4 == key]
        assert mine == sorted(mine), f"key k{key} out of order: {mine}"
    assert all(len({int(d[2:]) % 4 for d in call}) == len(call) for call in put.calls)  # one per key a call


def test_the_call_limits_split_a_lane(monkeypatch):
    put = ScriptedPutRecords(lambda call, data: False)
    monkeypatch.setattr(producing, "put_records", put)
    one = lane(per_call=7)
    one.pending = entries(20)
    one.drain(time.monotonic() + 5)
    assert [len(c) for c in put.calls] == [7, 7, 6] and put.stored == [f"r-{n}" for n in range(20)]


def test_a_lane_that_cannot_finish_in_time_fails_and_drops_nothing(monkeypatch):
    put = ScriptedPutRecords(lambda call, data: data == "r-3")
    monkeypatch.setattr(producing, "put_records", put)
    one = lane(max_retry_ms=200)
    one.pending = entries(5)
    with pytest.raises(
        SinkWriteError, match=r"1 records could not be written.*ProvisionedThroughputExceeded"
    ):
        one.drain(time.monotonic() + 0.2)
    assert [e.data for e in one.pending] == [b"r-3"]  # still pending: the task fails, Spark retries it
