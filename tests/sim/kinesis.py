"""A model of Kinesis Data Streams, and the botocore client the connector's `KinesisProxy` calls it by.

What it keeps: streams of shards, each with its hash key range, lineage and records (sequence numbers
that grow with gaps, children's above their parents'); retention that trims records by the simulated
clock, and closed shards that leave the listing once their last record aged out; splits, merges and
UpdateShardCount; iterators that expire after 5 minutes; ListShards pages; the read quotas (5
GetRecords calls and 2 MB per second per shard, 5 GetShardIterator calls per second per shard) and
the control plane's (DescribeStreamSummary 20/s per account, RegisterStreamConsumer's 20 consumer
slots); transient failures in fault windows; empty pages mid-shard. Servers differ where the
connector must cope with each (`Flavor`): how a closed shard ends (the service: no next iterator and
`ChildShards`; kinesalite: an empty page first; moto: never), how a trimmed sequence number is
answered (an error, or an iterator at the oldest record left).

The client answers as botocore does once its own parser ran (GetRecords' `Records` as the Arrow
columns the connector's parser makes) and raises `ClientError`s with the service's codes; it retries
throttling and 5xx as botocore's standard mode does, up to the attempts the connector configured,
sleeping on the simulated clock.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import itertools
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from botocore.exceptions import ClientError

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.model import HASH_KEY_SPACE, effective_hash_key

from .clock import SimClock, chance
from .store import SimCrash

SEQ_BASE = 49_600_000_000_000_000_000_000  # sequence numbers look like the service's (and exceed a long)
ITERATOR_LIFE_MS = 300_000
LIST_PAGE = 3  # shards per ListShards page (small, so every listing pages)
CONSUMER_SLOTS = 20
THROTTLE_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException"}
)


EMPTY = Records.from_lists([], [], [], [])  # (an empty page's records: made once, never changed)


class Flavor(Enum):
    SERVICE = "service"  # a closed shard ends with no next iterator and its ChildShards
    KINESALITE = "kinesalite"  # an empty page first, then the end (no ChildShards)
    MOTO = "moto"  # never ends a closed shard: empty pages and a next iterator, for ever


def error(code: str, message: str = "", operation: str = "", status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


@dataclass
class Rec:
    """One Kinesis record: what was put, and which user records (ids) it carries."""

    seq: int
    arrival_ms: int
    key: str | None
    explicit: str | None
    data: bytes
    users: tuple[int, ...]


@dataclass
class Shard:
    sid: str
    parent: str | None
    adjacent: str | None
    low: int
    high: int
    first_seq: int
    created_ms: int
    closed_ms: int | None = None
    end_seq: int | None = None
    recs: list[Rec] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    ends_seen: set[int] = field(
        default_factory=set
    )  # kinesalite: positions whose end was answered empty once

    @property
    def open(self) -> bool:
        return self.closed_ms is None

    def holds(self, hash_value: int) -> bool:
        return self.low <= hash_value <= self.high


NEVER_MS = 10**15  # (a record kept this long is kept for every run)


@dataclass
class Stream:
    name: str
    arn: str
    created_ms: int
    retention_ms: int
    flavor: Flavor
    trimmed_seq_error: bool  # a trimmed AT/AFTER_SEQUENCE_NUMBER: an error (else the oldest record left)
    shards: dict[str, Shard] = field(default_factory=dict)
    counter: int = 0
    next_index: int = 0
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def keeps_ms(self) -> int:
        """How long the server keeps a record: the retention it reports, except that moto keeps every
        record for ever (it stores the retention and never trims; found by the long run, where a moto
        stream that trimmed met a closed shard moto never ends, a pairing no real server has)."""
        return NEVER_MS if self.flavor is Flavor.MOTO else self.retention_ms

    def trim_index(self, shard: Shard, now: int) -> int:
        """Index of the shard's oldest record left: those that arrived a retention ago or before are gone."""
        return bisect.bisect_right(shard.arrivals, now - self.keeps_ms)

    def expired(self, shard: Shard, now: int) -> bool:
        """A closed shard whose every record aged out is no longer listed (and cannot be read)."""
        return shard.closed_ms is not None and now - shard.closed_ms >= self.keeps_ms

    def new_seq(self, gap: int = 1) -> int:
        self.counter += gap
        return SEQ_BASE + self.counter


