"""Executor-side fetching: read one shard from a start position, either as far as the batch's limits
allow (first attempt) or exactly up to a recorded end (replay), into Arrow-ready columns.

- A read stops on the first response that shows the shard caught up (MillisBehindLatest 0 and less
  than a full page) instead of waiting on a timer.
- Calls on one shard respect the service's read quota, per process: call starts at least 200 ms apart
  (5 calls/s), and after a response of B bytes the next call waits until B / shardReadBytesPerSecond
  has passed (a 10 MB response is followed by a pause, as Kinesis would otherwise refuse the calls).
- Throttling and transient errors that botocore's own retries did not absorb are retried here until
  the batch's time budget is spent; then the shard's read simply ends where it got to (a valid batch
  end), so one throttled shard or stream delays only its batch, never fails it. A replay, which must
  reach its recorded end, retries longer and then fails the task.
- An expired iterator is re-obtained from the last position read.
- Responses without KPL aggregates take a bulk path (slices of the decoded columns); aggregates and
  replays go record by record.
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..aws.arrow_arrays import binary_array
from ..aws.errors import CALL_ERRORS, is_expired_iterator, is_retryable
from ..aws.get_records import Records
from ..aws.kinesis import KinesisProxy
from ..errors import DataLossError
from ..model import AFTER, END, INSIDE, Position, seq_key
from .deaggregation import MAGIC, deaggregate
from .offsets import ShardEnd
from .schema import ARROW_SCHEMA

MAX_GET_RECORDS = 10_000
FETCH_ATTEMPTS = 3  # botocore's attempts per call; the fetch loop retries on within the time budget
MIN_CALL_SPACING_S = 0.2  # 5 GetRecords calls per second per shard
_MAX_CALLS = 100_000  # hard bound on one shard's calls in one batch (the time budget stops it first)
# A closed shard's end is the response without NextShardIterator. Some servers only send it after an
# empty response (kinesalite, for a shard closed over a second after its last record: an empty read
# moves the iterator's clock to now, and the next empty read ends the shard): a closed shard, or a
# replay up to a shard end, reads on through this many empty responses before taking "nothing yet"
# for the tip. Found by the chaos suite.
CLOSED_EMPTY_READS = 3
_REPLAY_RETRIES = 30  # failed calls in a row a replay accepts before the task fails
_BACKOFF_BASE_S, _BACKOFF_MAX_S = 0.1, 5.0


class Pacer:
    """Per-process pacing of the calls on each shard (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[tuple[str, str], float] = {}

    def before_call(self, key: tuple[str, str]) -> float:
        """Wait for the shard's turn; returns the call's start time."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next.get(key, 0.0))
            self._next[key] = start + MIN_CALL_SPACING_S
        if start > now:
            time.sleep(start - now)
        return start

    def after_response(self, key: tuple[str, str], started: float, n_bytes: int, bytes_per_s: int) -> None:
        if bytes_per_s > 0 and n_bytes > 0:
            with self._lock:
                self._next[key] = max(self._next.get(key, 0.0), started + n_bytes / bytes_per_s)


PACER = Pacer()


class IteratorCache:
    """Shard iterators left over by the last read of a shard in this process, by where they point.

    Kinesis iterators are plain tokens valid for 5 minutes, and `NextShardIterator` points exactly
    after the response it came with. When a read took a whole response, that iterator continues from
    the read's end position, so the next batch of the same shard in this Python worker (workers are
    reused) can start there without a GetShardIterator call: one call fewer per shard per batch, and
    GetShardIterator has its own 5 calls/s quota. A stale or foreign iterator only costs the
    ExpiredIteratorException path, which obtains a fresh one.
    """

    MAX_AGE_S = 240.0
    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, Position], tuple[str, float]] = {}

    def take(self, stream: str, shard: str, position: Position) -> str | None:
        with self._lock:
            found = self._entries.pop((stream, shard, position), None)
        if found is None or time.monotonic() - found[1] > self.MAX_AGE_S:
            return None
        return found[0]

    def put(self, stream: str, shard: str, position: Position, iterator: str, obtained: float) -> None:
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[(stream, shard, position)] = (iterator, obtained)


ITERATORS = IteratorCache()


@dataclass
class ShardLimits:
    max_records: int  # -1: unbounded (replay)
    max_bytes: int
    cutoff_ms: int | None = None
    deadline: float = float("inf")  # time.monotonic() after which no new call starts
    bytes_per_second: int = 2_000_000  # the shard's read quota; 0: no byte pacing
    closed: bool = False  # ListShards says the shard is closed (see CLOSED_EMPTY_READS)


@dataclass
class Columns:
    """One shard's rows as columns, turned into an Arrow batch at the end. Responses taken in bulk
    arrive as slices of their Arrow arrays (`chunks`); rows taken one by one (aggregates, replays)
    wait in the lists below until the next slice or the end become a chunk, so row order is kept."""

    stream: str
    arn: str
    shard: str
    # (data, partitionKey, sequenceNumber, arrival seconds, subSequenceNumber or None when all are 0)
    chunks: list[tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array | None]] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)  # pending rows, one by one
    keys: list[str] = field(default_factory=list)
    seqs: list[str] = field(default_factory=list)
    subs: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # epoch seconds
    rows: int = 0

    def __len__(self) -> int:
        return self.rows

    def append(self, payload: bytes, key: str, seq: str, sub: int, arrival: float) -> None:
        self.data.append(payload)
        self.keys.append(key)
        self.seqs.append(seq)
        self.subs.append(sub)
        self.arrivals.append(arrival)
        self.rows += 1

    def add(self, records: Records, count: int) -> None:
        """Append the first `count` rows of a response, as slices of its arrays."""
        self._flush()
        columns = (records.data, records.keys, records.seqs, records.arrivals)
        if count < len(records):
            columns = tuple(column.slice(0, count) for column in columns)
        self.chunks.append((*columns, None))
        self.rows += count

    def _flush(self) -> None:
        if self.data:
            self.chunks.append(
                (
                    binary_array(self.data),
                    pa.array(self.keys, pa.string()),
                    pa.array(self.seqs, pa.string()),
                    pa.array(self.arrivals, pa.float64()),
                    pa.array(self.subs, pa.int64()) if any(self.subs) else None,
                )
            )
            self.data, self.keys, self.seqs, self.subs, self.arrivals = [], [], [], [], []

    def _column(self, index: int, kind: pa.DataType) -> pa.Array:
        parts = [chunk[index] for chunk in self.chunks]
        if not parts:
            return pa.array([], kind)
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    def payloads(self) -> pa.Array:
        self._flush()
        return self._column(0, pa.binary())

    def to_arrow(self) -> pa.RecordBatch:
        self._flush()
        n = self.rows
        zero = pa.scalar(0, pa.int64())
        if any(chunk[4] is not None for chunk in self.chunks):
            subs = pa.concat_arrays(
                [
                    chunk[4] if chunk[4] is not None else pa.repeat(zero, len(chunk[0]))
                    for chunk in self.chunks
                ]
            )
        else:
            subs = pa.repeat(zero, n)
        micros = pc.cast(pc.round(pc.multiply(self._column(3, pa.float64()), 1e6)), pa.int64())
        return pa.RecordBatch.from_arrays(
            [
                self._column(0, pa.binary()),
                _repeat(self.stream, n),
                _repeat(self.shard, n),
                self._column(1, pa.string()),
                self._column(2, pa.string()),
                subs,
                micros.cast(pa.timestamp("us", tz="UTC")),
                _repeat(self.arn, n),
            ],
            schema=ARROW_SCHEMA,
        )


def _repeat(value: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


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


def _position_after(seq: str, sub: int, total: int) -> Position:
    return Position.after(seq) if sub >= total - 1 else Position.inside(seq, sub)


class _ShardRead:
    """The state of one shard's read in one batch."""

    def __init__(
        self, proxy: KinesisProxy, shard: str, start: Position, limits: ShardLimits, until: Position | None
    ):
        self.proxy, self.shard, self.start, self.limits, self.until = proxy, shard, start, limits, until
        self.cols = Columns(proxy.name, proxy.spec.key, shard)
        self.last: tuple[str, int, int] | None = None  # (seq, sub, subs in that record) of the last row taken
        self.n_bytes = 0
        self.reached_cutoff = self.stop = self.done_until = False

    @property
    def resume(self) -> Position:
        return self.start if self.last is None else _position_after(*self.last)

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
        self.reached_cutoff = beyond_cutoff and take == available
        self.stop = take < available or beyond_cutoff
        if not take:
            return
        self.cols.add(records, take)
        self.n_bytes += took_bytes
        self.last = (records.seqs[take - 1].as_py(), 0, 1)

    def _take_each(self, records: Records, skip_from: Position) -> None:
        until, limits, cols = self.until, self.limits, self.cols
        bound = None if until is not None or limits.cutoff_ms is None else limits.cutoff_ms / 1000.0
        seqs, keys, data, arrivals = records.lists()
        for index, seq in enumerate(seqs):
            arrival = arrivals[index]
            if bound is not None and arrival > bound:
                self.reached_cutoff = self.stop = True
                return
            users = deaggregate(data[index])
            if users is None:
                users = [(keys[index], None, data[index])]
            total = len(users)
            for sub, (key, _hash_key, payload) in enumerate(users):
                if skip_from.skips(seq, sub):
                    continue
                if until is not None:
                    if not _before_or_at(seq, sub, until):
                        self.stop = self.done_until = True
                        return
                elif self._full(len(payload)):
                    self.stop = True
                    return
                cols.append(payload, key, seq, sub, arrival)
                self.n_bytes += len(payload)
                self.last = (seq, sub, total)
                if until is not None and _reached(seq, sub, total, until):
                    self.stop = self.done_until = True
                    return


