"""What of a GetRecords response belongs to the batch: the batch's limits, the AvailableNow cutoff, the
replay bound, KPL aggregates. The loop that feeds pages in is `shard_read.ShardRead`.

Responses without KPL aggregates take a bulk path (Arrow slices of the decoded columns); aggregates
and replays go record by record, so a batch can end inside an aggregate and a replay stops exactly at
its recorded end.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from dataclasses import dataclass

import pyarrow.compute as pc

from ...aws.get_records import Records
from ...config.declared import by_key
from ...errors import CorruptRecordError
from ...kpl import MAGIC, deaggregate
from ...model import AFTER, END, INSIDE, Position, effective_hash_key, seq_key
from ..options import SOURCE_OPTIONS
from .columns import Columns

log = logging.getLogger(__name__)
_DECLARED = by_key(SOURCE_OPTIONS)  # (the defaults below are the options')


@dataclass(frozen=True)
class ShardLimits:
    max_records: int  # -1: unbounded (replay)
    max_bytes: int
    cutoff_ms: int | None = None
    deadline: float = float("inf")  # time.monotonic() after which no new call starts
    bytes_per_second: int = _DECLARED["shardReadBytesPerSecond"].default  # the read quota; 0: no pacing
    closed: bool = False  # ListShards says the shard is closed (see CLOSED_EMPTY_READS)
    fail_on_corrupt_aggregate: bool = False  # onCorruptAggregate=fail
    # fan-out: how long a read with nothing pushed waits (idlePollIntervalMs)
    push_wait_s: float = _DECLARED["idlePollIntervalMs"].default / 1000.0
    # Batch reads: the shard's endingPosition when it is a sequence number (AT: stop before it, an inside
    # position before its first sub-record; AFTER: stop after it). Reaching it is reaching the cutoff.
    end_at: Position | None = None
    # The shard's HashKeyRange (ListShards), where the driver knew it: the user records of a KPL aggregate
    # whose effective hash key lies outside it are not the shard's (see `misplaced`). None: keep all.
    hash_range: tuple[int, int] | None = None
    # A closed shard's EndingSequenceNumber where it bounds the shard's records (`ShardInfo.known_end`),
    # and its StartingSequenceNumber: a read whose position has passed the end, or an empty shard (end
    # at or below its start), meets the tip at its end, also on a server that never ends a shard (moto
    # answers a closed shard's end with an empty page and a next iterator, for ever). None: not known.
    last_seq: str | None = None
    first_seq: str | None = None


# Why a batch has enough of a shard (`BatchCut.ending`): a limit (records, bytes); the AvailableNow cutoff
# or the shard's endingPosition; a replay's recorded end; the shard's tip (nothing newer can be there).
LIMIT, CUTOFF, UNTIL, TIP = "limit", "cutoff", "until", "tip"


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


def misplaced(partition_key: str, explicit: str | None, hash_range: tuple[int, int] | None) -> bool:
    """Whether a KPL user record lies outside the hash key range of the shard its aggregate is in. Right
    after a reshard the KPL, whose shard map is stale, may put an aggregate into a shard that no longer
    holds some of its user records, and re-sends those user records to the right shard: the KCL and
    AWS's connectors drop them on read, and so does this source, or they would come out twice."""
    if hash_range is None:
        return False
    low, high = hash_range
    where = effective_hash_key(partition_key, explicit)
    return where is not None and not low <= where <= high


def _position_after(seq: str, sub: int, total: int) -> Position:
    return Position.after(seq) if sub >= total - 1 else Position.inside(seq, sub)


