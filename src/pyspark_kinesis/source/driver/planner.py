"""Driver-side planning: the initial offset and each next offset (the tasks of a batch: `task_plans`).

The driver never calls GetRecords. It learns where batch k stopped from the tasks' records in the
batch-end log, turns those ends into the start positions of batch k+1, applies the lineage rule and
Spark's read limit, and decides which task reads which shard. Everything it decides goes into the
offset, so a restarted driver replans a logged batch identically from the checkpoint alone.

`next_offset` is one pipeline: the recorded ends (`ledger`) -> new positions (`steps.advanced`) -> the
options' streams -> listing and lineage (`discovery`, `lineage`) -> admission (`tip_probe`) -> budgets
and assignment (`batch_shape`, `steps.assigned`) -> the offset, marked planned in the ledger. What
touches metadataPath is the ledger's; `steps` and `lineage` are functions of values, `discovery` and
`tip_probe` caches of the listing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from ...aws.services import StreamProxy
from ...config.stream_specs import StreamSpec
from ...errors import StreamAccessError
from ...model import Position, ShardInfo, ShardRef, stream_words
from ..options import SourceConfig
from ..state.batch_log import BatchEndLog
from ..state.offsets import ShardEnd, ShardState, SourceOffset
from . import lineage, steps
from .batch_shape import BatchShape
from .discovery import ShardDiscovery, now_ms, recreated_streams
from .lag import LagTracker, report_losses
from .ledger import Ledger
from .recorded import other_streams
from .stream_set import StreamSet
from .tip_probe import TipProbe

log = logging.getLogger(__name__)
_AVAILABLE_NOW_LISTINGS = 6  # listings tried after a closure before an AvailableNow run gives up


class Planner:
    """Plans batches for one query run. The truth is the offset and the log (`ledger`); what it
    keeps besides is the listing (`discovery`), the batch shape's recent loads, the lag report, and
    hints (where each shard's continuation was kept, the closures already listed after)."""

    def __init__(
        self,
        config: SourceConfig,
        batch_log: BatchEndLog,
        proxy_factory: Callable[[StreamSpec], StreamProxy],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.ledger = Ledger(batch_log, config.metadata_path or "")
        self.clock = clock
        self.sleep: Callable[[float], None] = time.sleep  # between listings retried (tests replace it)
        self.discovery = ShardDiscovery(config, proxy_factory, clock)
        self.stream_set = StreamSet(config, self.discovery, clock)  # the offset's streams (the options')
        self.cutoff_ms: int | None = None  # set by Trigger.AvailableNow, and by drainInOneBatch
        self.drain = False  # drainInOneBatch: batches planned read every shard to the cutoff (one batch)
        # Where each shard's last read kept its continuation (`ShardEnd.holder`): handed to the next
        # batch's tasks (`tasks.plan_tasks`). A hint held in memory: after a restart reads subscribe anew.
        self.holders: dict[ShardRef, str] = {}
        self._listed: set[str] = set()  # streams listed for a logged batch's shards in this run (`listed`)
        self.shape = BatchShape(config)
        self._initial: SourceOffset | None = None
        self._closures_seen: set[ShardRef] = set()  # closures a listing has looked at
        self.lag = LagTracker()  # what reportLatestOffset() shows in Spark's progress
        self.probe = TipProbe(self.discovery.proxy, config.idle_poll_interval_ms, clock, self._retention_ms)

    def read_up_to(self, cutoff_ms: int, *, drain: bool = False) -> None:
        """This run reads only what arrived by `cutoff_ms` (Trigger.AvailableNow), and with `drain`
        (drainInOneBatch) in one batch read to that moment in chunks."""
        self.cutoff_ms, self.drain = cutoff_ms, drain

    @property
    def token(self) -> str | None:
        """The query's token, once this run knows it (it claimed metadataPath as that query)."""
        return self.ledger.token

    # -- start of a new query --------------------------------------------------------------------
    def initial_offset(self) -> SourceOffset:
        """Computed once per run (Spark may ask again; every answer must be the same). Its token is
        claimed only once a batch is planned from it (`_begin`): Spark asks for it too when it runs a
        logged first batch again after a restart, a batch of the logged token's query."""
        if self._initial is None:
            streams = {
                spec.resolved_arn: self.discovery.initial_states(spec.resolved_arn)
                for spec in self.config.streams
            }
            self._initial = SourceOffset(
                token=uuid.uuid4().hex, batch=-1, streams=streams, created=self._created(streams, {})
            )
        return self._initial

    def _begin(self, start: SourceOffset) -> None:
        """A batch is planned from this run's initial offset: the new query starts."""
        token = start.token
        if self._initial is None or token != self._initial.token:
            return
        if not self.ledger.begin(token, sorted(start.streams), self.config.streams):
            return
        for spec in self.config.streams:
            named = f" ({len(spec.shard_starts)} shards named)" if spec.shard_starts else ""
            log.info(
                "Kinesis source starts query %s: %s (%s), %d shards from %s%s", token, spec.describe(),
                spec.resolved_arn, len(start.streams.get(spec.resolved_arn, {})), spec.starting_position.describe(), named,
            )  # fmt: skip

    # -- checks that the checkpoint and the records belong together ------------------------------
    def check_offset(self, offset: SourceOffset) -> None:
        if offset.streams and not any(self.stream_set.covered(key) for key in offset.streams):
            raise other_streams(set(offset.streams), {spec.resolved_arn for spec in self.config.streams})
        self.ledger.check_query(offset)

    def listed(self, offset: SourceOffset) -> dict[ShardRef, ShardInfo]:
        """What the listing said of each shard batch `offset` reads: its HashKeyRange (the tasks drop the
        KPL user records outside it, as the KCL does) and, closed, its last sequence number (a read past
        it is at the shard's end, also where a server never ends the shard: moto). As the batch was
        planned (its `planned` marker keeps it), so a replay after a restart filters and ends exactly as
        its first attempt did, whatever a listing now answers. Only a marker written before markers kept
        it sends us to the listing, which must then answer."""
        known = self.ledger.listed(offset.batch)
        if known is not None:
            return known
        listed: dict[ShardRef, ShardInfo] = {}
        for refs in offset.tasks().values():
            for ref in refs:
                info = self._info_listed(ref)
                if info is None and self.config.stream(ref.stream) is not None:
                    raise StreamAccessError(
                        f"{stream_words(ref.stream)}: batch {offset.batch} must be read as it was planned, "
                        f"and its record under metadataPath does not keep shard {ref.shard}'s hash key "
                        "range (it was written by an earlier version), which ListShards did not answer. "
                        "Start the query again once ListShards answers."
                    )
                if info is not None:
                    listed[ref] = info
        return listed

    def _info_listed(self, ref: ShardRef) -> ShardInfo | None:
        """What a listing says of a shard; a stream not listed yet in this run is listed once now."""
        info = self.discovery.info(*ref)
        if info is None and ref.stream not in self._listed and self.config.stream(ref.stream) is not None:
            self._listed.add(ref.stream)
            try:
                self.discovery.refresh(ref.stream, {}, force=True, cutoff_ms=None)
            except StreamAccessError as exc:
                log.warning("Kinesis stream %s: could not list its shards: %s", ref.stream, exc)
            info = self.discovery.info(*ref)
        return info

    def _with_ranges(self, candidates: list[ShardRef]) -> list[ShardRef]:
        """The candidates whose hash key range a listing told: the batch's marker keeps each one, for
        every attempt and replay to filter by (a shard the listings of this run have not shown yet,
        after a restart whose listings fail, waits for one). Under AvailableNow, where no batch planned
        ends the run, the listing is tried a few times, then the run fails rather than end with those
        shards unread (found by the simulation: a scheduled run that met a ListShards outage ended
        early, its records left for a later run without a word)."""
        kept = [ref for ref in candidates if self._info_listed(ref) is not None]
        if len(kept) < len(candidates) and self.cutoff_ms is not None:
            kept = self._listed_for_available_now(candidates)
        if len(kept) < len(candidates):
            waiting = sorted(set(candidates) - set(kept))
            log.warning(
                "Kinesis shards %s wait for a listing that shows their hash key ranges",
                ", ".join(f"{sid} of {key}" for key, sid in waiting),
            )
        return kept

    def _listed_for_available_now(self, candidates: list[ShardRef]) -> list[ShardRef]:
        missing = {ref.stream for ref in candidates if self.discovery.info(*ref) is None}
        for attempt in range(_AVAILABLE_NOW_LISTINGS):
            for key in sorted(missing):
                try:
                    self.discovery.refresh(key, {}, force=True, cutoff_ms=None)
                except StreamAccessError as exc:
                    log.warning("Kinesis stream %s: could not list its shards: %s", key, exc)
            missing = {ref.stream for ref in candidates if self.discovery.info(*ref) is None}
            if not missing:
                return candidates
            if attempt + 1 < _AVAILABLE_NOW_LISTINGS:
                self.sleep(min(8.0, 0.5 * 2**attempt))
        raise StreamAccessError(
            f"Kinesis stream(s) {', '.join(sorted(missing))}: {_AVAILABLE_NOW_LISTINGS} listings in a row failed, "
            "and without them trigger(availableNow=True) cannot read their shards (each batch keeps the hash key "
            "ranges it filters by). Run the query again once ListShards answers."
        )

    def check_logged_batch(self, end: SourceOffset) -> None:
        """Before any task of a logged batch runs: see `Ledger.check_logged_batch` (and the options
        must still name one of its streams)."""
        self.check_offset(end)
        self.ledger.check_logged_batch(end)

    def committed(self, end: SourceOffset) -> None:
        """Spark committed the batch that ended at `end` (see `Ledger.committed`)."""
        self.ledger.committed(end)

    # -- reading what the last batch did ---------------------------------------------------------
    def recorded_ends(
        self, offset: SourceOffset, recreated: set[str] | None = None
    ) -> dict[ShardRef, ShardEnd]:
        """Where each shard of batch `offset.batch` stopped, from the tasks' records (see `recorded`).
        Shards of streams removed from the options (or `recreated` since `offset`: by default as the
        options say now) were not read when the batch ran after the restart (see `tasks.plan_tasks`)."""
        if offset.batch < 0:
            return {}
        known = self.ledger.ends_read(offset)
        if known is not None:
            return known
        gone = set(recreated_streams(offset, self.config)) if recreated is None else recreated
        ends, unrun = self.ledger.read_ends(
            offset, lambda ref: ref[0] not in gone and self.stream_set.covered(ref[0])
        )
        self.shape.observe(ends, unrun)
        report_losses(offset.batch, ends)
        return ends

    # -- the next offset -------------------------------------------------------------------------
    def advance(
        self, offset: SourceOffset, ends: dict[ShardRef, ShardEnd]
    ) -> dict[str, dict[str, ShardState]]:
        """Shard states after batch `offset.batch` (`steps.advanced`); remembers where each read kept
        its continuation (`steps.holders_of`)."""
        self.holders.update(steps.holders_of(ends))
        return steps.advanced(offset, ends)

    def _list_after(
        self, closures: set[ShardRef], ends: dict[ShardRef, ShardEnd], states: dict[str, ShardState]
    ) -> dict[str, ShardState]:
        """The listing a closure forces. It must succeed and show the children the closed shards
        reported (ChildShards), or it is tried again: at the next trigger, or under AvailableNow, where
        no batch planned means the run ends, a few times now, and then the run fails rather than end
        with those children unread."""
        key = next(iter(closures))[0]
        expected = {child for ref in closures for child in ends[ref].children}
        tries = _AVAILABLE_NOW_LISTINGS if self.cutoff_ms is not None else 1
        refreshed, missing = states, expected
        for attempt in range(tries):
            refreshed = self.discovery.refresh(key, states, force=True, cutoff_ms=self.cutoff_ms)
            missing = expected - set(refreshed)
            if refreshed is not states and not missing:
                self._closures_seen |= closures
                return refreshed
            if attempt + 1 < tries:
                self.sleep(min(8.0, 0.5 * 2**attempt))
        if self.cutoff_ms is not None:
            raise StreamAccessError(
                f"{stream_words(key)}: shards {', '.join(sorted(sid for _k, sid in closures))} closed, but "
                f"{tries} listings in a row failed or did not show their children"
                f"{' ' + ', '.join(sorted(missing)) if missing else ''}; trigger(availableNow=True) cannot "
                "finish without reading them. Run the query again once ListShards answers."
            )
        return refreshed

    def next_offset(self, start: SourceOffset, max_rows: int | None, max_bytes: int | None) -> SourceOffset:
        """The offset of the next batch, or `start` itself when there is nothing to read now. A batch
        planned before (under asynchronous progress tracking Spark plans again from an older durable
        offset after a crash) gets the offset it was planned with."""
        self._begin(start)
        self.check_offset(start)
        recreated = set(recreated_streams(start, self.config))
        ends = self.recorded_ends(start, recreated)
        again = self._planned_before(start)
        if again is not None:
            self.lag.update(start.batch, ends, again.streams)  # (what batch `start.batch` read, as below)
            return again
        streams = self.stream_set.follow_options(self.advance(start, ends))
        for key in sorted(recreated):
            log.warning(
                "Kinesis stream %s was deleted and re-created since the checkpoint: failOnDataLoss=false, so "
                "the old stream's unread records are given up and the new stream is read from its start",
                key,
            )
            streams[key] = self.discovery.initial_states(key, Position.trim_horizon())
        for key in streams:
            streams[key] = lineage.prune_finished(self._discover(key, streams[key], ends))
        streams = self.stream_set.renewed(streams)  # (a table's stream disabled and enabled again)
        self.lag.update(start.batch, ends, streams)

        self.probe.seed(self.ledger.quiet_noted(start))
        candidates = self._admitted(streams, ends, start.cutoff_ms)
        # (the looks just made renew the tip of idle shards: in the offset if a batch is planned, under
        # metadataPath for a restart either way)
        recorded = max((s.tip_ms for states in streams.values() for s in states.values()), default=0)
        streams = steps.renewed(streams, self.probe.quiet)
        self.ledger.note_quiet(start, self.probe.quiet, recorded)
        candidates = self._with_ranges(candidates)
        slots = self.shape.slots(candidates, max_rows, max_bytes, start.batch + 1, self.discovery.info)
        if not slots:
            # Nothing to read now: no batch. Where batch `start.batch` ended stays in its records, and
            # every later call (or a restarted query) derives the same states from them, so a batch
            # that only carried new positions would cost a commit and, under AvailableNow, an extra
            # empty batch after the one that drained the stream.
            return start
        log.debug("Batch %d: %d shards to read", start.batch + 1, len(slots))
        streams = steps.assigned(streams, slots, self._listed_closed)
        offset = SourceOffset(
            token=start.token,
            batch=start.batch + 1,
            streams=streams,
            cutoff_ms=self.cutoff_ms,
            drain=self.drain,
            created=self._created(streams, {k: v for k, v in start.created.items() if k not in recreated}),
        )
        listed = {}
        for ref in slots:
            info = self.discovery.info(*ref)
            assert info is not None, "a shard is planned only with its range known (`_with_ranges`)"
            listed[ref] = info
        return self.ledger.mark_planned(start, offset, listed)

    def _admitted(
        self,
        streams: dict[str, dict[str, ShardState]],
        ends: dict[ShardRef, ShardEnd],
        start_cutoff: int | None,
    ) -> list[ShardRef]:
        """The shards the next batch reads, in plan order: those with something to read, and the idle
        ones a look found something in (see `tip_probe`)."""
        readable, idle = self.shape.admit(streams, ends, start_cutoff, self.cutoff_ms, self.clock())
        self.probe.forget(idle, set(readable))
        if not idle:
            return readable
        # AvailableNow looks at every idle shard once, whenever it was read last: one not looked at
        # would end the run with what arrived since unread.
        states = {ref: streams[ref[0]][ref[1]] for ref in sorted(idle)}  # (in order: the same calls each run)
        found = self.probe.news(states, self.clock(), every=self.cutoff_ms is not None)
        # A shard the listing shows closed is read to its end, whatever a look says: its end (and so its
        # children) is known only once a read meets it, and a server that never ends a closed shard (moto:
        # an empty page and a next iterator) answers every look with "nothing new" (found by the
        # simulation: the shard idled until it aged out, and the query reported a loss). It is looked at
        # all the same, for the tip a look renews (found by the simulation: a shard that closed while the
        # query was down waited for a batch's budget past its old tip's retention, and its records, all
        # still there, were called a possible loss).
        closed = {ref for ref in idle if self._listed_closed(ref)}
        idle, found = idle - closed, found - closed
        if self.cutoff_ms is not None:
            self.shape.drained_by_look(idle - found, self.cutoff_ms)
        return self.shape.after_looks(readable, idle, found, self.cutoff_ms is None)

    def _planned_before(self, start: SourceOffset) -> SourceOffset | None:
        """The offset batch `start.batch + 1` was planned with before, if it was (`Ledger.planned_before`),
        as it was: not listed again. What aged out since is said by its replay, whose reads must return
        exactly what its first attempt read, and by the first batch planned anew after the re-planned
        ones, from their reads. A listing against the plan's states called shards its first attempt read,
        and those later batches read, lost once their parents left the listing (found by the simulation:
        seeds 101,998 and 102,935, with asynchronous progress tracking and a re-plan after a day)."""
        return self.ledger.planned_before(start)

    def _discover(
        self, key: str, states: dict[str, ShardState], ends: dict[ShardRef, ShardEnd]
    ) -> dict[str, ShardState]:
        """One stream's states after discovery. A shard that closed in the last batch forces one
        listing (its children are new); the same recorded ends come back on every trigger until a batch
        is planned, so each closure is looked at once, and the interval rules the rest."""
        closures = {
            ref for ref, e in ends.items() if ref[0] == key and e.reached.is_end
        } - self._closures_seen
        if not closures:
            return self.discovery.refresh(key, states, force=False, cutoff_ms=self.cutoff_ms)
        log.info(
            "Kinesis stream %s: shards %s were read to their end (closed by a reshard); their children "
            "%s follow them",
            key,
            ", ".join(sorted(sid for _k, sid in closures)),
            ", ".join(sorted({c for ref in closures for c in ends[ref].children})) or "(none reported)",
        )
        return self._list_after(closures, ends, states)

    def _retention_ms(self, key: str) -> int | None:
        spec = self.config.stream(key)
        return None if spec is None else spec.retention_ms

    def _listed_closed(self, ref: ShardRef) -> bool:
        info = self.discovery.info(*ref)
        return info is not None and info.closed

    def _created(self, streams: dict[str, dict[str, ShardState]], known: dict[str, int]) -> dict[str, int]:
        """Each stream's creation time as the offset keeps it: what it said, else what the query start learned."""
        out = {}
        for key in streams:
            created = known.get(key, self.discovery.created(key))
            if created is not None:
                out[key] = created
        return out
