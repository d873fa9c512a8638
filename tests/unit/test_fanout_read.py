"""What a fan-out read concludes from the events it is handed (no server: the events are made here and
the one GetRecords that confirms a closed shard's end is replaced by its outcome)."""

from __future__ import annotations

import time
from dataclasses import replace

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.aws.kinesis import KinesisProxy
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.cutting import ShardLimits
from pyspark_kinesis.source.fanout import FanOutRead
from pyspark_kinesis.source.fetching import CLOSED_EMPTY_READS
from pyspark_kinesis.source.options import parse_options

SPEC = parse_options(
    {
        "streamName": "orders",
        "region": "eu-west-1",
        "endpointUrl": "http://127.0.0.1:9",
        "metadataPath": "/m",
    },
    streaming=True,
).streams[0]
SPEC = replace(SPEC, arn="arn:aws:kinesis:eu-west-1:123456789012:stream/orders")  # resolved at query start


def _read(closed: bool, cutoff_ms: int | None = None) -> FanOutRead:
    limits = ShardLimits(max_records=1000, max_bytes=10**7, cutoff_ms=cutoff_ms, closed=closed)
    read = FanOutRead(
        KinesisProxy(SPEC, agent="reader"), "shardId-000000000001", Position.after("100"), limits
    )
    read.link, read.read_wall = None, time.time() - 60
    return read


def _event(seqs: list[str], behind: int = 0, received: float | None = None) -> dict:
    return {
        "Records": Records.from_lists(seqs, ["k"] * len(seqs), [b"x"] * len(seqs), [1.0] * len(seqs)),
        "NextShardIterator": seqs[-1] if seqs else "100",
        "MillisBehindLatest": behind,
        "ReceivedAt": time.time() if received is None else received,
    }


def test_a_closed_shard_whose_end_is_not_confirmed_is_not_at_the_tip():
    """An AvailableNow run takes a shard at the tip as done for the run; a closed shard taken as done
    before its end was confirmed would leave its children unread (found by the chaos suite)."""
    read = _read(closed=True, cutoff_ms=int(time.time() * 1000))
    read._confirm_closed = lambda: None  # the confirming GetRecords failed (throttled): no verdict
    over = False
    for _event_number in range(CLOSED_EMPTY_READS + 1):
        over = read._absorb(_event([]))
        if over:
            break
    assert over
    assert not read.at_tip and not read.closed


def test_a_closed_shard_confirmed_at_its_end_is_closed():
    read = _read(closed=True, cutoff_ms=int(time.time() * 1000))

    def confirmed() -> None:
        read.closed, read.at_tip = True, False

    read._confirm_closed = confirmed
    for _event_number in range(CLOSED_EMPTY_READS + 1):
        if read._absorb(_event([])):
            break
    assert read.closed


def test_an_event_pushed_before_the_read_started_proves_no_tip():
    """Events wait in the agent between batches; "MillisBehindLatest 0" on one pushed before this read
    started was true then, not now, so it must not end an AvailableNow read."""
    read = _read(closed=False, cutoff_ms=int(time.time() * 1000))
    stale = _event(["101", "102"], behind=0, received=read.read_wall - 5)
    assert not read._absorb(stale) and not read.at_tip
    fresh = _event(["103"], behind=0)
    assert read._absorb(fresh) and read.at_tip
    assert len(read.cols) == 3
