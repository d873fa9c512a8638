"""Everything planning reads from or writes to metadataPath, in one place: the query's claim, the
`planned` markers, the tasks' recorded ends, and their collection once Spark commits.

The planner (`planner`) decides each batch from values: the start offset, the recorded ends, the
listing. What it needs from the batch-end log comes through this ledger, which also keeps the memos
that make each look or write happen once per run (a token checked, a batch's marker looked up, a
batch planned here, the last batch's ends read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ...config.stream_specs import StreamSpec
from ...errors import CheckpointMismatchError
from ...model import Position, ShardRef
from ..state.batch_log import BatchEndLog, Listed, PlannedBatch, offset_digest
from ..state.offsets import ShardEnd, SourceOffset
from .recorded import read_ends

log = logging.getLogger(__name__)
# The driver notes the tips its looks renewed once they run this far past what the batch ends say, and
# then at most this often (one small write an hour while a query idles; none in its first hour, so a
# short idle spell writes nothing): a restart then knows the tip up to this much older than it was.
# That errs only on the loud side, and only after a downtime of nearly the whole retention, when the
# query could not know what aged out meanwhile anyway.
QUIET_NOTE_EVERY_MS = 3_600_000


class Ledger:
    """One query run's dealings with the batch-end log (see the module docstring)."""

    def __init__(self, batch_log: BatchEndLog, metadata_path: str) -> None:
        self.log = batch_log
        self.metadata_path = metadata_path
        self.token: str | None = None  # the query's, once known (its `live` record is renewed)
        self._checked_tokens: set[str] = set()
        self._looked_up: set[int] = set()  # batches whose `planned` marker this run has looked at
        self._planned_here: dict[int, str] = {}  # batch -> digest of its offset, planned or checked here
        # batch -> what its marker says the listing said of its shards (None: a marker written before
        # markers kept it)
        self._listed: dict[int, Listed | None] = {}
        self._ends: tuple[int, dict[ShardRef, ShardEnd]] | None = None  # the last batch's ends read
        self._logged: set[str] = set()  # queries whose first batch this run marked as logged by Spark
        self._quiet_read: set[int] = set()  # batches whose quiet note this run has read
        self._quiet_note: tuple[int, str, int] | None = None  # (batch, key, newest renewal) noted last

    # -- the query's identity ----------------------------------------------------------------------
    def begin(self, token: str, streams: list[str], specs: Iterable[StreamSpec] = ()) -> bool:
        """A new query starts with `token` (its first batch is being planned): claim metadataPath,
        record the query, remove what abandoned queries left. False when this run did so already."""
        if token in self._checked_tokens:
            return False
        self._claim(token)
        self.log.start_query(token, streams, {spec.arn: spec.place() for spec in specs if spec.arn})
        for gone in self.log.collect_abandoned(token):
            log.info(
                "metadataPath: removed the records of query %s, whose driver ended before Spark logged its "
                "first batch (its restart began this query)",
                gone,
            )
        self._checked_tokens.add(token)
        return True

    def check_query(self, offset: SourceOffset) -> None:
        """The records of the query `offset` belongs to are here, and this run holds metadataPath."""
        if offset.token not in self._checked_tokens:
            self.log.check_query(offset.token, offset.batch, sorted(offset.streams))
            self._claim(offset.token)
            self._checked_tokens.add(offset.token)

    def _claim(self, token: str) -> None:
        """This run is the query with `token`: no other query may be running on metadataPath."""
        self.log.claim(token)
        self.token = token

    def beat(self) -> None:
        """Renew the running query's `live` record (nothing before the query is known)."""
        if self.token is not None:
            self.log.beat(self.token)

    # -- planned batches ---------------------------------------------------------------------------
    def check_logged_batch(self, end: SourceOffset) -> None:
        """Before any task of a logged batch runs (Spark's `partitions`): the records under
        metadataPath must be this checkpoint's, and the batch must have been planned there as logged.
        Otherwise (a moved, cleaned or older metadataPath) a replay would read afresh and record new
        ends: rows unlike the first attempt's, and the query failing a batch later."""
        if self._planned_here.get(end.batch) == offset_digest(end.to_json()):
            self._logged_first(end)
            return  # planned (or checked) in this run
        self.check_query(end)
        marker = self.log.planned(end.token, end.batch)
        if marker is None:
            raise CheckpointMismatchError(
                f"The checkpoint's batch {end.batch} has no record under metadataPath "
                f"'{self.metadata_path}' that it was planned: the metadataPath was changed, cleaned, or "
                "is older than the checkpoint. Restore the metadataPath this query ran with, or start over "
                "with a new checkpointLocation (and metadataPath)."
            )
        if marker.digest is not None and marker.digest != offset_digest(end.to_json()):
            raise CheckpointMismatchError(
                f"The checkpoint's batch {end.batch} was planned differently under metadataPath "
                f"'{self.metadata_path}' (another query's records, or a checkpoint restored from "
                "another copy). Use this query's own checkpoint and metadataPath."
            )
        self._planned_here[end.batch] = offset_digest(end.to_json())
        self._listed[end.batch] = marker.listed
        self._logged_first(end)

    def _logged_first(self, end: SourceOffset) -> None:
        """Spark logged the query's first batch (it asks for a batch's tasks only once it logged it): a
        checkpoint names the query now (`LiveRecords.mark_logged`)."""
        if end.batch == 0 and end.token not in self._logged:
            self.log.mark_logged(end.token)
            self._logged.add(end.token)

    def planned_before(self, start: SourceOffset) -> SourceOffset | None:
        """The offset batch `start.batch + 1` was planned with before, if it was (looked up once per run:
        afterwards only this run plans it)."""
        batch = start.batch + 1
        if batch in self._looked_up:
            return None
        self._looked_up.add(batch)
        marker = self.log.planned(start.token, batch)
        if marker is None or marker.offset is None:
            return None
        self.log.check_same_start(batch, marker, start.to_json())
        log.info("Batch %d was planned before (a restart re-plans it): its offset is used again", batch)
        self._known(batch, marker)
        return SourceOffset.from_json(marker.offset)

    def mark_planned(self, start: SourceOffset, offset: SourceOffset, listed: Listed) -> SourceOffset:
        """Record `offset` as batch `start.batch + 1`'s plan before Spark sees it, with what the listing
        said of its shards; the offset that stands (another attempt's, when this one lost the race to
        record) is returned."""
        planned = offset.to_json()
        stands = self.log.mark_planned(start.token, offset.batch, planned, start.to_json(), listed)
        if stands is planned:
            self._planned_here[offset.batch] = offset_digest(stands)
            self._listed[offset.batch] = listed
            return offset
        marker = self.log.planned(start.token, offset.batch)
        assert marker is not None, "a marker that refused to be overwritten is there"
        self._known(offset.batch, marker)
        return SourceOffset.from_json(stands)

    def _known(self, batch: int, marker: PlannedBatch) -> None:
        """Batch `batch` is as its marker says: its offset and what the listing said of its shards."""
        if marker.offset is not None:
            self._planned_here[batch] = offset_digest(marker.offset)
        self._listed[batch] = marker.listed

    def listed(self, batch: int) -> Listed | None:
        """What the listing said of batch `batch`'s shards when it was planned, once this run planned or
        checked it (None: not known here, or a marker written before markers kept it)."""
        return self._listed.get(batch)

    # -- what batches did --------------------------------------------------------------------------
    def ends_read(self, offset: SourceOffset) -> dict[ShardRef, ShardEnd] | None:
        """Batch `offset.batch`'s ends, when this run read them already (`read_ends`)."""
        if self._ends is not None and self._ends[0] == offset.batch:
            return self._ends[1]
        return None

    def read_ends(
        self, offset: SourceOffset, readable: Callable[[ShardRef], bool]
    ) -> tuple[dict[ShardRef, ShardEnd], list[ShardRef]]:
        """Where each shard of batch `offset.batch` stopped, and the shards whose task never ran, from
        the tasks' records (see `recorded`)."""
        ends, unrun = read_ends(self.log, offset, readable)
        self._ends = (offset.batch, ends)
        return ends, unrun

    # -- the tip renewed while no batch runs (`tip_probe`) -------------------------------------------
    def quiet_noted(self, offset: SourceOffset) -> dict[ShardRef, tuple[Position, int]]:
        """What the driver's looks found after batch `offset.batch`, as the last note says (read once per
        run and batch: afterwards this run's own looks know more)."""
        if offset.batch < 0 or offset.batch in self._quiet_read:
            return {}
        self._quiet_read.add(offset.batch)
        noted = self.log.quiet_noted(offset.token, offset.batch)
        if noted is None:
            return {}
        key, renewals = noted
        # (this run's next note replaces that one: a run after run of a scheduled job leaves one note)
        self._quiet_note = (offset.batch, key, max((at for _p, at in renewals.values()), default=0))
        return renewals

    def note_quiet(
        self, start: SourceOffset, quiet: dict[ShardRef, tuple[Position, int]], recorded_ms: int
    ) -> None:
        """Note the looks' renewals of the tip after batch `start.batch` for a restart, when the newest
        one is `QUIET_NOTE_EVERY_MS` newer than the last note (or, for the first, than `recorded_ms`, the
        newest tip the batch ends say); the note it replaces goes."""
        if start.batch < 0 or not quiet:
            return
        newest = max(at for _position, at in quiet.values())
        last = self._quiet_note
        since = last[2] if last is not None and last[0] == start.batch else recorded_ms
        if newest - since < QUIET_NOTE_EVERY_MS:
            return
        key = self.log.note_quiet(start.token, start.batch, newest, quiet)
        if last is not None and last[1] != key:
            self.log.delete(last[1])
        self._quiet_note = (start.batch, key, newest)

    def committed(self, end: SourceOffset) -> None:
        """Spark committed the batch that ended at `end`: no restart replays a batch before it, nor
        plans from one. Batch `end.batch`'s own records stay: Spark commits a source's offset also
        when it logs a batch in which that source did not move (a stateful query's no-data batch,
        a batch only another source of the query has data for), and the next planning from that
        same offset needs them. They go when a later offset is committed."""
        if end.batch >= 0:
            self.log.collect(end.token, end.batch)
