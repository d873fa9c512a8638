"""A model of DynamoDB Streams, and the botocore client the connector's `StreamsProxy` calls it by.

What it keeps (../shared/notes/anchors.md, 2026-11-28): a table's stream of shards, each with its
parent and records (sequence numbers that grow with gaps); the service's own shard changes, which
close a shard and open one child (a rollover) or two (a partition split), a child possibly listed
only minutes after its parent closed (a late child: the changes written meanwhile are in it already);
records readable for 24 hours (a position older than that: TrimmedDataAccessException); a stream
disabled (its open shards closed, readable for 24 hours, then gone: ResourceNotFoundException) and
enabled again (a new stream, a new ARN and label, one open shard; changes made while the stream was
disabled are in no stream); iterators
that expire after 15 minutes; DescribeStream pages (`ExclusiveStartShardId`, small here so that every
listing pages) and its ShardFilter for a closed shard's children; GetRecords of at most 1,000
records, empty pages in the middle of a shard (never three in a row: the connector takes three for
the tip, see aws/dynamodb_streams.py), and no next iterator at a closed shard's end.

An item's changes go to the open shard whose part of the key space holds the item's key: the
service does not say how it places items, and a model only needs each item's changes to stay in one
lineage, in order.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from .clock import SimClock, chance

SEQ_BASE = 100_000_000_000_000_000_000  # sequence numbers as long as the service's
RETENTION_MS = 24 * 3_600_000
ITERATOR_LIFE_MS = 15 * 60_000
DESCRIBE_PAGE = 3  # shards per DescribeStream page (small, so every listing pages)
SPACE = 2**32


class ExecutorLost(BaseException):
    """The executor running a read died at this call (`DynamoStreamModel.fail_at_call`): not an
    exception the task's code sees, as `store.SimCrash` is not."""


def error(code: str, message: str = "", operation: str = "") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation
    )


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


@dataclass
class Change:
    seq: int
    at_ms: int
    key: str
    name: str  # INSERT | MODIFY | REMOVE
    version: int  # the item's version after the change (what the oracle orders by)


@dataclass
class DShard:
    sid: str
    parent: str | None
    low: int
    high: int  # the part of the key space it holds: [low, high)
    start_seq: int
    listed_from_ms: int  # a late child is listed only from then on
    records: list[Change] = field(default_factory=list)
    end_seq: int | None = None  # closed: its EndingSequenceNumber
    arn: str = ""  # the stream it is a shard of


@dataclass
class DStream:
    arn: str
    label: str
    created_ms: int
    disabled_ms: int | None = None


