"""Whether a shard last found at the tip has anything new, asked before a batch is planned for it.

Kinesis has no call that tells a shard's newest sequence number: only a read does. A batch that
re-read every idle shard each `idlePollIntervalMs` made an idle query run an empty batch every
interval (an empty file per batch in file sinks, Spark's 100-batch history gone within a minute,
almost every `stop()` interrupting a batch). The driver looks instead: one GetRecords of at most
one record per idle shard per interval, from an iterator it keeps at the shard's position, about the
calls those empty batches made (the KCL polls an idle shard about as often), and a batch is planned
only for shards that have something. The record a look returns is not kept: the batch's task reads
it, so every end is still recorded by a task, first writer wins.

A look that found nothing is also what renews the shard's tip (`ShardState.tip_ms`) while no batch
runs: "nothing after position P at moment T" means every later record arrives after T, so none can
have aged out within the retention of T. Without it, a quiet spell longer than the retention (a
weekend) turned the first new record into a false data loss, since only recorded batch ends renewed
the tip. A look's "nothing" proves that only while the tip known before it is itself within the
retention: a look at a position whose later records aged out meanwhile (the query stopped for days)
also finds nothing. So each renewal must follow one still in force (`quiet`). A look that found a
record renews the tip too, to when that record arrived: under a renewal in force nothing after P aged
out, so the record is the first after P, and P was the tip until it came. A shard with news may wait
for a batch's budget (maxRecordsPerBatch shared by many shards, one batch per availableNow run on
PySpark 4.0/4.1) longer than the old tip's retention, while its records are still there.

A shard whose tip is not known within the retention is read rather than looked at (see `news`).

Looks run beside planning: a trigger asks for the looks that are due and waits for answers at most
`LOOK_WAIT_S`; looks still in flight then are answered to the next trigger. Waiting for all of them
made planning at 2,000 idle shards longer than a 5 s trigger (docs/performance.md, section 12), so the
query fell behind its trigger because of shards with nothing new. An answer counts only for the
position it was asked at: a shard read meanwhile is looked at again from its new position.

A look that fails (a server that refuses it, an error the task's read would handle its own way) lets
the shard into the batch, as before looks; credentials that may not call GetRecords from the driver
turn looks off for that stream, with one warning. Under `trigger(availableNow=True)` every idle
shard is looked at once, whenever it was read last, and one a look found nothing in is drained for
the run (the look was answered after the run's cutoff): a run with nothing new plans no batch. Such a
run waits for every answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ...aws.services import StreamProxy
from ...aws.tip_look import TipAnswer
from ...model import Position, ShardRef, unaged
from ..state.offsets import ShardState

log = logging.getLogger(__name__)
LOOKS_AT_ONCE = 16  # looks in flight at once (each one short call)
LOOK_WAIT_S = 0.5  # how long a trigger's planning waits for looks; those still in flight answer the next
ITERATOR_FOR_MS = (
    240_000  # a kept iterator is used this long (Kinesis expires one 5 minutes after it is given)
)


class TipProbe:
    """Looks at idle shards for one query run; keeps only hints (iterators, when each shard was looked at)."""

    def __init__(
        self,
        proxy_for: Callable[[str], StreamProxy],
        interval_ms: int,
        clock: Callable[[], int],
        retention_ms: Callable[[str], int | None] = lambda _key: None,
    ) -> None:
        """`retention_ms`: each stream's retention (None: not known, the shortest Kinesis has)."""
        self._proxy_for = proxy_for
        self._retention_ms = retention_ms
        self._interval_ms = interval_ms
        self._clock = clock
        self._looked: dict[ShardRef, int] = {}  # when each shard was last looked at (driver clock)
        self._iterators: dict[ShardRef, tuple[Position, str, int]] = {}  # position, iterator, obtained
        self._denied: set[str] = set()  # streams whose credentials may not look
        # Shard -> (position, when a look last found nothing after it), kept only while each renewal
        # followed a tip still in force (see the module docstring and `tip_at`).
        self.quiet: dict[ShardRef, tuple[Position, int]] = {}
        self._pool: ThreadPoolExecutor | None = None
        # Looks asked and not answered yet: shard -> (position, when asked, the answer to come).
        self._pending: dict[ShardRef, tuple[Position, int, Future[TipAnswer]]] = {}
        self.looks = 0  # GetRecords calls made by looks (for tests and the lag report's readers)

    def news(self, idle: Mapping[ShardRef, ShardState], now: int, every: bool = False) -> set[ShardRef]:
        """The idle shards a batch should read now: those due for a look (the interval since their last
        read or look has passed; with `every`, all of them) whose look found something, or told
        nothing certain, as far as their looks are answered within `LOOK_WAIT_S` (with `every`: all),
        and those whose looks since the last call found something."""
        due = {
            ref: state
            for ref, state in idle.items()
            if every or now - max(state.polled_ms, self._looked.get(ref, 0)) >= self._interval_ms
        }
        found = {ref for ref in due if ref[0] in self._denied}  # read by batches, as before looks
        # A shard whose tip is no longer known within the retention (the query was down, or its chain
        # of renewals broke) is read, not looked at: a look finds nothing after a position both when
        # nothing came and when what came aged out meanwhile, and only a read tells the two apart and
        # says a loss (found by the simulation: a shard whose records aged out while the query was down
        # idled on, its loss never said). The read finds the tip again, and looks go on from there.
        found |= {
            ref for ref in due if not unaged(self.tip_at(ref, due[ref]), now, self._retention_ms(ref[0]))
        }
        self._ask([ref for ref in due if ref not in found and ref not in self._pending], due, now)
        for ref in due:
            self._looked[ref] = now
        return found | self._answered(idle, None if every else LOOK_WAIT_S)

    def _ask(self, refs: list[ShardRef], due: Mapping[ShardRef, ShardState], now: int) -> None:
        """Start the looks at `refs` (each from its kept iterator, if fresh)."""
        if refs and self._pool is None:
            self._pool = ThreadPoolExecutor(LOOKS_AT_ONCE, thread_name_prefix="kinesis-look")
        for ref in refs:
            assert self._pool is not None
            position = due[ref].position
            kept = self._iterators.pop(ref, None)
            fresh = kept is not None and kept[0] == position and self._clock() - kept[2] < ITERATOR_FOR_MS
            look = self._proxy_for(ref[0]).look_past_tip
            future = self._pool.submit(
                look, ref[1], position, kept[1] if fresh and kept is not None else None
            )
            self._pending[ref] = (position, now, future)

    def _answered(self, idle: Mapping[ShardRef, ShardState], wait_s: float | None) -> set[ShardRef]:
        """The answers of the looks in flight, waiting for them at most `wait_s` (None: all): the shards
        whose answers let them in. An answer renews the tip (see the module's docstring) and counts only
        while the shard is idle at the position it was asked at."""
        if not self._pending:
            return set()
        wait([future for _position, _asked, future in self._pending.values()], timeout=wait_s)
        found = set()
        for ref in sorted(self._pending):  # (in order: the same decisions however the answers came)
            position, asked, future = self._pending[ref]
            if not future.done():
                continue
            del self._pending[ref]
            answer = self._took(ref, position, future.result())
            state = idle.get(ref)
            if state is None or state.position != position:
                continue  # read since: its next look asks from where that read stopped
            if answer.news is not False:  # (a look that told nothing lets the shard in)
                found.add(ref)
            # Nothing after the position (yet, or ever: the shard ends there), or the first record after
            # it arrived at `first_ms`: the shard was at its tip there until then. (Found by the
            # simulation: a shard a look found records in, planned no budget for hours by
            # maxRecordsPerBatch, was read from a position whose tip was older than the retention, and
            # its records, all still there, were called a possible loss.)
            if answer.news is False or answer.ended or answer.first_ms > 0:
                self._renew(ref, state, asked, min(asked, answer.first_ms or asked))
        return found

    def tip_at(self, ref: ShardRef, state: ShardState) -> int:
        """When the shard was last known at its tip at the state's position: by a read (the offset's
        `tip_ms`) or by a look of this run (or one noted under metadataPath, see `seed`)."""
        kept = self.quiet.get(ref)
        return max(state.tip_ms, kept[1] if kept is not None and kept[0] == state.position else 0)

    def _renew(self, ref: ShardRef, state: ShardState, now: int, at: int) -> None:
        """A look at `now` (taken before the call: the answer shows the shard at or after it) showed the
        shard at its tip at the state's position until `at`: the tip is renewed, if the tip known before
        still holds (then no record after the position aged out before the look, so the first one it
        found is the first after the position)."""
        known = self.tip_at(ref, state)
        if unaged(known, now, self._retention_ms(ref[0])) and at > known:
            self.quiet[ref] = (state.position, at)

    def seed(self, noted: Mapping[ShardRef, tuple[Position, int]]) -> None:
        """Renewals a run before this one noted under metadataPath (`Ledger.note_quiet`), where newer."""
        for ref, (position, at) in noted.items():
            kept = self.quiet.get(ref)
            if kept is None or kept[0] != position or kept[1] < at:
                self.quiet[ref] = (position, at)

    def _took(self, ref: ShardRef, position: Position, answer: TipAnswer) -> TipAnswer:
        """Count a look's answer, keep its next iterator, and say once when the credentials may not look."""
        key, sid = ref
        self.looks += 1
        if answer.denied and key not in self._denied:
            self._denied.add(key)
            log.warning(
                "Kinesis stream %s: the driver may not call GetShardIterator/GetRecords (%s), so idle shards "
                "are read by a batch every idlePollIntervalMs instead of looked at first. Grant "
                "kinesis:GetShardIterator and kinesis:GetRecords to the driver's credentials.",
                key,
                answer.failure,
            )
        elif answer.failure:
            log.debug(
                "Kinesis stream %s, shard %s: a look failed (%s): read by the batch", key, sid, answer.failure
            )
        if answer.iterator is not None:  # a next iterator: valid 5 minutes from now
            self._iterators[ref] = (position, answer.iterator, self._clock())
        return answer

    def close(self) -> None:
        """The query stops: looks not started yet are dropped, none is waited for."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._pending.clear()

    def forget(self, idle: set[ShardRef], readable: set[ShardRef]) -> None:
        """Drop the iterators of shards no longer idle (read since, finished, or gone), and the renewals
        of shards no longer readable. A renewal outlives the shard's idleness: a shard the listing
        shows closed is read without a look, from where its last renewal holds (forgotten, the read of
        a closed shard whose last record aged out while it idled was a loss that did not happen: found
        by the simulation)."""
        for ref in [r for r in self._iterators if r not in idle]:
            del self._iterators[ref]
        for ref in [r for r in self.quiet if r not in readable]:
            del self.quiet[ref]