class Quota:
    """At most `calls` calls (and `bytes_` bytes) per second per key, on the simulated clock."""

    def __init__(self, calls: int, bytes_: int = 0) -> None:
        self.calls, self.bytes_ = calls, bytes_
        self._seen: dict[Any, deque[tuple[int, int]]] = {}

    def admit(self, key: Any, now: int) -> bool:
        window = self._seen.setdefault(key, deque())
        while window and window[0][0] <= now - 1000:
            window.popleft()
        if len(window) >= self.calls:
            return False
        if self.bytes_ and sum(b for _t, b in window) >= self.bytes_:
            return False
        window.append((now, 0))
        return True

    def took(self, key: Any, n_bytes: int) -> None:
        window = self._seen.get(key)
        if window:
            at, _ = window[-1]
            window[-1] = (at, n_bytes)


@dataclass
class Faults:
    """Failures the schedule turns on for a while: each call of an affected kind fails with this rate."""

    until_ms: int = 0
    rate: float = 0.0
    calls: frozenset[str] = frozenset()
    code: str = "InternalFailure"

    def strikes(self, operation: str, now: int, roll: float) -> bool:
        return now < self.until_ms and operation in self.calls and roll < self.rate


class KinesisModel:
    """Every stream of the simulated account, and the calls made to them (for the oracles and quotas)."""

    def __init__(self, clock: SimClock, seed: int) -> None:
        self.clock, self.seed = clock, seed
        self.streams: dict[str, Stream] = {}  # by ARN
        self.by_name: dict[str, str] = {}
        self.get_records_quota = Quota(5, 2 * 1024 * 1024)
        self.iterator_quota = Quota(5)
        self.summary_quota = Quota(20)
        self.faults = Faults()
        self.calls = 0
        self.violations: list[
            str
        ] = []  # quota refusals the connector met (counted, not fatal: the service refuses too)
        self.latency_ms = 5
        self.crash_at_call = 0  # the process making this call dies (an executor lost mid-read)
        self.before_call: Any = None  # the runner's hook: what the schedule does up to now happens first

    # -- administration (the schedule's) --------------------------------------------------------
    def create(
        self, name: str, shards: int, retention_h: int, flavor: Flavor, trimmed_seq_error: bool
    ) -> Stream:
        arn = f"arn:aws:kinesis:us-east-1:000000000000:stream/{name}"
        stream = Stream(name, arn, self.clock.now_ms, retention_h * 3_600_000, flavor, trimmed_seq_error)
        step = HASH_KEY_SPACE // shards
        for n in range(shards):
            high = HASH_KEY_SPACE - 1 if n == shards - 1 else (n + 1) * step - 1
            self._add_shard(stream, None, None, n * step, high)
        self.streams[arn], self.by_name[name] = stream, arn
        return stream

    def _add_shard(
        self, stream: Stream, parent: str | None, adjacent: str | None, low: int, high: int
    ) -> Shard:
        sid = f"shardId-{stream.next_index:012d}"
        stream.next_index += 1
        shard = Shard(sid, parent, adjacent, low, high, stream.new_seq(), self.clock.now_ms)
        stream.shards[sid] = shard
        return shard

    def _close(self, stream: Stream, shard: Shard) -> None:
        shard.closed_ms = self.clock.now_ms
        shard.end_seq = stream.new_seq()  # (every record of the shard lies at or below it)
        if stream.flavor is Flavor.MOTO:  # moto reports the last record's sequence number
            shard.end_seq = shard.seqs[-1] if shard.seqs else shard.first_seq

    def open_shards(self, stream: Stream) -> list[Shard]:
        return sorted((s for s in stream.shards.values() if s.open), key=lambda s: s.low)

    def split(self, stream: Stream, sid: str, at: int) -> None:
        shard = stream.shards[sid]
        if not shard.open or not shard.low < at <= shard.high:
            return
        self._close(stream, shard)
        self._add_shard(stream, sid, None, shard.low, at - 1)
        self._add_shard(stream, sid, None, at, shard.high)

    def merge(self, stream: Stream, sid: str, other: str) -> None:
        a, b = sorted((stream.shards[sid], stream.shards[other]), key=lambda s: s.low)
        if not (a.open and b.open and a.high + 1 == b.low):
            return
        self._close(stream, a)
        self._close(stream, b)
        self._add_shard(stream, a.sid, b.sid, a.low, b.high)

    def scale(self, stream: Stream, count: int) -> None:
        """UpdateShardCount: splits of the widest shards, or merges of the narrowest adjacent pairs,
        until `count` shards are open (as the service does it: a series of splits and merges)."""
        for _step in range(64):
            shards = self.open_shards(stream)
            if len(shards) == count:
                return
            if len(shards) < count:
                widest = max(shards, key=lambda s: s.high - s.low)
                self.split(stream, widest.sid, widest.low + (widest.high - widest.low + 1) // 2)
            else:
                pairs = list(itertools.pairwise(shards))
                a, b = min(pairs, key=lambda p: p[1].high - p[0].low)
                self.merge(stream, a.sid, b.sid)

    # -- data ------------------------------------------------------------------------------------------
    def put(
        self, stream: Stream, key: str | None, explicit: str | None, data: bytes, users: tuple[int, ...]
    ) -> Shard:
        """One record, placed by its effective hash key into the open shard that holds it."""
        where = effective_hash_key(key or "", explicit)
        assert where is not None, "the service refuses an explicit hash key that is no number"
        shard = next(s for s in self.open_shards(stream) if s.holds(where))
        gap = 1 + int(chance(self.seed, "gap", stream.counter) * 3)
        rec = Rec(stream.new_seq(gap), self.clock.now_ms, key, explicit, data, users)
        shard.recs.append(rec)
        shard.arrivals.append(rec.arrival_ms)
        shard.seqs.append(rec.seq)
        return shard

    # -- the client the connector's KinesisProxy is given ---------------------------------------------------
    def client(self, max_attempts: int | None) -> SimClient:
        return SimClient(self, max_attempts or 10)


class SimClient:
    """botocore's Kinesis client as the connector calls it, against the model."""

    def __init__(self, model: KinesisModel, max_attempts: int) -> None:
        self.model, self.max_attempts = model, max_attempts

    def _call(self, operation: str, fn: Any, *args: Any) -> Any:
        """botocore's standard retry mode: throttling and 5xx tried again after a jittered exponential
        backoff (at most 20 s), up to the configured attempts; each attempt takes the model's latency."""
        model = self.model
        for attempt in range(self.max_attempts):
            model.clock.advance_ms(model.latency_ms)
            model.calls += 1
            if model.before_call is not None:
                model.before_call()
            if model.crash_at_call and model.calls >= model.crash_at_call:
                model.crash_at_call = 0
                raise SimCrash(f"the process died during a {operation} call")
            roll = chance(model.seed, "fault", operation, model.calls)
            try:
                if model.faults.strikes(operation, model.clock.now_ms, roll):
                    status = 400 if model.faults.code in THROTTLE_CODES else 500
                    raise error(model.faults.code, "injected", operation, status)
                return fn(*args)
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
                if (code not in THROTTLE_CODES and status < 500) or attempt + 1 == self.max_attempts:
                    raise
                # (botocore's standard mode: exponential with jitter, at most 20 s)
                pause = (0.5 + 0.5 * chance(model.seed, "backoff", model.calls)) * min(20.0, 2.0**attempt)
                model.clock.advance_ms(int(pause * 1000))
        raise AssertionError("unreachable")

    # -- the stream ----------------------------------------------------------------------------------
    def _stream(self, kwargs: dict[str, Any]) -> Stream:
        arn = kwargs.get("StreamARN") or self.model.by_name.get(kwargs.get("StreamName", ""))
        stream = self.model.streams.get(arn or "")
        if stream is None:
            raise error("ResourceNotFoundException", "Stream not found", "Kinesis")
        return stream

    def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            if not self.model.summary_quota.admit("account", self.model.clock.now_ms):
                self.model.violations.append("DescribeStreamSummary over 20/s")
                raise error("LimitExceededException", "Rate exceeded", "DescribeStreamSummary")
            stream = self._stream(kwargs)
            return {
                "StreamDescriptionSummary": {
                    "StreamName": stream.name,
                    "StreamARN": stream.arn,
                    "StreamStatus": "ACTIVE",
                    "RetentionPeriodHours": stream.retention_ms // 3_600_000,
                    "StreamCreationTimestamp": dt.datetime.fromtimestamp(stream.created_ms / 1000, dt.UTC),
                    "OpenShardCount": len(self.model.open_shards(stream)),
                }
            }

        return self._call("DescribeStreamSummary", call)

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            token = kwargs.get("NextToken")
            if token is not None:
                arn, start, open_only = token.split("|")
                stream = self.model.streams[arn]
                index, only_open = int(start), open_only == "1"
            else:
                stream = self._stream(kwargs)
                index = 0
                only_open = kwargs.get("ShardFilter", {}).get("Type") == "AT_LATEST"
            now = self.model.clock.now_ms
            listed = [s for s in stream.shards.values() if not stream.expired(s, now)]
            if only_open:
                listed = [s for s in listed if s.open]
            page = listed[index : index + LIST_PAGE]
            out: dict[str, Any] = {"Shards": [_shard_json(s) for s in page]}
            if index + LIST_PAGE < len(listed):
                out["NextToken"] = f"{stream.arn}|{index + LIST_PAGE}|{int(only_open)}"
            return out

        return self._call("ListShards", call)

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("GetShardIterator", self._iterator, kwargs)

    def _iterator(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        model, now = self.model, self.model.clock.now_ms
        stream = self._stream(kwargs)
        shard = stream.shards.get(kwargs["ShardId"])
        if shard is None or stream.expired(shard, now):
            raise error(
                "ResourceNotFoundException", f"Shard {kwargs['ShardId']} not found", "GetShardIterator"
            )
        if not model.iterator_quota.admit((stream.arn, shard.sid), now):
            model.violations.append("GetShardIterator over 5/s on a shard")
            raise error("ProvisionedThroughputExceededException", "Rate exceeded", "GetShardIterator")
        kind = kwargs["ShardIteratorType"]
        trim = stream.trim_index(shard, now)
        if kind == "TRIM_HORIZON":
            after = -1
        elif kind == "LATEST":
            after = shard.seqs[-1] if shard.seqs else shard.first_seq
        elif kind == "AT_TIMESTAMP":
            at = kwargs["Timestamp"]
            at_ms = int(at.timestamp() * 1000) if isinstance(at, dt.datetime) else int(float(at) * 1000)
            if at_ms > now + 1000:
                raise error("InvalidArgumentException", "The timestamp is in the future", "GetShardIterator")
            index = bisect.bisect_left(shard.arrivals, at_ms)
            after = shard.seqs[index - 1] if index > 0 else -1
        else:
            seq = int(kwargs["StartingSequenceNumber"])
            if seq < shard.first_seq or (shard.end_seq is not None and seq > shard.end_seq):
                raise error(
                    "InvalidArgumentException",
                    f"StartingSequenceNumber {seq} used in GetShardIterator on shard {shard.sid} is invalid",
                    "GetShardIterator",
                )
            index = bisect.bisect_left(shard.seqs, seq)
            if index < trim and stream.trimmed_seq_error:
                raise error(
                    "InvalidArgumentException",
                    f"StartingSequenceNumber {seq} is past retention: the sequence number is trimmed",
                    "GetShardIterator",
                )
            after = seq - 1 if kind == "AT_SEQUENCE_NUMBER" else seq
        return {"ShardIterator": f"{stream.arn}|{shard.sid}|{after}|{now}"}

    def get_records(self, ShardIterator: str, Limit: int = 10_000) -> dict[str, Any]:
        return self._call("GetRecords", self._records, ShardIterator, Limit)

    def _records(self, token: str, limit: int) -> dict[str, Any]:
        model, now = self.model, self.model.clock.now_ms
        arn, sid, after_text, issued = token.split("|")
        if now - int(issued) > ITERATOR_LIFE_MS:
            raise error("ExpiredIteratorException", "Iterator expired", "GetRecords")
        stream = model.streams.get(arn)
        shard = stream.shards.get(sid) if stream is not None else None
        if stream is None or shard is None or stream.expired(shard, now):
            raise error("ResourceNotFoundException", f"Shard {sid} not found", "GetRecords")
        if not model.get_records_quota.admit((arn, sid), now):
            model.violations.append("GetRecords over 5 calls or 2 MB per second on a shard")
            raise error("ProvisionedThroughputExceededException", "Rate exceeded for shard", "GetRecords")
        after = int(after_text)
        start = max(bisect.bisect_right(shard.seqs, after), stream.trim_index(shard, now))
        left = len(shard.recs) - start
        roll = chance(model.seed, "page", arn, sid, after, now)
        take = min(limit, 10_000, left)
        if left and roll < 0.05:
            take = 0  # an empty page mid-shard (the service answers some)
        elif left and roll < 0.25:
            take = max(1, min(take, int(roll * 40)))  # a short page
        page = shard.recs[start : start + take]
        size = 0
        for rec in page:
            size += len(rec.data)
            if size > 10 * 1024 * 1024 and rec is not page[0]:
                page = page[: page.index(rec)]
                break
        model.get_records_quota.took((arn, sid), sum(len(r.data) for r in page))
        remaining = left - len(page)
        last = page[-1].seq if page else (shard.seqs[start - 1] if start > 0 and start - 1 >= 0 else after)
        last = max(last, after)
        out: dict[str, Any] = {
            "Records": Records.from_lists(
                [str(r.seq) for r in page],
                [r.key for r in page],
                [r.data for r in page],
                [r.arrival_ms / 1000.0 for r in page],
            )
            if page
            else EMPTY,
            "MillisBehindLatest": max(1, now - shard.recs[start + len(page)].arrival_ms) if remaining else 0,
        }
        if remaining or shard.open or not self._at_end(stream, shard, last):
            out["NextShardIterator"] = f"{arn}|{sid}|{last}|{now}"
        elif stream.flavor is Flavor.SERVICE:
            out["ChildShards"] = [
                {"ShardId": c.sid, "ParentShards": [p for p in (c.parent, c.adjacent) if p],
                 "HashKeyRange": {"StartingHashKey": str(c.low), "EndingHashKey": str(c.high)}}
                for c in stream.shards.values() if sid in (c.parent, c.adjacent)
            ]  # fmt: skip
        return out

    def _at_end(self, stream: Stream, shard: Shard, position: int) -> bool:
        """A closed shard read to its end: the service says so at once, kinesalite after one empty page
        more, moto never."""
        if stream.flavor is Flavor.MOTO:
            return False
        if stream.flavor is Flavor.KINESALITE and position not in shard.ends_seen:
            shard.ends_seen.add(position)
            return False
        return True

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            stream = self._stream(kwargs)
            results = []
            for index, entry in enumerate(kwargs["Records"]):
                if chance(self.model.seed, "put", self.model.calls, index) < self.model.put_failure_rate:
                    results.append(
                        {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"}
                    )
                    continue
                shard = self.model.put(
                    stream, entry.get("PartitionKey"), entry.get("ExplicitHashKey"), entry["Data"], ()
                )
                results.append({"SequenceNumber": str(shard.seqs[-1]), "ShardId": shard.sid})
            failed = sum(1 for r in results if "ErrorCode" in r)
            return {"FailedRecordCount": failed, "Records": results}

        return self._call("PutRecords", call)

    # -- enhanced fan-out consumers (what a query start registers) -------------------------------------
    def describe_stream_consumer(self, **kwargs: Any) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            for stream in self.model.streams.values():
                for consumer in stream.consumers.values():
                    if kwargs.get("ConsumerARN") == consumer["ConsumerARN"] or (
                        kwargs.get("StreamARN") == stream.arn
                        and kwargs.get("ConsumerName") == consumer["ConsumerName"]
                    ):
                        return {"ConsumerDescription": {**consumer, "StreamARN": stream.arn}}
            raise error("ResourceNotFoundException", "Consumer not found", "DescribeStreamConsumer")

        return self._call("DescribeStreamConsumer", call)

    def register_stream_consumer(self, **kwargs: Any) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            stream = self._stream(kwargs)
            name = kwargs["ConsumerName"]
            if name in stream.consumers:
                raise error("ResourceInUseException", "Consumer exists", "RegisterStreamConsumer")
            if len(stream.consumers) >= CONSUMER_SLOTS:
                raise error(
                    "LimitExceededException",
                    f"Only {CONSUMER_SLOTS} consumers can be registered to a stream at once",
                    "RegisterStreamConsumer",
                )
            consumer = {
                "ConsumerName": name,
                "ConsumerARN": f"{stream.arn}/consumer/{name}:1",
                "ConsumerStatus": "ACTIVE",
                "ConsumerCreationTimestamp": dt.datetime.fromtimestamp(
                    self.model.clock.now_ms / 1000, dt.UTC
                ),
            }
            stream.consumers[name] = consumer
            return {"Consumer": consumer}

        return self._call("RegisterStreamConsumer", call)

    def list_stream_consumers(self, **kwargs: Any) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            return {"Consumers": list(self._stream(kwargs).consumers.values())}

        return self._call("ListStreamConsumers", call)


KinesisModel.put_failure_rate = 0.0  # (the sink's part of a run sets it)


def _shard_json(shard: Shard) -> dict[str, Any]:
    seqs: dict[str, str] = {"StartingSequenceNumber": str(shard.first_seq)}
    if shard.end_seq is not None:
        seqs["EndingSequenceNumber"] = str(shard.end_seq)
    out: dict[str, Any] = {
        "ShardId": shard.sid,
        "HashKeyRange": {"StartingHashKey": str(shard.low), "EndingHashKey": str(shard.high)},
        "SequenceNumberRange": seqs,
    }
    if shard.parent:
        out["ParentShardId"] = shard.parent
    if shard.adjacent:
        out["AdjacentParentShardId"] = shard.adjacent
    return out


def md5_hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest(), "big")