class DynamoStreamModel:
    """One table's stream; `put`, `rollover`, `split` are the schedule's; the client is the connector's."""

    def __init__(self, clock: SimClock, seed: int, table: str = "orders") -> None:
        self.clock, self.seed, self.table = clock, seed, table
        self.streams: dict[str, DStream] = {}
        self.shards: dict[str, DShard] = {}
        self.next_seq = SEQ_BASE
        self.versions: dict[str, int] = {}
        self.calls = 0
        self.fail_at_call = 0  # the call at which the reading executor dies (0: none)
        self.throttle_rate = 0.0  # of calls answered LimitExceededException
        self.list_throttle_rate = 0.0  # of ListStreams calls answered so
        self.listings = 0  # ListStreams calls
        self.faults = {"lost": 0, "throttled": 0}  # what `before_call` did
        self._iterators: dict[
            str, tuple[str, int, int]
        ] = {}  # token -> (shard, index of next record, issued)
        self.enable()

    @property
    def arn(self) -> str:
        """The table's latest stream (enabled, or disabled and not enabled again yet)."""
        return list(self.streams)[-1]

    def stream(self, arn: str | None) -> DStream | None:
        """The stream with this ARN while it exists (a disabled one is deleted 24 hours later)."""
        stream = self.streams.get(arn or "")
        if stream is None or (
            stream.disabled_ms is not None and self.clock.now_ms - stream.disabled_ms > RETENTION_MS
        ):
            return None
        return stream

    def enable(self) -> None:
        """The table's stream enabled (again): a new stream, with one open shard."""
        when = dt.datetime.fromtimestamp(self.clock.now_ms / 1000, dt.UTC)
        label = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.clock.now_ms % 1000:03d}"
        arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{self.table}/stream/{label}"
        assert arn not in self.streams and (
            not self.streams or self.streams[self.arn].disabled_ms is not None
        )
        self.streams[arn] = DStream(arn, label, self.clock.now_ms)
        self._add(None, 0, SPACE, 0)

    def disable(self) -> None:
        """The table's stream disabled: its open shards close (readable 24 hours)."""
        for shard in self.open_shards():
            self._close(shard)
        self.streams[self.arn].disabled_ms = self.clock.now_ms

    # -- the service's own changes and the table's writes --------------------------------------------
    def _add(self, parent: str | None, low: int, high: int, late_ms: int) -> DShard:
        sid = f"shardId-{self.clock.now_ms:013d}-{len(self.shards):08x}"
        shard = DShard(sid, parent, low, high, self._seq(), self.clock.now_ms + late_ms, arn=self.arn)
        self.shards[sid] = shard
        return shard

    def _seq(self) -> int:
        self.next_seq += 1 + int(chance(self.seed, "gap", self.next_seq) * 3)
        return self.next_seq

    def open_shards(self) -> list[DShard]:
        return [s for s in self.shards.values() if s.end_seq is None and s.arn == self.arn]

    def _close(self, shard: DShard) -> None:
        shard.end_seq = shard.records[-1].seq if shard.records else shard.start_seq

    def rollover(self, sid: str, late_ms: int = 0) -> None:
        shard = self.shards[sid]
        self._close(shard)
        self._add(sid, shard.low, shard.high, late_ms)

    def split(self, sid: str, late_ms: int = 0) -> None:
        shard = self.shards[sid]
        self._close(shard)
        middle = (shard.low + shard.high) // 2
        self._add(sid, shard.low, middle, 0)
        self._add(sid, middle, shard.high, late_ms)  # (one child may be listed late)

    def put(self, key: str) -> Change | None:
        """A change of item `key` (INSERT first, then MODIFY, a REMOVE now and then); None when the
        table's stream is disabled (the item changes, and no stream holds the change)."""
        version = self.versions.get(key, 0) + 1
        self.versions[key] = version
        name = (
            "INSERT"
            if version == 1
            else "REMOVE"
            if chance(self.seed, "remove", key, version) < 0.1
            else "MODIFY"
        )
        if name == "REMOVE":
            self.versions[key] = 0
        if self.streams[self.arn].disabled_ms is not None:
            return None
        where = key_hash(key)
        shard = next(s for s in self.open_shards() if s.low <= where < s.high)
        change = Change(self._seq(), self.clock.now_ms, key, name, version)
        shard.records.append(change)
        return change

    # -- what a reader sees --------------------------------------------------------------------------
    def _trim_index(self, shard: DShard) -> int:
        horizon = self.clock.now_ms - RETENTION_MS
        return next((i for i, r in enumerate(shard.records) if r.at_ms > horizon), len(shard.records))

    def listed(self, arn: str | None = None) -> list[DShard]:
        """What DescribeStream lists now of stream `arn` (the latest by default): shards past their
        listing time, less the closed ones whose records all aged out 24 hours ago."""
        now, arn = self.clock.now_ms, arn or self.arn
        return [
            s
            for s in self.shards.values()
            if s.arn == arn
            and s.listed_from_ms <= now
            and not (s.end_seq is not None and s.records and s.records[-1].at_ms < now - RETENTION_MS)
        ]

    def before_call(self, operation: str) -> None:
        """The faults a call may meet: the reading executor's death, throttling (left after botocore's
        retries)."""
        if self.fail_at_call and self.calls >= self.fail_at_call:
            self.fail_at_call = 0
            self.faults["lost"] += 1
            raise ExecutorLost(operation)
        if chance(self.seed, "throttle", operation, self.calls) < self.throttle_rate:
            self.faults["throttled"] += 1
            raise error("LimitExceededException", "Rate exceeded", operation)

    def client(self) -> SimStreamsClient:
        return SimStreamsClient(self)


