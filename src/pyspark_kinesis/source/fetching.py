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
- A first attempt that resumes "after sequence number S" reads from S itself and requires S to come
  back first (then drops it): Kinesis sequence numbers have gaps, so only S proves that nothing after
  it aged out while the query was stopped or behind. A service may answer a trimmed position with an
  error or with an iterator at the oldest record left; both end in the same `failOnDataLoss`
  decision, unless the shard was last seen at the tip at that position within the stream's retention
  (then every record after S arrived since, and none can have aged out). A start at a timestamp older
  than the retention is decided the same way. A replay starts at the record the first attempt read
  first (it needs nothing before it) and checks its rows at the end (`_check_replay`).
- What of each response belongs to the batch (limits, cutoff, replay bound, aggregates): `cutting`.
"""

from __future__ import annotations

import logging
import random
import time

from ..aws.errors import (
    CALL_ERRORS,
    error_code,
    is_expired_iterator,
    is_foreign_sequence_number,
    is_future_timestamp,
    is_not_found,
    is_retryable,
)
from ..aws.get_records import Records
from ..aws.kinesis import KinesisProxy
from ..errors import DataLossError
from ..model import AFTER, END, INSIDE, MIN_RETENTION_MS, RETENTION_MARGIN_MS, TIMESTAMP, Position
from .columns import Columns
from .cutting import BatchCut, ShardLimits
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
# A read this far behind the tip keeps no iterator for the next batch: that batch must verify its start
# (its records may age out meanwhile), which a cached iterator cannot.
CACHE_MAX_BEHIND_MS = 3600 * 1000


class ShardRead(BatchCut):
    """One shard's read in one batch: where it is, what it took, and why it stopped.

    `run` is the read loop: one paced GetRecords call after another until a limit, the tip, the
    shard's end, the replay bound or the batch's time budget stops it. What of each response belongs
    to the batch is `BatchCut`'s to decide."""

    def __init__(
        self,
        proxy: KinesisProxy,
        shard: str,
        start: Position,
        limits: ShardLimits,
        expect: ShardEnd | None = None,
        batch: int = -1,
        fail_on_data_loss: bool = True,
        tip_ms: int = 0,
    ):
        """`expect`: the recorded end a replay must reproduce (None for a first attempt); `tip_ms`: when
        a read last found the shard at the tip at `start` (0: not known)."""
        super().__init__(
            proxy.name, proxy.spec.key, shard, start, limits, None if expect is None else expect.end
        )
        self.proxy, self.shard = proxy, shard
        self.expect, self.batch, self.fail_on_data_loss = expect, batch, fail_on_data_loss
        self.tip_ms = tip_ms
        self.anchor: str | None = None  # a sequence number the next records must start with (see above)
        if expect is not None and expect.first is not None and expect.records > 0:
            # A replay needs nothing before the first record its first attempt read: start there, so that a
            # start that moves (TRIM_HORIZON, a timestamp) or an aged-out "after S" cannot shift it.
            self.origin = Position.inside(expect.first[0], expect.first[1] - 1)
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

    # -- the read loop ---------------------------------------------------------------------------
    def run(self) -> tuple[Columns, ShardEnd]:
        """Read until something stops the read; returns the rows and where the shard's read ended."""
        start, until = self.start, self.until
        if start.is_end or (until is not None and until == start):
            return self.cols, ShardEnd(start=start, end=start)
        old = start.kind == TIMESTAMP and not self._unaged(int(start.ts_ms or 0))
        if until is None and old and not self._unaged(self.tip_ms):
            self._loss(
                f"the read starts at {start.describe()}, longer ago than the stream's retention "
                f"({self._retention_ms() // 3_600_000} h): an unknown number of records from then up to the "
                "oldest one left may be past retention"
            )
        # A cached iterator points exactly at `start`, which then is no INSIDE position (nothing to skip).
        if start.kind != INSIDE and self.origin == start:
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
            and self.behind < CACHE_MAX_BEHIND_MS
        ):
            # The read ended between responses (at the tip, or out of time): the iterator continues
            # from exactly where this batch ends.
            ITERATORS.put(self.key[0], self.shard, self.resume, self.iterator, self.obtained)
        return self.cols, self._end()

    def _want(self) -> int:
        if self.until is None and self.limits.max_records > 0:
            # (a verified read's first page also holds the record it resumed after, which it drops)
            extra = 1 if self.anchor is not None and self.skip_from.kind == AFTER else 0
            return max(1, min(MAX_GET_RECORDS, self.limits.max_records - len(self.cols) + extra))
        return MAX_GET_RECORDS

    def _call(self) -> dict | None:
        """One paced GetRecords call (obtaining an iterator first if needed); None after a failure
        that the loop survives: an expired iterator (re-obtained next) or a transient error (after a
        backoff that never outlasts a first attempt's time budget)."""
        try:
            if self.iterator is None:
                self.skip_from = self.resume
                verify = self.until is None and self.skip_from.anchor is not None
                self.iterator = self.proxy.shard_iterator(self.shard, self.skip_from, verify=verify)
                self.anchor = self.skip_from.anchor if verify else None
                self.obtained = time.monotonic()
            self.asked = self._want()
            self.started = PACER.before_call(self.key)
            return self.proxy.get_records(self.iterator, self.asked)
        except CALL_ERRORS as exc:
            if is_expired_iterator(exc):
                self.iterator = None
                return None
            if self.iterator is None and self.skip_from.kind == TIMESTAMP and is_future_timestamp(exc):
                # The start is ahead of the service's clock (a LATEST pinned by a driver whose clock runs
                # ahead, or a timestamp not reached yet): nothing can have arrived since. At the tip.
                self.at_tip = self.stop = True
                return None
            if is_not_found(exc) or is_foreign_sequence_number(exc):
                self._gone()
                return None
            if not is_retryable(exc):
                raise
            self._back_off(exc, "backing off and trying again")
            return None

    def _back_off(self, exc: BaseException, then: str) -> None:
        """A transient failure: logged once per streak (throttling is routine, a log line per call is
        noise), fatal to a replay after too many in a row, else a jittered pause that never outlasts a
        first attempt's time budget."""
        self.failures += 1
        if self.failures == 1:
            log.info(
                "Kinesis stream '%s', shard %s, batch %d: %s; %s",
                self.proxy.name,
                self.shard,
                self.batch,
                error_code(exc) or exc.__class__.__name__,
                then,
            )
        if self.until is not None and self.failures > _REPLAY_RETRIES:
            raise exc
        pause = random.uniform(0, min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2**self.failures))
        if self.until is None:
            pause = min(pause, max(0.0, self.limits.deadline - time.monotonic()))
        time.sleep(pause)

    def _absorb(self, response: dict) -> bool:
        """Take a response's records; True when the read is over."""
        self.failures = 0
        records: Records = response["Records"]
        page = len(records)
        PACER.after_response(self.key, self.started, records.payload_bytes, self.limits.bytes_per_second)
        if self.anchor is not None:
            records = self._check_anchor(records, response)
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
        if self.behind != 0 or page >= self.asked:
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

    def _check_anchor(self, records: Records, response: dict) -> Records:
        """A verified read's first records: the anchor S first (dropped when the last batch read all of
        it), or nothing at all while the service still has records on the way. Anything else, or the tip
        or the shard's end without S, means S aged out, and records after it may have too."""
        anchor = self.anchor
        if not len(records):
            if response.get("MillisBehindLatest") == 0 or response.get("NextShardIterator") is None:
                self.anchor = None
                self._aged_out(
                    f"sequence number {anchor}, where the read resumes, is past retention, and "
                    "no record is left after it"
                )
            return records
        self.anchor = None
        first = records.seqs[0].as_py()
        if first == anchor:
            return records.slice(1) if self.skip_from.kind == AFTER else records
        self._aged_out(
            f"sequence number {anchor}, where the read resumes, is past retention: an unknown number of "
            f"records after it, up to sequence number {first} (the oldest left), may be too"
        )
        return records

    def _aged_out(self, what: str) -> None:
        """The read's start is past retention: a loss, unless no record after it can have aged out."""
        if self._unaged(self.tip_ms):
            log.info(
                "Kinesis stream '%s', shard %s, batch %d: %s; the shard was at the tip there %d s ago, so "
                "nothing after it can have aged out",
                self.proxy.name,
                self.shard,
                self.batch,
                what.split(":")[0],
                (int(time.time() * 1000) - self.tip_ms) // 1000,
            )
            return
        self._loss(what)

    def _retention_ms(self) -> int:
        return self.proxy.spec.retention_ms or MIN_RETENTION_MS

    def _unaged(self, since_ms: int) -> bool:
        """No record that arrived after `since_ms` can have aged out yet (0: nothing is known)."""
        age = int(time.time() * 1000) - since_ms
        return since_ms > 0 and age < self._retention_ms() - RETENTION_MARGIN_MS

    def _gone(self) -> None:
        """The shard, or the records at the read's position, are not there. The stream deleted or
        re-created ends the query with a clear error; otherwise the data aged out past retention: a
        DataLossError, or with failOnDataLoss=false a warning and the read goes on from the oldest
        record left (or the shard counts as read to its end when none of it is left). Not a loss when
        the shard was at the tip at the read's start within the retention (see `_aged_out`); and a
        replay goes on from the oldest record left and lets `_check_replay` judge its rows."""
        self.proxy.check_same_stream(within_s=10.0)
        position = self.resume
        try:
            oldest: str | None = self.proxy.shard_iterator(self.shard, Position.trim_horizon())
        except CALL_ERRORS as exc:
            if not is_not_found(exc):
                raise
            oldest = None
        first_attempt_start = self.until is None and self.last is None
        if oldest is None:
            what = (
                f"the shard is gone (past retention) before it was read to its end from {position.describe()}"
            )
            if first_attempt_start:
                self._aged_out(what)
            elif self.until is None:
                self._loss(what)
            self.closed = True
            return
        what = f"the records from {position.describe()} on are past retention, up to the oldest one left"
        if first_attempt_start:
            self._aged_out(what)
        elif self.until is None:
            self._loss(what)
        self.anchor = None
        self.iterator, self.obtained, self.skip_from = oldest, time.monotonic(), Position.trim_horizon()
        if self.last is None:
            self.origin = Position.trim_horizon()

    def _loss(self, what: str) -> None:
        where = f"Kinesis stream '{self.proxy.name}' ({self.proxy.spec.key}), shard {self.shard}"
        if self.fail_on_data_loss:
            raise DataLossError(
                f"{where}, batch {self.batch}: {what}, and those records are lost. Set failOnDataLoss=false "
                "to accept the loss and go on."
            )
        log.warning("%s, batch %d: %s; failOnDataLoss=false: going on without them", where, self.batch, what)

    def _end(self) -> ShardEnd:
        until = self.until
        if until is not None:
            self._check_replay()
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

    def _check_replay(self) -> None:
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
        if self.fail_on_data_loss:
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
    tip_ms: int = 0,
) -> tuple[Columns, ShardEnd]:
    """Read `shard` from `start`. With `expect` (a recorded end), produce exactly the records the
    attempt that recorded it read, or report their loss (see `ShardRead._check_replay`)."""
    return ShardRead(proxy, shard, start, limits, expect, batch, fail_on_data_loss, tip_ms).run()
