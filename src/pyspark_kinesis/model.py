"""The Kinesis vocabulary the connector speaks in, as plain values with no I/O.

- `Position`: a place inside one shard, which round-trips through Spark's offset log.
- `ShardInfo`: what ListShards says about a shard (lineage, hash-key range, closed or open).
- `ShardRef`: a shard's identity across the streams of one source, (stream ARN, shard id), a NamedTuple.
- `StreamIdentity`: what DescribeStreamSummary says a stream is (ARN, creation time, retention).

Kinesis has no per-shard offset integer; a position is one of: the shard's oldest record, a point in
time, "after record S" (all its KPL sub-records consumed), "inside aggregate S after sub-record n"
(a batch limit cut a KPL aggregate), or "the shard's end" (read to its closing). LATEST never
appears in an offset: the planner pins it to a timestamp when the query first starts.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, NamedTuple


class ShardRef(NamedTuple):
    """A shard's identity across the streams of one source: shard ids repeat across streams."""

    stream: str  # the stream's ARN
    shard: str  # its shard id


MIN_RETENTION_MS = 24 * 3600 * 1000  # Kinesis keeps records at least 24 hours
# Clocks of executors, driver and service differ: a time this close to the retention proves nothing.
RETENTION_MARGIN_MS = 15 * 60 * 1000


def unaged(since_ms: int, now_ms: int, retention_ms: int | None) -> bool:
    """No record that arrived after `since_ms` can have aged out by `now_ms` (0: nothing is known): the
    moment lies within the stream's retention (MIN_RETENTION_MS when not known), less a margin for the
    clocks of driver, executors and service. The one clock rule of the tip (`ShardState.tip_ms`): the
    executors' loss checks and the driver's renewal of the tip by its looks both ask it."""
    return since_ms > 0 and now_ms - since_ms < (retention_ms or MIN_RETENTION_MS) - RETENTION_MARGIN_MS


HASH_KEY_SPACE = 2**128  # a shard's HashKeyRange lies in [0, 2^128)
# An explicit hash key as a number: ASCII digits only (`str.isdigit` also takes other scripts' digits and
# superscripts, which `int()` refuses) and at most 39 of them (2^128 has 39 digits; a longer string is
# past the space, and past Python's digit limit `int()` raises on it).
_HASH_KEY_DIGITS = re.compile(r"[0-9]{1,39}")


def hash_key_value(text: str) -> int | None:
    """An explicit hash key's number, or None when it is not one in [0, 2^128). Written by anyone who
    may put records (inside a KPL aggregate nothing checks it), so it never raises: one such record
    must not fail every read of its shard."""
    if _HASH_KEY_DIGITS.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value < HASH_KEY_SPACE else None


def effective_hash_key(partition_key: str, explicit: str | None) -> int | None:
    """Where Kinesis (and the KPL's shard map) places a record: its explicit hash key, else the MD5 of
    its partition key as a 128-bit number. None: an explicit hash key that is no such number (nothing
    places the record by it). The one rule the source's misplaced-record check and the sink's packing
    share."""
    if explicit:
        return hash_key_value(explicit)
    return int.from_bytes(hashlib.md5(partition_key.encode("utf-8"), usedforsecurity=False).digest(), "big")


class StreamIdentity(NamedTuple):
    """A stream as DescribeStreamSummary describes it when a query starts."""

    arn: str
    created_ms: int | None  # tells a stream deleted and re-created under the same name (same ARN) apart
    retention_ms: int | None = None  # how long records stay readable (None: the server did not say)


def stream_words(key: str) -> str:
    """How a message names a stream by its key (ARN): a DynamoDB table's stream is not a Kinesis stream,
    and a user reading one should not be told it is."""
    return f"DynamoDB stream {key}" if ":dynamodb:" in key else f"Kinesis stream {key}"


TRIM = "trim"
TIMESTAMP = "ts"
AFTER = "after"
INSIDE = "inside"
END = "end"
LATEST = "latest"  # only as a parsed option, never stored


