"""Executor-side fetching: read one shard from a start position, either as far as the batch's limits
allow (first attempt) or exactly up to a recorded end (replay), into Arrow-ready columns.

Reads stop on the first response that shows the shard caught up (MillisBehindLatest 0) instead of
waiting on a timer, GetRecords calls on one shard are spaced at least 200 ms apart (the service's 5
calls/s), and an expired iterator is re-obtained from the last position read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa
from botocore.exceptions import ClientError

from .aws.kinesis import KinesisProxy
from .deaggregation import deaggregate
from .errors import DataLossError
from .offsets import ShardEnd
from .positions import AFTER, END, INSIDE, Position, seq_key
from .schema import ARROW_SCHEMA

MAX_GET_RECORDS = 10_000
MIN_CALL_SPACING_S = 0.2  # 5 GetRecords calls per second per shard
_MAX_CALLS = 100_000  # hard bound on one shard's calls in one batch (the time budget stops it first)

_pace_lock = threading.Lock()
_last_call: dict[tuple[str, str], float] = {}


def _pace(stream: str, shard: str) -> None:
    """Keep this process's GetRecords calls on one shard at most 5 per second."""
    key = (stream, shard)
    with _pace_lock:
        last = _last_call.get(key, 0.0)
        wait = last + MIN_CALL_SPACING_S - time.monotonic()
        _last_call[key] = max(time.monotonic(), last + MIN_CALL_SPACING_S)
    if wait > 0:
        time.sleep(wait)


@dataclass
class ShardLimits:
    max_records: int  # -1: unbounded (replay)
    max_bytes: int
    cutoff_ms: int | None = None
    deadline: float = float("inf")  # time.monotonic() after which no new call starts


@dataclass
class Columns:
    """One shard's rows as column lists, turned into an Arrow batch at the end."""

    stream: str
    shard: str
    data: list[bytes] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    seqs: list[str] = field(default_factory=list)
    subs: list[int] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)  # epoch microseconds

    def __len__(self) -> int:
        return len(self.data)

    def to_arrow(self) -> pa.RecordBatch:
        n = len(self.data)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.data, pa.binary()),
                pa.array([self.stream] * n, pa.string()),
                pa.array([self.shard] * n, pa.string()),
                pa.array(self.keys, pa.string()),
                pa.array(self.seqs, pa.string()),
                pa.array(self.subs, pa.int64()),
                pa.array(self.arrivals, pa.timestamp("us", tz="UTC")),
            ],
            schema=ARROW_SCHEMA,
        )


def _before_or_at(seq: str, sub: int, until: Position) -> bool:
    """True while user record (seq, sub) lies at or before the recorded end `until`."""
    if until.kind == END:
        return True
    key, end_key = seq_key(seq), seq_key(until.seq or "0")
    if key != end_key:
        return key < end_key
    return until.kind == AFTER or sub <= until.sub


def _reached(seq: str, sub: int, total: int, until: Position) -> bool:
    """True when (seq, sub) is the last user record a replay up to `until` must produce."""
    if until.kind == AFTER:
        return seq == until.seq and sub == total - 1
    if until.kind == INSIDE:
        return seq == until.seq and sub == until.sub
    return False


def fetch_shard(
    proxy: KinesisProxy,
    shard: str,
    start: Position,
    limits: ShardLimits,
    until: Position | None = None,
    fail_on_data_loss: bool = True,
) -> tuple[Columns, ShardEnd]:
    """Read `shard` from `start`. With `until`, produce exactly the records up to that recorded end."""
    cols = Columns(proxy.stream, shard)
    if start.is_end or (until is not None and until == start):
        return cols, ShardEnd(start=start, end=start)
    iterator: str | None = proxy.shard_iterator(shard, start)
    last: tuple[str, int, int] | None = None  # (seq, sub, subs in that record) of the last row taken
    n_bytes = 0
    at_tip = reached_cutoff = closed = stop = done_until = False
    children: tuple[str, ...] = ()
    behind = -1
    for _call in range(_MAX_CALLS):
        if iterator is None or stop:
            break
        if until is None and time.monotonic() > limits.deadline:
            break
        _pace(proxy.stream, shard)
        try:
            want = MAX_GET_RECORDS
            if until is None and limits.max_records > 0:
                want = max(1, min(MAX_GET_RECORDS, limits.max_records - len(cols)))
            response = proxy.get_records(iterator, want)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                raise
            resume = start if last is None else _position_after(*last)
            iterator = proxy.shard_iterator(shard, resume)
            continue
        records = response["Records"]
        for record in records:
            seq = record["SequenceNumber"]
            arrival = record["ApproximateArrivalTimestamp"]
            arrival_us = int(arrival.timestamp() * 1_000_000)
            if until is None and limits.cutoff_ms is not None and arrival_us > limits.cutoff_ms * 1000:
                reached_cutoff = stop = True
                break
            users = deaggregate(record["Data"])
            if users is None:
                users = [(record["PartitionKey"], None, record["Data"])]
            total = len(users)
            for sub, (key, _hash_key, payload) in enumerate(users):
                if start.skips(seq, sub):
                    continue
                if until is not None:
                    if not _before_or_at(seq, sub, until):
                        stop = done_until = True
                        break
                elif len(cols) > 0 and (
                    (limits.max_records > 0 and len(cols) >= limits.max_records)
                    or (limits.max_bytes > 0 and n_bytes + len(payload) > limits.max_bytes)
                ):
                    stop = True
                    break
                cols.data.append(payload)
                cols.keys.append(key)
                cols.seqs.append(seq)
                cols.subs.append(sub)
                cols.arrivals.append(arrival_us)
                n_bytes += len(payload)
                last = (seq, sub, total)
                if until is not None and _reached(seq, sub, total, until):
                    stop = done_until = True
                    break
            if stop:
                break
        if stop:
            break
        iterator = response.get("NextShardIterator")
        behind = int(response.get("MillisBehindLatest", -1))
        if iterator is None:
            closed = True
            children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            break
        if until is None and behind == 0:
            at_tip = not records
            break
        if until is not None and not records and behind == 0:
            break  # at the tip without meeting the recorded end: handled below
    if until is not None:
        if (until.kind == END and not closed) or (until.kind != END and not done_until):
            _lost(fail_on_data_loss, proxy, shard, start, until)
        end = until
    elif closed and not stop:
        end = Position.shard_end()
    elif last is None:
        end = start
    else:
        end = _position_after(*last)
    return cols, ShardEnd(
        start=start,
        end=end,
        records=len(cols),
        bytes=n_bytes,
        at_tip=at_tip,
        reached_cutoff=reached_cutoff,
        children=children,
        millis_behind=behind,
        read_at_ms=int(time.time() * 1000),
    )


def _position_after(seq: str, sub: int, total: int) -> Position:
    return Position.after(seq) if sub >= total - 1 else Position.inside(seq, sub)


def _lost(fail: bool, proxy: KinesisProxy, shard: str, start: Position, until: Position) -> None:
    if fail:
        raise DataLossError(
            f"Replaying a logged batch of stream '{proxy.stream}', shard {shard} could not reach its recorded "
            f"end {until.to_json()} from {start.to_json()}: the records are no longer in the stream (past "
            "retention?). Set failOnDataLoss=false to accept the loss and go on."
        )