def fetch_shard(
    proxy: KinesisProxy,
    shard: str,
    start: Position,
    limits: ShardLimits,
    until: Position | None = None,
    fail_on_data_loss: bool = True,
) -> tuple[Columns, ShardEnd]:
    """Read `shard` from `start`. With `until`, produce exactly the records up to that recorded end."""
    read = _ShardRead(proxy, shard, start, limits, until)
    if start.is_end or (until is not None and until == start):
        return read.cols, ShardEnd(start=start, end=start)
    key = (proxy.spec.key, shard)
    # A cached iterator points exactly at `start`, which then is no INSIDE position (nothing to skip).
    iterator = ITERATORS.take(key[0], shard, start) if start.kind != INSIDE else None
    obtained = time.monotonic()
    skip_from = start  # the position the current iterator was obtained from (its skips apply)
    at_tip = closed = False
    children: tuple[str, ...] = ()
    behind = -1
    failures = empties = 0
    for _call in range(_MAX_CALLS):
        if read.stop or closed:
            break
        if until is None and time.monotonic() > limits.deadline:
            break
        try:
            if iterator is None:
                skip_from = read.resume
                iterator = proxy.shard_iterator(shard, skip_from)
                obtained = time.monotonic()
            want = MAX_GET_RECORDS
            if until is None and limits.max_records > 0:
                want = max(1, min(MAX_GET_RECORDS, limits.max_records - len(read.cols)))
            started = PACER.before_call(key)
            response = proxy.get_records(iterator, want)
        except CALL_ERRORS as exc:
            if is_expired_iterator(exc):
                iterator = None
                continue
            if not is_retryable(exc):
                raise
            failures += 1
            if until is not None and failures > _REPLAY_RETRIES:
                raise
            pause = random.uniform(0, min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2**failures))
            if until is None:
                pause = min(pause, max(0.0, limits.deadline - time.monotonic()))
            time.sleep(pause)
            continue
        failures = 0
        records: Records = response["Records"]
        PACER.after_response(key, started, records.payload_bytes, limits.bytes_per_second)
        read.take(records, skip_from)
        if read.stop:
            break
        iterator, obtained = response.get("NextShardIterator"), time.monotonic()
        behind = int(response.get("MillisBehindLatest", -1))
        if iterator is None:
            closed = True
            children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            break
        # Caught up: MillisBehindLatest 0 and less than a full page (a full page means more is waiting,
        # whatever a lagging or simplified MillisBehindLatest says): nothing was left in the shard when
        # this response was made, records or not, so an AvailableNow run needs no further batch to see
        # it. A closed shard, or a replay up to a shard end, reads on through a few empty responses
        # first. A replay at the tip without meeting its end is handled below.
        empties = 0 if records else empties + 1
        if behind == 0 and len(records) < want:
            to_end = limits.closed if until is None else until.kind == END
            if records and until is None:
                at_tip = not to_end
                break
            if not records and not (to_end and empties < CLOSED_EMPTY_READS):
                at_tip = until is None
                break
    if until is None and iterator is not None and not read.stop and not closed and read.resume.kind != INSIDE:
        # The read ended between responses (at the tip, or out of time): `iterator` continues from
        # exactly where this batch ends.
        ITERATORS.put(key[0], shard, read.resume, iterator, obtained)
    if until is not None:
        if (until.kind == END and not closed) or (until.kind != END and not read.done_until):
            _lost(fail_on_data_loss, proxy, shard, start, until)
        end = until
    elif closed and not read.stop:
        end = Position.shard_end()
    else:
        end = read.resume
    return read.cols, ShardEnd(
        start=start,
        end=end,
        records=len(read.cols),
        bytes=read.n_bytes,
        at_tip=at_tip,
        reached_cutoff=read.reached_cutoff,
        children=children,
        millis_behind=behind,
        read_at_ms=int(time.time() * 1000),
    )


def _lost(fail: bool, proxy: KinesisProxy, shard: str, start: Position, until: Position) -> None:
    if fail:
        raise DataLossError(
            f"Replaying a logged batch of stream '{proxy.name}', shard {shard} could not reach its recorded "
            f"end {until.to_json()} from {start.to_json()}: the records are no longer in the stream (past "
            "retention?). Set failOnDataLoss=false to accept the loss and go on."
        )
