"""Executor-side fetching: read one shard from a start position, either as far as the batch's limits
allow (first attempt) or exactly up to a recorded end (replay), into Arrow-ready columns.

- A read stops on the first response that shows the shard caught up (MillisBehindLatest 0 and less
  than a full page) instead of waiting on a timer.
- Calls on one shard respect the service's read quota, per process (`worker_state.PACER`).
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
import logging
import random
import time
from dataclasses import dataclass

import pyarrow.compute as pc

from ..aws.errors import CALL_ERRORS, is_expired_iterator, is_retryable
from ..aws.get_records import Records
from ..aws.kinesis import KinesisProxy
from ..errors import DataLossError
from ..model import AFTER, END, INSIDE, Position, seq_key
from .columns import Columns
from .deaggregation import MAGIC, deaggregate
from .offsets import ShardEnd
from .worker_state import ITERATORS, PACER

log = logging.getLogger(__name__)

MAX_GET_RECORDS = 10_000
FETCH_ATTEMPTS = 3  # botocore's attempts per call; the fetch loop retries on within the time budget
_MAX_CALLS = 100_000  # hard bound on one shard's calls in one batch (the time budget stops it first)
# A closed shard's end is the response without NextShardIterator. Some servers only send it after an
# empty response (kinesalite, for a shard closed over a second after its last record: an empty read
# moves the iterator's clock to now, and the next empty read ends the shard): a closed shard, or a
# replay up to a shard end, reads on through this many empty responses before taking "nothing yet"
# for the tip. Found by the chaos suite.
CLOSED_EMPTY_READS = 3
_REPLAY_RETRIES = 30  # failed calls in a row a replay accepts before the task fails
_BACKOFF_BASE_S, _BACKOFF_MAX_S = 0.1, 5.0


@dataclass
class ShardLimits:
    max_records: int  # -1: unbounded (replay)
    max_bytes: int
    cutoff_ms: int | None = None
    deadline: float = float("inf")  # time.monotonic() after which no new call starts
    bytes_per_second: int = 2_000_000  # the shard's read quota; 0: no byte pacing
    closed: bool = False  # ListShards says the shard is closed (see CLOSED_EMPTY_READS)


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


class ShardRead:
    """One shard's read in one batch: where it is, what it took, and why it stopped.

    `run` is the read loop: one paced GetRecords call after another until a limit, the tip, the
    shard's end, the replay bound or the batch's time budget stops it. The `take` methods decide what
    of each response belongs to the batch."""

    def __init__(
        self,
        proxy: KinesisProxy,
        shard: str,
        start: Position,
        limits: ShardLimits,
        expect: ShardEnd | None = None,
        batch: int = -1,
    ):
        """`expect`: the recorded end a replay must reproduce (None for a first attempt)."""
        self.proxy, self.shard, self.start, self.limits = proxy, shard, start, limits
        self.expect, self.batch = expect, batch
        self.until = None if expect is None else expect.end
        self.first: tuple[str, int] | None = None  # the first user record taken
        self.cols = Columns(proxy.name, proxy.spec.key, shard)
        self.last: tuple[str, int, int] | None = None  # (seq, sub, subs in that record) of the last row taken
        self.n_bytes = 0
        self.reached_cutoff = self.stop = self.done_until = False
        # The loop's own state: the iterator in use, where it was obtained (its skips apply), when.
        self.key = (proxy.spec.key, shard)
        self.iterator: str | None = None
        self.obtained = time.monotonic()
        self.skip_from = start
        self.at_tip = self.closed = False
        self.children: tuple[str, ...] = ()
        self.behind = -1
        self.failures = self.empties = 0
        self.asked = MAX_GET_RECORDS  # the Limit of the last call
        self.started = 0.0  # when the last call started (pacing)

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
        if self.first is None:
            self.first = (records.seqs[0].as_py(), 0)
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
                if self.first is None:
                    self.first = (seq, sub)
                cols.append(payload, key, seq, sub, arrival)
                self.n_bytes += len(payload)
                self.last = (seq, sub, total)
                if until is not None and _reached(seq, sub, total, until):
                    self.stop = self.done_until = True
                    return

    # -- the read loop ---------------------------------------------------------------------------
    def run(self, fail_on_data_loss: bool = True) -> tuple[Columns, ShardEnd]:
        """Read until something stops the read; returns the rows and where the shard's read ended."""
        start, until = self.start, self.until
        if start.is_end or (until is not None and until == start):
            return self.cols, ShardEnd(start=start, end=start)
        # A cached iterator points exactly at `start`, which then is no INSIDE position (nothing to skip).
        if start.kind != INSIDE:
            self.iterator = ITERATORS.take(self.key[0], self.shard, start)
        for _call in range(_MAX_CALLS):
            if self.stop or self.closed or (until is None and time.monotonic() > self.limits.deadline):
                break
            response = self._call()
            if response is not None and self._absorb(response):
                break
        if (
            until is None
            and self.iterator is not None
            and not (self.stop or self.closed)
            and self.resume.kind != INSIDE
        ):
            # The read ended between responses (at the tip, or out of time): the iterator continues
            # from exactly where this batch ends.
            ITERATORS.put(self.key[0], self.shard, self.resume, self.iterator, self.obtained)
        return self.cols, self._end(fail_on_data_loss)

    def _want(self) -> int:
        if self.until is None and self.limits.max_records > 0:
            return max(1, min(MAX_GET_RECORDS, self.limits.max_records - len(self.cols)))
        return MAX_GET_RECORDS

    def _call(self) -> dict | None:
        """One paced GetRecords call (obtaining an iterator first if needed); None after a failure
        that the loop survives: an expired iterator (re-obtained next) or a transient error (after a
        backoff that never outlasts a first attempt's time budget)."""
        try:
            if self.iterator is None:
                self.skip_from = self.resume
                self.iterator = self.proxy.shard_iterator(self.shard, self.skip_from)
                self.obtained = time.monotonic()
            self.asked = self._want()
            self.started = PACER.before_call(self.key)
            return self.proxy.get_records(self.iterator, self.asked)
        except CALL_ERRORS as exc:
            if is_expired_iterator(exc):
                self.iterator = None
                return None
            if not is_retryable(exc):
                raise
            self.failures += 1
            if self.until is not None and self.failures > _REPLAY_RETRIES:
                raise
            pause = random.uniform(0, min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2**self.failures))
            if self.until is None:
                pause = min(pause, max(0.0, self.limits.deadline - time.monotonic()))
            time.sleep(pause)
            return None

    def _absorb(self, response: dict) -> bool:
        """Take a response's records; True when the read is over."""
        self.failures = 0
        records: Records = response["Records"]
        PACER.after_response(self.key, self.started, records.payload_bytes, self.limits.bytes_per_second)
        self.take(records, self.skip_from)
        if self.stop:
            return True
        self.iterator, self.obtained = response.get("NextShardIterator"), time.monotonic()
        self.behind = int(response.get("MillisBehindLatest", -1))
        if self.iterator is None:
            self.closed = True
            self.children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            return True
        # Caught up: MillisBehindLatest 0 and less than a full page (a full page means more is waiting,
        # whatever a lagging or simplified MillisBehindLatest says): nothing was left in the shard when
        # this response was made, records or not, so an AvailableNow run needs no further batch to see
        # it. A closed shard, or a replay up to a shard end, reads on through a few empty responses
        # first. A replay at the tip without meeting its end is handled by `_end`.
        self.empties = 0 if records else self.empties + 1
        if self.behind != 0 or len(records) >= self.asked:
            return False
        until = self.until
        to_end = self.limits.closed if until is None else until.kind == END
        if records and until is None:
            self.at_tip = not to_end
            return True
        if not records and not (to_end and self.empties < CLOSED_EMPTY_READS):
            self.at_tip = until is None
            return True
        return False

    def _end(self, fail_on_data_loss: bool) -> ShardEnd:
        until = self.until
        if until is not None:
            self._check_replay(fail_on_data_loss)
            end = until
        elif self.closed and not self.stop:
            end = Position.shard_end()
        else:
            end = self.resume
        return ShardEnd(
            start=self.start,
            end=end,
            records=len(self.cols),
            bytes=self.n_bytes,
            at_tip=self.at_tip,
            reached_cutoff=self.reached_cutoff,
            children=self.children,
            millis_behind=self.behind,
            read_at_ms=int(time.time() * 1000),
            first=self.first,
        )

    def _check_replay(self, fail_on_data_loss: bool) -> None:
        """A replay must return exactly the first attempt's rows: reach the recorded end, start at the
        recorded first record (a TRIM_HORIZON or timestamp start moves as data ages out) and count the
        same rows. Otherwise records are gone: a DataLossError, or with failOnDataLoss=false a warning
        with the number lost."""
        expect, until = self.expect, self.until
        assert expect is not None and until is not None
        reached = self.closed if until.kind == END else self.done_until
        got = len(self.cols)
        same_first = expect.first is None or expect.records == 0 or self.first == expect.first
        if reached and same_first and got == expect.records:
            return
        lost = max(0, expect.records - got)
        found = "no record" if self.first is None else f"{got} records from sequence number {self.first[0]}"
        wanted = f"{expect.records} records" + (
            f" from sequence number {expect.first[0]}" if expect.first else ""
        )
        where = f"Kinesis stream '{self.proxy.name}' ({self.proxy.spec.key}), shard {self.shard}"
        text = (
            f"{where}: batch {self.batch} must be read again exactly as first read ({wanted}, "
            f"{self.start.describe()} up to {until.describe()}), but the stream now gives {found}"
            f"{'' if reached else ' and does not reach that end'}: about {lost} records are past retention "
            "(or the stream was deleted and re-created)"
        )
        if fail_on_data_loss:
            raise DataLossError(
                f"{text}. The batch cannot be replayed exactly. Set failOnDataLoss=false to accept the loss "
                "and go on with the records that are left."
            )
        log.warning("%s; failOnDataLoss=false: going on without them", text)


def fetch_shard(
    proxy: KinesisProxy,
    shard: str,
    start: Position,
    limits: ShardLimits,
    expect: ShardEnd | None = None,
    fail_on_data_loss: bool = True,
    batch: int = -1,
) -> tuple[Columns, ShardEnd]:
    """Read `shard` from `start`. With `expect` (a recorded end), produce exactly the records the
    attempt that recorded it read, or report their loss (see `ShardRead._check_replay`)."""
    return ShardRead(proxy, shard, start, limits, expect, batch).run(fail_on_data_loss)