class BatchCut:
    """What one shard's read took so far, and whether something (a limit, the cutoff, the replay's
    recorded end) says the batch has enough of this shard."""

    def __init__(
        self,
        stream_name: str,
        stream_key: str,
        shard: str,
        start: Position,
        limits: ShardLimits,
        until: Position | None,
        origin: Position | None = None,
    ):
        """`origin`: where the read resumes before it took a row, when not at `start` (a replay starts at
        the first record its first attempt read)."""
        self.start, self.limits, self.until = start, limits, until
        self.origin = start if origin is None else origin
        self.cols = Columns(stream_name, stream_key, shard)
        self.first: tuple[str, int] | None = None  # the first user record taken
        self.last: tuple[str, int, int] | None = None  # (seq, sub, subs in that record) of the last row taken
        self.n_bytes = 0
        self.misplaced = 0  # user records of aggregates dropped as outside the shard's range (`misplaced`)
        self.ending: str | None = None  # why the batch has enough of this shard (LIMIT, CUTOFF...): None yet

    @property
    def stop(self) -> bool:
        """The batch has enough of this shard, for whatever reason."""
        return self.ending is not None

    @property
    def reached_cutoff(self) -> bool:
        """The read got to the AvailableNow cutoff or the shard's endingPosition: nothing left to read
        under this run."""
        return self.ending == CUTOFF

    @property
    def done_until(self) -> bool:
        """A replay produced its recorded end's last record."""
        return self.ending == UNTIL

    def restart(self, origin: Position) -> None:
        """Nothing taken yet, and the read goes on from `origin` instead (its start aged out: from the
        oldest record left)."""
        assert self.last is None, "a read that took rows resumes after them"
        self.origin = origin

    @property
    def resume(self) -> Position:
        """Where a read continuing this one starts: after the last row taken."""
        return self.origin if self.last is None else _position_after(*self.last)

    def _full(self, size: int) -> bool:
        """First attempt: whether taking a record of `size` bytes would break the batch's limits
        (a batch always takes at least one record, however large)."""
        limits, taken = self.limits, len(self.cols)
        return taken > 0 and (
            (limits.max_records > 0 and taken >= limits.max_records)
            or (limits.max_bytes > 0 and self.n_bytes + size > limits.max_bytes)
        )

    def take(self, records: Records, skip_from: Position) -> None:
        """Take what this response offers within the limits, the cutoff and the replay bound."""
        if (
            self.until is None
            and self.limits.end_at is None
            and skip_from.kind != INSIDE
            and records
            and not pc.any(pc.starts_with(records.data, pattern=MAGIC)).as_py()
        ):
            self._take_plain(records)
            return
        self._take_each(records, skip_from)

    def _cut(self, sizes: list[int]) -> int:
        """How many of these records fit the batch's limits: the bulk form of `_full`."""
        limits, taken = self.limits, len(self.cols)
        count = len(sizes)
        if limits.max_records > 0:
            count = min(count, max(0, limits.max_records - taken))
        if limits.max_bytes > 0:
            # Running totals are non-decreasing: the records that fit are those whose total <= room.
            count = bisect.bisect_right(
                list(itertools.accumulate(sizes[:count])), limits.max_bytes - self.n_bytes
            )
        return max(count, 1) if taken == 0 and sizes else count

    def _take_plain(self, records: Records) -> None:
        """Bulk path (no aggregates, no replay bound): cut the columns at the first limit."""
        available, beyond_cutoff = len(records), False
        if self.limits.cutoff_ms is not None:
            first_beyond = pc.index(
                pc.greater(records.arrivals, self.limits.cutoff_ms / 1000.0), True
            ).as_py()
            if first_beyond >= 0:
                available, beyond_cutoff = first_beyond, True
        total = records.payload_bytes if available == len(records) else records.bytes_before(available)
        limits, taken = self.limits, len(self.cols)
        if (limits.max_records <= 0 or taken + available <= limits.max_records) and (
            limits.max_bytes <= 0 or self.n_bytes + total <= limits.max_bytes
        ):
            take, took_bytes = available, total  # the usual case: the whole response fits
        else:
            sizes = pc.binary_length(records.data.slice(0, available)).to_pylist()
            take = self._cut(sizes)
            took_bytes = sum(sizes[:take])
        # The cutoff is reached only if the limits let every record before it in: a shard cut short by
        # a limit still has records to read under this AvailableNow run.
        if beyond_cutoff and take == available:
            self.ending = CUTOFF
        else:
            self.ending = LIMIT if take < available or beyond_cutoff else None
        if not take:
            return
        if self.first is None:
            self.first = (records.seqs[0].as_py(), 0)
        self.cols.add(records, take)
        self.n_bytes += took_bytes
        self.last = (records.seqs[take - 1].as_py(), 0, 1)

    def _corrupt_aggregate(self, seq: str) -> None:
        """A record with the KPL magic that does not parse (bad checksum, truncated, bad protobuf): by
        default passed through as one plain record, with a warning; with onCorruptAggregate=fail the
        batch fails. Never dropped."""
        where = f"Kinesis stream '{self.cols.stream}', shard {self.cols.shard}, sequence number {seq}"
        if self.limits.fail_on_corrupt_aggregate:
            raise CorruptRecordError(
                f"{where}: the record starts like a KPL aggregate but is corrupt (bad checksum, truncated or "
                "malformed). Set onCorruptAggregate=passThrough to read such records as plain records."
            )
        log.warning(
            "%s: corrupt KPL aggregate (bad checksum, truncated or malformed): passed through as one record",
            where,
        )

    def _take_each(self, records: Records, skip_from: Position) -> None:
        until, limits, cols = self.until, self.limits, self.cols
        bound = None if until is not None or limits.cutoff_ms is None else limits.cutoff_ms / 1000.0
        seqs, keys, data, arrivals = records.lists()
        for index, seq in enumerate(seqs):
            arrival = arrivals[index]
            if bound is not None and arrival > bound:
                self.ending = CUTOFF
                return
            users = deaggregate(data[index])
            # Only an aggregate's user records can be misplaced: Kinesis itself placed a plain record.
            ranged = limits.hash_range if users is not None else None
            if users is None:
                if data[index].startswith(MAGIC):
                    self._corrupt_aggregate(seq)
                users = [(keys[index], None, data[index])]
            total = len(users)
            for sub, (key, hash_key, payload) in enumerate(users):
                if skip_from.skips(seq, sub):
                    continue
                if limits.end_at is not None and not _before_or_at(seq, sub, limits.end_at):
                    self.ending = CUTOFF
                    return
                dropped = misplaced(key, hash_key, ranged)
                if until is not None:
                    if not _before_or_at(seq, sub, until):
                        self.ending = UNTIL
                        return
                elif not dropped and self._full(len(payload)):
                    self.ending = LIMIT
                    return
                if dropped:  # (the read moves past it all the same: a replay drops it again)
                    self.misplaced += 1
                else:
                    if self.first is None:
                        self.first = (seq, sub)
                    cols.append(payload, key, seq, sub, arrival)
                    self.n_bytes += len(payload)
                self.last = (seq, sub, total)
                if until is not None and _reached(seq, sub, total, until):
                    self.ending = UNTIL
                    return
                if limits.end_at is not None and _reached(seq, sub, total, limits.end_at):
                    self.ending = CUTOFF
                    return
