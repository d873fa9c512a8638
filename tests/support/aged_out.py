"""Test-only: what the fault proxy makes of a shard whose head aged out past retention.

The local servers keep records 24 hours at least, so a test trims a shard's head instead: records below
a sequence number are dropped from GetRecords answers and SubscribeToShard events, and a position at a
sequence number below it is answered as Kinesis may answer one that aged out: with an iterator that
silently starts at the oldest record left (`mode` "silent"), or with an InvalidArgumentException
(`mode` "error"). The connector must come to the same decision either way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable


class AgedOut:
    """Trimmed shard heads; `note` counts what was answered (as the proxy's faults)."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.note = note
        self.lock = threading.Lock()
        self.trimmed: dict[str, int] = {}  # shard id -> records below this sequence number are gone
        self.mode = "silent"  # or "error": how a position below the trim is answered

    def trim(self, shard: str, below_seq: str) -> None:
        with self.lock:
            self.trimmed[shard] = int(below_seq)

    def below(self, shard: str) -> int | None:
        """The sequence number below which `shard`'s records are gone, if any."""
        with self.lock:
            return self.trimmed.get(shard)

    def refusal(self, operation: str, body: bytes) -> bytes | None:
        """In "error" mode, the InvalidArgumentException for a GetShardIterator or SubscribeToShard at
        a sequence number that aged out (None: answer as usual)."""
        if self.mode != "error" or operation not in ("GetShardIterator", "SubscribeToShard"):
            return None
        request = json.loads(body)
        if operation == "SubscribeToShard":
            start = request.get("StartingPosition", {})
            kind, seq = start.get("Type", ""), start.get("SequenceNumber")
        else:
            kind, seq = request.get("ShardIteratorType", ""), request.get("StartingSequenceNumber")
        below = self.below(request.get("ShardId", ""))
        if below is None or seq is None or "SEQUENCE_NUMBER" not in kind or int(seq) >= below:
            return None
        self.note("trimmed position")
        message = f"StartingSequenceNumber {seq} used in {operation} is past the trim horizon (injected)"
        return json.dumps({"__type": "InvalidArgumentException", "message": message}).encode()

    def moved(self, operation: str, body: bytes) -> bytes:
        """A GetShardIterator or SubscribeToShard at TRIM_HORIZON (or, in "silent" mode, at a sequence
        number that aged out) moved to the oldest record left, as the service answers it (the trim is
        a record's sequence number). Records still come out of GetRecords and events filtered."""
        if operation not in ("GetShardIterator", "SubscribeToShard"):
            return body
        request = json.loads(body)
        below = self.below(request.get("ShardId", ""))
        if below is None:
            return body
        start = request.get("StartingPosition", {}) if operation == "SubscribeToShard" else request
        kind_key, seq_key = (
            ("Type", "SequenceNumber")
            if operation == "SubscribeToShard"
            else (
                "ShardIteratorType",
                "StartingSequenceNumber",
            )
        )
        kind, seq = start.get(kind_key, ""), start.get(seq_key)
        aged = "SEQUENCE_NUMBER" in kind and seq is not None and int(seq) < below
        if kind == "TRIM_HORIZON" or (aged and self.mode == "silent"):
            start[kind_key], start[seq_key] = "AT_SEQUENCE_NUMBER", str(below)
            return json.dumps(request).encode()
        return body

    def event(self, shard: str, payload: bytes) -> bytes:
        """A SubscribeToShardEvent without the records of `shard` below its trim."""
        below = self.below(shard)
        if below is None:
            return payload
        event = json.loads(payload)
        event["Records"] = [r for r in event.get("Records", []) if int(r["SequenceNumber"]) >= below]
        return json.dumps(event, separators=(",", ":")).encode()
