"""What must hold, checked as the run goes: written from the model's side, never from the connector's.

- Every user record put is delivered exactly once, each key's records in the order the service holds
  them (parents before children), or it aged out before a read reached it and a loss was reported.
- No loss is reported that did not happen (unless the query was down for so long that nothing could
  tell: see `Oracle.loss_reported`).
- A task's rows are the same in every attempt and replay of it.
- The records under metadataPath stay within a bound, whatever the run's length.
- An AvailableNow run ends, and delivers what arrived before it started.

Which user records a reader keeps is the KCL's rule, written here again on purpose (an explicit hash
key that is an ASCII number below 2^128, else the MD5 of the partition key; a record outside the
shard's hash key range is a stale producer's, re-sent elsewhere, and not read where it landed).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

_NUMBER = re.compile(r"[0-9]{1,39}")
IDLE_BATCHES = 200  # batches in a row without a row: a query that plans batches for nothing
METADATA_FOLDERS = 12  # batch folders under metadataPath at most (a committed batch's, the next, async slack)


def kcl_hash(key: str, explicit: str | None) -> int | None:
    """Where a user record belongs (None: an explicit hash key that places it nowhere: it is kept)."""
    if explicit:
        return int(explicit) if _NUMBER.fullmatch(explicit) and int(explicit) < 2**128 else None
    return int.from_bytes(hashlib.md5(key.encode()).digest(), "big")


def payload(uid: int, size: int = 24) -> bytes:
    return f"u{uid:09d}|".encode().ljust(size, b".")


def uid_of(data: bytes) -> int:
    return int(data[1:10])


@dataclass
class Expected:
    """A user record's copy that a reader must deliver: where the service holds it."""

    uid: int
    stream: str
    shard: str
    key: str
    order: int  # the service's order of the stream's copies (append order, sub-records in order)
    arrival_ms: int
    trimmed_ms: int  # when it ages out


@dataclass
class Violation(Exception):
    kind: str
    detail: str
    at_ms: int

    def __str__(self) -> str:
        return f"{self.kind} at t+{self.at_ms / 3_600_000:.2f} h: {self.detail}"