class SimStreamsClient:
    """The calls `aws.dynamodb_streams.StreamsProxy` makes, answered from the model as botocore would."""

    def __init__(self, model: DynamoStreamModel) -> None:
        self.model = model

    def list_streams(self, **kwargs: Any) -> dict[str, Any]:
        m = self.model
        m.listings += 1  # (its own count: the other calls' faults follow `calls`, as before it was modelled)
        if chance(m.seed, "throttle-list", m.listings) < m.list_throttle_rate:
            m.faults["throttled"] += 1
            raise error("LimitExceededException", "Rate exceeded", "ListStreams")
        listed = [s for s in m.streams.values() if m.stream(s.arn) is not None]
        return {
            "Streams": [{"StreamArn": s.arn, "TableName": m.table, "StreamLabel": s.label} for s in listed]
        }

    def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        m = self.model
        m.calls += 1
        m.before_call("DescribeStream")
        stream = m.stream(kwargs.get("StreamArn"))
        if stream is None:
            raise error("ResourceNotFoundException", "Requested resource not found", "DescribeStream")
        shards = sorted(m.listed(stream.arn), key=lambda s: s.sid)
        wanted = kwargs.get("ShardFilter")
        if wanted:
            shards = [s for s in shards if s.parent == wanted["ShardId"]]
        start = kwargs.get("ExclusiveStartShardId")
        if start is not None:
            shards = [s for s in shards if s.sid > start]
        page = shards[: min(kwargs.get("Limit", 100), DESCRIBE_PAGE)]
        out: dict[str, Any] = {
            "StreamArn": stream.arn,
            "StreamStatus": "ENABLED" if stream.disabled_ms is None else "DISABLED",
            "CreationRequestDateTime": dt.datetime.fromtimestamp(stream.created_ms / 1000, dt.UTC),
            "Shards": [_shard_json(s) for s in page],
        }
        if len(page) < len(shards):
            out["LastEvaluatedShardId"] = page[-1].sid
        return {"StreamDescription": out}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        m = self.model
        m.calls += 1
        m.before_call("GetShardIterator")
        shard = m.shards.get(kwargs["ShardId"])
        stream = m.stream(kwargs.get("StreamArn"))
        if shard is None or stream is None or shard not in m.listed(stream.arn):
            raise error(
                "ResourceNotFoundException", "Requested resource not found: Shard", "GetShardIterator"
            )
        kind, trim = kwargs["ShardIteratorType"], m._trim_index(shard)
        seqs = [r.seq for r in shard.records]
        if kind == "TRIM_HORIZON":
            index = trim
        elif kind == "LATEST":
            index = len(seqs)
        else:
            at = int(kwargs["SequenceNumber"])
            index = next((i for i, s in enumerate(seqs) if s >= at), len(seqs))
            if kind == "AFTER_SEQUENCE_NUMBER" and index < len(seqs) and seqs[index] == at:
                index += 1
            if index < trim or (index == trim and trim > 0 and at <= seqs[trim - 1]):
                raise error("TrimmedDataAccessException", "records trimmed", "GetShardIterator")
        return {"ShardIterator": self._issue(shard.sid, index)}

    def _issue(self, sid: str, index: int) -> str:
        token = f"it-{len(self.model._iterators)}"
        self.model._iterators[token] = (sid, index, self.model.clock.now_ms)
        return token

    def get_records(self, ShardIterator: str, Limit: int = 1000) -> dict[str, Any]:
        m = self.model
        m.calls += 1
        m.before_call("GetRecords")
        known = m._iterators.get(ShardIterator)
        if known is None or m.clock.now_ms - known[2] > ITERATOR_LIFE_MS:
            raise error("ExpiredIteratorException", "Iterator expired", "GetRecords")
        sid, index, _issued = known
        shard = m.shards[sid]
        if m.stream(shard.arn) is None:
            raise error("ResourceNotFoundException", "Requested resource not found", "GetRecords")
        if index < m._trim_index(shard):
            raise error("TrimmedDataAccessException", "records trimmed", "GetRecords")
        empty_streak = int(ShardIterator.rsplit("~", 1)[1]) if "~" in ShardIterator else 0
        mid_empty = empty_streak < 2 and chance(m.seed, "empty", sid, index, m.calls) < 0.15
        taken = [] if mid_empty else shard.records[index : index + min(Limit, 1000)]
        following: str | None = self._issue(sid, index + len(taken))
        if mid_empty and index < len(shard.records):
            following = f"{following}~{empty_streak + 1}"
            m._iterators[following] = m._iterators.pop(following.rsplit("~", 1)[0])
        if shard.end_seq is not None and index + len(taken) >= len(shard.records) and not mid_empty:
            following = None  # a closed shard read to its end
        return {"Records": [_record(m.table, r) for r in taken], "NextShardIterator": following}


def _shard_json(shard: DShard) -> dict[str, Any]:
    seqs = {"StartingSequenceNumber": str(shard.start_seq)}
    if shard.end_seq is not None:
        seqs["EndingSequenceNumber"] = str(shard.end_seq)
    out: dict[str, Any] = {"ShardId": shard.sid, "SequenceNumberRange": seqs}
    if shard.parent is not None:
        out["ParentShardId"] = shard.parent
    return out


def _record(table: str, change: Change) -> dict[str, Any]:
    keys = {"id": {"S": change.key}}
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": dt.datetime.fromtimestamp(change.at_ms / 1000, dt.UTC),
        "Keys": keys,
        "SequenceNumber": str(change.seq),
        "SizeBytes": 20,
        "StreamViewType": "NEW_IMAGE",
    }
    if change.name != "REMOVE":
        body["NewImage"] = {**keys, "version": {"N": str(change.version)}}
    return {"eventID": f"{change.key}#{change.seq}", "eventName": change.name, "dynamodb": body}
