"""The one shard-read loop: one shard, one batch, from a start position, either as far as the batch's
limits allow (a first attempt) or exactly up to a recorded end (a replay), into Arrow-ready columns.

The loop reads pages from a page source (`pages`; polling and enhanced fan-out are `modes`) and owns
every rule of the batch, once for all ways of reading:

- What of a page belongs to the batch (limits, cutoff, replay bound, KPL aggregates): `cutting`.
- When the read is over: the first page that shows the shard caught up (behind 0 and nothing more
  waiting) instead of a timer; the shard's end; the replay bound; the batch's time budget. A shard known
  to be closed (or a replay up to a shard end) reads on through a few empty pages before taking
  "nothing yet" for the tip: some servers answer an empty page before the one that ends the shard.
- An open's first page is read even when the open itself used up the batch's time budget (a fan-out
  subscription waits out the service's 5 s spacing first): otherwise a read that must subscribe anew
  in every batch (a task retried after its read, say) would never take a record.
- Failures (`Fault`): an expired continuation is opened again where the read got to; throttling and
  transient errors are retried while the batch's time budget lasts, then the read simply ends where it
  got to (a valid batch end), so one throttled shard or stream delays only its batch; a replay, which
  must reach its recorded end, retries longer and then fails the task.
- A first attempt that resumes "after sequence number S" reads from S itself and requires S to come
  back first (then drops it): Kinesis sequence numbers have gaps, so only S proves that nothing after it
  aged out while the query was stopped or behind. A service may answer a trimmed position with an error
  or with a continuation at the oldest record left; both end in the same decision (`loss`). A replay
  starts at the record its first attempt read first (it needs nothing before it) and checks its rows
  at the end.
- A read that ended between two pages leaves its continuation with the source for the shard's next
  batch (not when far behind: the next read must verify its start).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from ...aws.get_records import Records
from ...aws.services import StreamProxy
from ...config.stream_specs import DYNAMODB
from ...errors import StreamAccessError
from ...model import AFTER, END, INSIDE, TIMESTAMP, TRIM, Position, seq_key
from ..state.offsets import ShardEnd
from .columns import Columns
from .cutting import TIP, BatchCut, ShardLimits
from .loss import LossPolicy
from .modes import source_for
from .pages import Fault, FaultKind, Page, PageSource, ReadContext

log = logging.getLogger(__name__)

MAX_GET_RECORDS = 10_000
MAX_STEPS = 100_000  # one read's pages and opens at most (a first attempt's budget stops it far sooner)
CLOSED_EMPTY_READS = 3  # empty pages a read to a shard's end reads through (found by the chaos suite)
_REPLAY_RETRIES = 30  # failed steps in a row a replay accepts before the task fails
_BACKOFF_BASE_S, _BACKOFF_MAX_S = 0.1, 5.0
# A read this far behind the tip keeps no continuation for the next batch: that batch must verify its
# start (its records may age out meanwhile), which a kept continuation cannot.
CACHE_MAX_BEHIND_MS = 3600 * 1000


class ReadStuckError(RuntimeError):
    """A read took `MAX_STEPS` steps without ending: a bug or a service that never moves on."""


@dataclass
class ReadProgress:
    """What changes as one shard's read goes on (what it took is its `BatchCut`'s): the read's inputs
    stay as they were given, and everything `run()` moves is here, in one place."""

    skip_from: Position  # where the source was opened (a partly read aggregate's records skip)
    anchor: str | None = None  # the sequence number the next records must start with
    at_tip: bool = False
    closed: bool = False
    children: tuple[str, ...] = ()
    behind: int = -1
    failures: int = 0  # transient failures in a row
    empties: int = 0  # empty pages in a row
    page_due: bool = False  # an open's first page, read whatever the time budget says
    holder: str = ""  # where the continuation was kept for other executors (`PageSource.keep`)


class ShardRead:
    """One shard's read in one batch: where it is and why it stopped. What it took, and whether a limit,
    the cutoff or the recorded end says the batch has enough, is its `cut`'s (`cutting.BatchCut`)."""

    def __init__(
        self,
        source: PageSource | str,
        context: ReadContext,
        start: Position,
        expect: ShardEnd | None = None,
        fail_on_data_loss: bool = True,
        tip_ms: int = 0,
    ) -> None:
        """`source`: the page source, or the name of a read mode (see `modes`) to make one for `context`;
        `expect`: the recorded end a replay must reproduce (None for a first attempt), exactly the records
        the attempt that recorded it read, or their loss reported; `tip_ms`: when a read last found the
        shard at the tip at `start` (0: not known)."""
        proxy = context.proxy
        self.start, self.expect, self.context = start, expect, context
        self.until = None if expect is None else expect.reached
        origin = start
        if expect is not None and expect.first is not None and expect.records > 0:
            # A replay needs nothing before the first record its first attempt read: start there, so that a
            # start that moves (TRIM_HORIZON, a timestamp) or an aged-out "after S" cannot shift it.
            origin = Position.inside(expect.first[0], expect.first[1] - 1)
        self.cut = BatchCut(
            proxy.name, proxy.spec.resolved_arn, context.shard, start, context.limits, self.until, origin
        )
        self.source = source_for(source, context) if isinstance(source, str) else source
        kind = "DynamoDB table" if proxy.spec.service == DYNAMODB else "Kinesis stream"
        where = f"{kind} '{proxy.name}' ({proxy.spec.resolved_arn}), shard {context.shard}"
        self.policy = LossPolicy(where, context.batch, fail_on_data_loss, proxy.spec.retention_ms, tip_ms)
        self.progress = ReadProgress(skip_from=start)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> tuple[Columns, ShardEnd]:
        """Read until something stops the read; returns the rows and where the shard's read ended."""
        start, until = self.start, self.until
        if start.is_end or (until is not None and until == start):
            return self.cut.cols, ShardEnd(start=start, reached=start)
        if until is None and start.kind in (TIMESTAMP, TRIM):
            self.policy.check_start(start)
        # The shard's last read may have left its continuation exactly at `start` (inside an aggregate
        # only where the source hands the rest of the last page back: the read skips what it consumed).
        partial_ok = self.source.keeps_partial
        reuse = until is None and (start.kind != INSIDE or partial_ok) and self.cut.origin == start
        opened = False
        try:
            for _step in range(MAX_STEPS):
                if self._over():
                    break
                if not opened:
                    opened, reuse = self._open(reuse), False
                    continue
                self.progress.page_due = False
                try:
                    page = self.source.next_page(self._want())
                except Fault as fault:
                    opened = self._failed(fault, opened=True)
                    continue
                if page is not None and self._absorb(page):
                    break
            else:
                raise ReadStuckError(f"{self.policy.where}: the read did not end within {MAX_STEPS} steps")
            # A read that stopped inside a page keeps only where the source gives the rest back. (A
            # verified open whose S has not come back yet would hand S to the next batch unchecked.)
            partial = self.cut.stop or self.cut.resume.kind == INSIDE
            between = opened and not self.progress.closed and (partial_ok or not partial)
            between = between and self.progress.anchor is None
            if until is None and between and self.progress.behind < CACHE_MAX_BEHIND_MS:
                self.progress.holder = self.source.keep(self.cut.resume)
        finally:
            self.source.close()
        return self.cut.cols, self._end()

    def _over(self) -> bool:
        if self.cut.stop or self.progress.closed:
            return True
        return (
            self.until is None
            and not self.progress.page_due
            and time.monotonic() > self.context.limits.deadline
        )

    def _want(self) -> int:
        """How many records the next page may hold (where the source can ask)."""
        if self.until is None and self.context.limits.max_records > 0:
            # (a verified read's first page also holds the record it resumed after, which it drops)
            extra = 1 if self.progress.anchor is not None and self.progress.skip_from.kind == AFTER else 0
            return max(1, min(MAX_GET_RECORDS, self.context.limits.max_records - len(self.cut.cols) + extra))
        return MAX_GET_RECORDS

    def _open(self, reuse: bool) -> bool:
        """Open the source where the read got to; False after a failure the read survives."""
        position = self.cut.resume
        verify = self.until is None and position.anchor is not None
        try:
            fresh = self.source.open(position, verify=verify, reuse=reuse)
        except Fault as fault:
            return self._failed(fault, opened=False)
        self.progress.skip_from = position
        self.progress.anchor = position.anchor if (fresh and verify) else None
        self.progress.page_due = True
        return True

    def _failed(self, fault: Fault, *, opened: bool) -> bool:
        """What a source's failure means for the read; returns whether the source is still open."""
        kind = fault.kind
        if kind is FaultKind.REOPEN:
            return False
        if kind is FaultKind.AHEAD:
            # The start is ahead of the service's clock (a LATEST pinned by a driver whose clock runs
            # ahead, or a timestamp not reached yet): nothing can have arrived since. At the tip.
            self.progress.at_tip = True
            self.cut.ending = self.cut.ending or TIP
            return opened
        if kind is FaultKind.GONE:
            return self._gone()
        self._back_off(fault)
        return opened and kind is FaultKind.RETRY

    def _back_off(self, fault: Fault) -> None:
        """A transient failure: logged once per streak (throttling is routine, a line per call is noise),
        fatal to a replay after too many in a row, else a jittered pause that never outlasts a first
        attempt's time budget."""
        self.progress.failures += 1
        if self.progress.failures == 1:
            log.info(
                "%s, batch %d: %s; backing off and trying again", self.policy.where, self.context.batch, fault
            )
        if self.until is not None and self.progress.failures > _REPLAY_RETRIES:
            raise StreamAccessError(
                f"{self.policy.where}: batch {self.context.batch} must be read again to its recorded end, but "
                f"{self.progress.failures} calls in a row failed ({fault.cause or fault}). Check the stream's "
                "throughput and the network; the query can be restarted from its checkpoint."
            ) from fault.cause
        pause = random.uniform(0, min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2**self.progress.failures))
        if self.until is None:
            pause = min(pause, max(0.0, self.context.limits.deadline - time.monotonic()))
        time.sleep(pause)

    def _gone(self) -> bool:
        """The shard, or the records at the read's position, are not there. The stream deleted or
        re-created ends the query with a clear error; otherwise the data aged out past retention: a
        loss (see `loss`), and the read goes on from the oldest record left (or the shard counts as read
        to its end when none of it is left). A first read's start is judged by the tip rule; a replay
        goes on and `check_reproduced` judges its rows. Returns whether the source is open."""
        self.context.proxy.check_same_stream(within_s=10.0)
        position = self.cut.resume
        try:
            exists = self.source.open_oldest()
        except Fault as fault:
            self._back_off(fault)
            return False
        start_gone = self.until is None and self.cut.last is None
        if not exists:
            what = (
                f"the shard is gone (past retention) before it was read to its end from {position.describe()}"
            )
        else:
            what = (
                f"{position.describe()}, where the read resumes, is past retention, and records after it, up "
                "to the oldest one left, may be too"
            )
        if start_gone:
            self.policy.aged_out(what)
        elif self.until is None:  # (gone between two calls of this read: as unknown what came after)
            self.policy.loss(what)
        self.progress.anchor = None
        if not exists:
            self.progress.closed = True
            return False
        self.progress.skip_from = Position.trim_horizon()
        if self.cut.last is None:
            self.cut.restart(Position.trim_horizon())
        return True

    # -- a page ----------------------------------------------------------------------------------
    def _absorb(self, page: Page) -> bool:
        """Take a page's records; True when the read is over."""
        self.progress.failures = 0
        records = page.records
        if self.progress.anchor is not None:
            records = self._check_anchor(records, page)
        self.cut.take(records, self.progress.skip_from)
        if self.cut.stop:
            return True
        self.progress.behind = page.behind_ms
        if page.ended:
            self.progress.closed, self.progress.children = True, page.children
            return True
        to_end = self.context.to_end
        if to_end and self._past_listed_end():
            self.progress.closed = True  # (also where the server never says so: moto)
            return True
        self.progress.empties = 0 if len(records) else self.progress.empties + 1
        if page.settled:  # the source waited as long as this read waits: over, at the tip if it says so
            self.progress.at_tip = self.until is None and page.behind_ms == 0 and not to_end
            return True
        # Caught up: behind 0 and nothing more waiting (a full page means more is waiting, whatever a
        # lagging or simplified MillisBehindLatest says): nothing was left in the shard when this page was
        # made, records or not, so an AvailableNow run needs no further batch to see it. A replay at the
        # tip without meeting its end is judged by `_end`.
        if page.behind_ms != 0 or page.full:
            return False
        if len(records) and self.until is None:
            self.progress.at_tip = not to_end
            return True
        if not len(records) and not (to_end and self.progress.empties < CLOSED_EMPTY_READS):
            # (a shard read to its end is never at the tip before its end is confirmed: an AvailableNow
            # run takes a shard at the tip as drained, and would leave its children unread)
            self.progress.at_tip = self.until is None and not to_end
            return True
        return False

    def _past_listed_end(self) -> bool:
        """The read of a shard the listing shows closed has passed the listing's last sequence number (or
        the shard is empty): nothing can follow, whatever the server says next."""
        limits = self.context.limits
        last = limits.last_seq if self.until is None or self.until.kind == END else None
        if last is None:
            return False
        # (the read's start counts too: a read that met its start aged out goes on from the oldest record
        # left, a TRIM_HORIZON that says nothing of how far the shard was read; found by the simulation,
        # a closed shard read again in every batch)
        for position in (self.cut.resume, self.start):
            if position.kind == AFTER and position.seq is not None and seq_key(position.seq) >= seq_key(last):
                return True
        position = self.cut.resume
        if position.kind in (TRIM, TIMESTAMP):
            return limits.first_seq is not None and seq_key(last) <= seq_key(limits.first_seq)
        return False

    def _check_anchor(self, records: Records, page: Page) -> Records:
        """A verified read's first records: the anchor S first (dropped when the last batch read all of
        it), or nothing at all while the service still has records on the way. Anything else, or the tip
        or the shard's end without S, means S aged out, and records after it may have too."""
        anchor = self.progress.anchor
        if not len(records):
            # (a settled page only says that no push came in time: S may still be on its way)
            if page.behind_ms == 0 or page.ended:
                self.progress.anchor = None
                self.policy.aged_out(
                    f"sequence number {anchor}, where the read resumes, is past retention, and no record is "
                    "left after it"
                )
            return records
        self.progress.anchor = None
        first = records.seqs[0].as_py()
        if first == anchor:
            return records.slice(1) if self.progress.skip_from.kind == AFTER else records
        self.policy.aged_out(
            f"sequence number {anchor}, where the read resumes, is past retention: an unknown number of "
            f"records after it, up to sequence number {first} (the oldest left), may be too"
        )
        return records

    # -- the end ---------------------------------------------------------------------------------
    def _end(self) -> ShardEnd:
        until, cut = self.until, self.cut
        if until is not None:
            assert self.expect is not None
            reached = self.progress.closed if until.kind == END else cut.done_until
            self.policy.check_reproduced(self.expect, self.start, reached, len(cut.cols), cut.first)
            end = until
        elif self.progress.closed and not cut.stop:
            end = Position.shard_end()
        elif cut.last is None:
            # Nothing taken: the read ends where it started, whichever way the service answered a start
            # that aged out (an error sends the read to the oldest record: `_gone`; an iterator at the
            # oldest record does not move it). An end of TRIM_HORIZON would be one no replay can reach
            # exactly while the shard stays quiet.
            end = self.start
        else:
            end = cut.resume
        if cut.misplaced:
            log.warning(
                "Kinesis stream '%s', shard %s: %d user records of KPL aggregates lie outside the shard's hash "
                "key range and were dropped, as the KCL drops them (a KPL producer's stale shard map puts them "
                "there after a reshard, and it re-sends them to the shard that holds their keys)",
                cut.cols.stream, cut.cols.shard, cut.misplaced,
            )  # fmt: skip
        return ShardEnd(
            start=self.start,
            reached=end,
            records=len(cut.cols),
            bytes=cut.n_bytes,
            at_tip=self.progress.at_tip,
            reached_cutoff=cut.reached_cutoff,
            children=self.progress.children,
            millis_behind=self.progress.behind,
            read_at_ms=int(time.time() * 1000),
            first=cut.first,
            holder=self.progress.holder,
            losses=tuple(self.policy.losses),
            misplaced=cut.misplaced,
        )


def fetch_shard(
    proxy: StreamProxy,
    shard: str,
    start: Position,
    limits: ShardLimits,
    expect: ShardEnd | None = None,
    fail_on_data_loss: bool = True,
    batch: int = -1,
    tip_ms: int = 0,
) -> tuple[Columns, ShardEnd]:
    """A `ShardRead` by polling (GetRecords): the backfill's way, and the tests'."""
    context = ReadContext(proxy, shard, limits, None if expect is None else expect.reached, batch)
    return ShardRead("polling", context, start, expect, fail_on_data_loss, tip_ms).run()