@dataclass
class Oracle:
    start_ms: int
    expected: dict[int, Expected] = field(default_factory=dict)
    order_counter: int = 0
    delivered: dict[int, int] = field(default_factory=dict)  # uid -> Spark batch id
    delivered_ms: dict[int, int] = field(default_factory=dict)  # uid -> when its batch committed
    batches: dict[int, list[int]] = field(default_factory=dict)  # committed Spark batch -> uids in order
    last_order: dict[tuple[str, str], int] = field(default_factory=dict)  # (stream, key) -> last delivered
    task_rows: dict[tuple[int, int, str], list[int]] = field(default_factory=dict)  # first attempt's rows
    losses: list[tuple[int, str, str]] = field(default_factory=list)  # (ms, stream or "", text) reported
    downtimes: list[tuple[int, int]] = field(default_factory=list)  # (down, up) of the query
    reported_shards: set[tuple[str, str]] = field(default_factory=set)
    empty_in_a_row: int = 0  # committed batches in a row that delivered nothing
    uncommitted: dict[int, list[int]] = field(default_factory=dict)  # batches whose commit the driver lost
    look_gap_ms: int = 0  # how long a running query may go without reading or looking at a shard

    def now(self, now_ms: int) -> int:
        return now_ms - self.start_ms

    # -- what the producer put ----------------------------------------------------------------------
    def expect(self, uid: int, stream: str, shard: str, key: str, arrival_ms: int, retention_ms: int) -> None:
        self.order_counter += 1
        self.expected[uid] = Expected(
            uid, stream, shard, key, self.order_counter, arrival_ms, arrival_ms + retention_ms
        )

    # -- what the query delivered -------------------------------------------------------------------
    def task(self, generation_key: tuple[int, int, str], uids: list[int], now_ms: int) -> None:
        """A task attempt's rows: the first attempt's stand, every later one must equal them (or lack only
        records that aged out since, which the read then said: `lossy`)."""
        first = self.task_rows.setdefault(generation_key, uids)
        if first != uids and not self.lossy(first, uids, now_ms):
            raise Violation(
                "replay-differs",
                f"batch {generation_key[0]} task {generation_key[1]} returned {len(uids)} rows, its first "
                f"attempt {len(first)} (first difference at {_first_difference(first, uids)})",
                self.now(now_ms),
            )

    def commit(self, batch: int, uids: list[int], now_ms: int) -> None:
        """Spark committed batch `batch` with these rows (a batch committed again must bring the same)."""
        if batch in self.uncommitted:  # (run again after the driver lost its commit: see `uncommit`)
            before = self.uncommitted.pop(batch)
            if before != uids and not self.lossy(before, uids, now_ms):
                raise Violation("batch-differs", f"batch {batch} run again with other rows", self.now(now_ms))
        if batch in self.batches:
            if self.batches[batch] != uids:
                raise Violation(
                    "batch-differs", f"batch {batch} committed again with other rows", self.now(now_ms)
                )
            return
        self.empty_in_a_row = 0 if uids else self.empty_in_a_row + 1
        if self.empty_in_a_row >= IDLE_BATCHES:
            raise Violation(
                "idle-batches",
                f"{IDLE_BATCHES} batches in a row delivered nothing (an idle stream plans no batch)",
                self.now(now_ms),
            )
        for uid in uids:
            record = self.expected.get(uid)
            if record is None:
                raise Violation(
                    "misplaced-delivered",
                    f"user record {uid} delivered from where it does not belong",
                    self.now(now_ms),
                )
            if uid in self.delivered:
                raise Violation(
                    "duplicate",
                    f"user record {uid} in batch {batch} and in batch {self.delivered[uid]}",
                    self.now(now_ms),
                )
            key = (record.stream, record.key)
            if self.last_order.get(key, 0) > record.order:
                raise Violation(
                    "key-order",
                    f"key {record.key}: user record {uid} delivered after a later one",
                    self.now(now_ms),
                )
            self.last_order[key] = record.order
            self.delivered[uid] = batch
            self.delivered_ms[uid] = now_ms
        self.batches[batch] = uids

    # -- losses -----------------------------------------------------------------------------------------
    def loss_reported(
        self, stream: str, shard: str | None, text: str, now_ms: int, retention_ms: int
    ) -> None:
        """A loss said at `now_ms`: some record of that shard (or stream) not delivered must have aged
        out by then. Or nothing could know: the query was down for nearly a retention or more in the
        last two retentions (a quiet shard whose last read record aged out meanwhile looks the same as
        one whose later records did); or a possible loss (`start_aged_out`)."""
        self.losses.append((now_ms, stream, text))
        if shard:
            self.reported_shards.add((stream, shard))
        lost = [
            r
            for r in self.expected.values()
            if r.uid not in self.delivered
            and r.trimmed_ms <= now_ms
            and (not stream or r.stream == stream)
            and (not shard or r.shard == shard)
        ]
        if lost or (shard and self.start_aged_out(stream, shard, text, now_ms)):
            return
        blind = any(
            up - down >= retention_ms - 2 * 3_600_000 and up >= now_ms - 2 * retention_ms
            for down, up in self.downtimes
        )
        if not blind:
            raise Violation("false-loss", f"{text[:300]}", self.now(now_ms))

    def start_aged_out(self, stream: str, shard: str, text: str, now_ms: int) -> bool:
        """A loss said as possible ("may") where the read resumes after a record S that aged out: Kinesis
        sequence numbers have gaps, so the read cannot tell whether records came between S and the oldest
        one left, and the design takes that for a loss. The read can tell only by the tip: whether it
        saw nothing after S within the retention. So the claim stands where no read can have: the next
        record Y had arrived before S was read (the query was behind: found by the simulation, seed 100211,
        a query reading 5 records an hour whose S aged out just as it got there), or Y arrived too
        early for a look before it to be trusted now. A quiet shard whose S aged out with nothing after it
        for a retention is no such case: the looks that found nothing renewed the tip."""
        if "may" not in text:
            return False
        ours = sorted(
            (r for r in self.expected.values() if r.stream == stream and r.shard == shard),
            key=lambda r: r.order,
        )
        after = next((n for n, r in enumerate(ours) if r.uid not in self.delivered), None)
        if after is None or after == 0:
            return False
        resumed, following = ours[after - 1], ours[after]
        behind = self.delivered_ms[resumed.uid] >= following.arrival_ms
        return resumed.trimmed_ms <= now_ms and (behind or following.trimmed_ms <= now_ms + self.look_gap_ms)

    def metadata(self, keys: list[str], now_ms: int) -> None:
        """What lies under metadataPath stays bounded whatever the run's length: a few batch folders,
        one quiet note each, one live record."""
        folders = {
            k.split("/")[1] for k in keys if k.count("/") >= 2 and k.split("/")[1].startswith("batch-")
        }
        notes = [k for k in keys if "/quiet-" in k]
        live = [k for k in keys if "/live/" in k]
        if len(folders) > METADATA_FOLDERS or len(notes) > len(folders) or len(live) > 2:
            raise Violation(
                "metadata-growth",
                f"{len(folders)} batch folders, {len(notes)} quiet notes, {len(live)} live records under metadataPath",
                self.now(now_ms),
            )

    def uncommit(self, batches: set[int]) -> None:
        """The driver died and these batches' commits were not durable (asynchronous progress tracking):
        Spark runs them again, at least once by its contract, and until then their rows count as not
        delivered (a record that ages out meanwhile cannot be delivered again: a loss to say)."""
        for batch in batches:
            rows = self.batches.pop(batch, None)
            if rows is None:
                continue
            self.uncommitted[batch] = rows
            for uid in rows:
                self.delivered.pop(uid, None)
        self.last_order = {}
        for uid in self.delivered:
            record = self.expected[uid]
            key = (record.stream, record.key)
            self.last_order[key] = max(self.last_order.get(key, 0), record.order)

    def lossy(self, first: list[int], again: list[int], now_ms: int) -> bool:
        """A second reading that lacks only records aged out by now, in the same order, after a loss was
        said about their stream: what `failOnDataLoss=false` makes of a replay that cannot be exact."""
        missing = set(first) - set(again)
        if [uid for uid in first if uid not in missing] != again:
            return False
        streams = {self.expected[uid].stream for uid in missing if uid in self.expected}
        return all(
            uid in self.expected and self.expected[uid].trimmed_ms <= now_ms for uid in missing
        ) and all(any(said in ("", stream) for _t, said, _x in self.losses) for stream in streams)

    def final(self, now_ms: int) -> None:
        """After the run's final drain: every record delivered, or aged out with a loss said."""
        missing = [r for r in self.expected.values() if r.uid not in self.delivered]
        not_aged = [r for r in missing if r.trimmed_ms > now_ms]
        if not_aged:
            r = not_aged[0]
            raise Violation(
                "not-delivered",
                f"{len(not_aged)} user records never delivered though not aged out, e.g. {r.uid} "
                f"(shard {r.shard}, key {r.key}, put at t+{self.now(r.arrival_ms) / 3_600_000:.2f} h)",
                self.now(now_ms),
            )
        silent = [r for r in missing if not any(stream in ("", r.stream) for _t, stream, _x in self.losses)]
        if silent:
            raise Violation(
                "silent-loss",
                f"{len(silent)} user records aged out unread and no loss was said",
                self.now(now_ms),
            )


def _first_difference(a: list[int], b: list[int]) -> str:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"row {index}: {x} vs {y}"
    return f"row {min(len(a), len(b))}"