@dataclass(frozen=True, order=False)
class Position:
    kind: str
    seq: str | None = None  # sequence number (AFTER, INSIDE)
    sub: int = -1  # last consumed sub-sequence index (INSIDE)
    ts_ms: int | None = None  # epoch milliseconds (TIMESTAMP)

    # -- constructors -------------------------------------------------------------------------
    @staticmethod
    def latest() -> Position:
        return Position(LATEST)

    @staticmethod
    def trim_horizon() -> Position:
        return Position(TRIM)

    @staticmethod
    def at_timestamp(ts_ms: int) -> Position:
        return Position(TIMESTAMP, ts_ms=ts_ms)

    @staticmethod
    def after(seq: str) -> Position:
        return Position(AFTER, seq=seq)

    @staticmethod
    def inside(seq: str, sub: int) -> Position:
        return Position(INSIDE, seq=seq, sub=sub)

    @staticmethod
    def at_sequence(seq: str) -> Position:
        """AT_SEQUENCE_NUMBER S: record S not consumed yet (an aggregate S with none of its sub-records
        consumed), so it is the inside position before S's first sub-record."""
        return Position(INSIDE, seq=seq, sub=-1)

    @staticmethod
    def shard_end() -> Position:
        return Position(END)

    # -- queries ------------------------------------------------------------------------------
    @property
    def is_end(self) -> bool:
        return self.kind == END

    def describe(self) -> str:
        """The position in words, for messages."""
        if self.kind == TRIM:
            return "TRIM_HORIZON"
        if self.kind == TIMESTAMP:
            return f"AT_TIMESTAMP {self.ts_ms} ms"
        if self.kind == AFTER:
            return f"after sequence number {self.seq}"
        if self.kind == INSIDE:
            if self.sub < 0:
                return f"at sequence number {self.seq}"
            return f"after sub-record {self.sub} of sequence number {self.seq}"
        return "the shard's end" if self.kind == END else self.kind

    def iterator_args(self, verify: bool = False) -> dict[str, Any]:
        """GetShardIterator arguments that resume reading at this position. With `verify`, "after S"
        is read from S itself (AT_SEQUENCE_NUMBER), so that the read can check S is still there: Kinesis
        sequence numbers have gaps, and only S coming back first proves that nothing after it aged out
        (see `source.executor.shard_read`). The reader then drops S."""
        if self.kind == AFTER and verify:
            return {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": self.seq}
        if self.kind == TRIM:
            return {"ShardIteratorType": "TRIM_HORIZON"}
        if self.kind == TIMESTAMP:
            return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": (self.ts_ms or 0) / 1000.0}
        if self.kind == AFTER:
            return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": self.seq}
        if self.kind == INSIDE:
            return {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": self.seq}
        raise ValueError(f"position {self.kind!r} cannot be read from")

    def starting_position(self, verify: bool = False) -> dict[str, Any]:
        """SubscribeToShard's StartingPosition that resumes reading at this position (enhanced
        fan-out); the same positions as `iterator_args`."""
        args = self.iterator_args(verify)
        out: dict[str, Any] = {"Type": args["ShardIteratorType"]}
        if "StartingSequenceNumber" in args:
            out["SequenceNumber"] = args["StartingSequenceNumber"]
        if "Timestamp" in args:
            out["Timestamp"] = args["Timestamp"]
        return out

    @property
    def anchor(self) -> str | None:
        """The sequence number a verified read from here must find first (see `iterator_args`)."""
        return self.seq if self.kind in (AFTER, INSIDE) else None

    def skips(self, seq: str, sub: int) -> bool:
        """True when the user record (seq, sub) was already consumed before this position.

        Only an INSIDE position re-reads an aggregate it partly consumed; its consumed
        sub-records must be dropped again.
        """
        return self.kind == INSIDE and seq == self.seq and sub <= self.sub

    # -- plain-dict form for offsets and records -----------------------------------------------
    def to_json(self) -> dict[str, Any]:
        if self.kind == TIMESTAMP:
            return {"k": TIMESTAMP, "ms": self.ts_ms}
        if self.kind == AFTER:
            return {"k": AFTER, "seq": self.seq}
        if self.kind == INSIDE:
            return {"k": INSIDE, "seq": self.seq, "sub": self.sub}
        return {"k": self.kind}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Position:
        kind = data["k"]
        if kind == TIMESTAMP:
            return Position.at_timestamp(int(data["ms"]))
        if kind == AFTER:
            return Position.after(str(data["seq"]))
        if kind == INSIDE:
            return Position.inside(str(data["seq"]), int(data["sub"]))
        if kind in (TRIM, END):
            return Position(kind)
        raise ValueError(f"unknown position kind {kind!r}")


def seq_key(seq: str) -> int:
    """Sequence numbers order numerically, and only within one shard."""
    return int(seq)


@dataclass(frozen=True)
class ShardInfo:
    """What ListShards says about a shard, reduced to what planning needs."""

    shard_id: str
    parent: str | None
    adjacent_parent: str | None
    start_hash: int
    end_hash: int
    closed: bool  # has an EndingSequenceNumber
    first_seq: str | None = None  # StartingSequenceNumber (None: the server did not say)
    last_seq: str | None = None  # EndingSequenceNumber of a closed shard

    def holds(self, seq: str) -> bool:
        """Whether sequence number `seq` lies in this shard's range (True where the range is not known;
        an end below the start, as a local server may report, is not known)."""
        low = None if self.first_seq is None else seq_key(self.first_seq)
        high = None if self.last_seq is None else seq_key(self.last_seq)
        if low is not None and seq_key(seq) < low:
            return False
        return high is None or (low is not None and high < low) or seq_key(seq) <= high

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent, self.adjacent_parent) if p)

    @property
    def known_end(self) -> str | None:
        """A closed shard's EndingSequenceNumber where it bounds the shard's records: no record lies past
        it. None when open, not said, or below the StartingSequenceNumber (kinesis-local reports
        Long.MaxValue, below its own sequence numbers)."""
        if not self.closed or self.last_seq is None:
            return None
        if self.first_seq is not None and seq_key(self.last_seq) < seq_key(self.first_seq):
            return None
        return self.last_seq

    def to_api(self) -> dict[str, Any]:
        """Back to the ListShards shape the assigners take."""
        return {
            "ShardId": self.shard_id,
            "ParentShardId": self.parent,
            "AdjacentParentShardId": self.adjacent_parent,
            "HashKeyRange": {"StartingHashKey": str(self.start_hash), "EndingHashKey": str(self.end_hash)},
        }

    @staticmethod
    def from_api(shard: dict[str, Any]) -> ShardInfo:
        keys = shard.get("HashKeyRange", {})
        seqs = shard.get("SequenceNumberRange", {})
        return ShardInfo(
            shard_id=shard["ShardId"],
            parent=shard.get("ParentShardId"),
            adjacent_parent=shard.get("AdjacentParentShardId"),
            start_hash=int(keys.get("StartingHashKey", 0)),
            end_hash=int(keys.get("EndingHashKey", 0)),
            closed="EndingSequenceNumber" in seqs,
            first_seq=seqs.get("StartingSequenceNumber"),
            last_seq=seqs.get("EndingSequenceNumber"),
        )
