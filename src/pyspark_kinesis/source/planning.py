"""Driver-side planning: the initial offset, each next offset, and the tasks of a batch.

The driver never calls GetRecords. It learns where batch k stopped from the tasks' records under
metadataPath, turns those ends into the start positions of batch k+1, applies the lineage rule and
Spark's read limit, and decides which task reads which shard. Everything it decides goes into the
offset, so a restarted driver replans a logged batch identically from the checkpoint alone.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import orjson

from .. import assign
from ..aws.kinesis import KinesisProxy
from ..config.stream_specs import StreamSpec
from ..errors import CheckpointMismatchError, StreamAccessError
from ..model import LATEST, Position, ShardInfo, ShardRef
from . import lineage
from .offsets import NO_TASK, ShardEnd, ShardState, SourceOffset, TaskEnd
from .options import SourceConfig
from .store import BatchEndStore

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


def batch_folder(token: str, batch: int) -> str:
    return f"{token}/batch-{batch:012d}"


def task_key(token: str, batch: int, task: int) -> str:
    return f"{batch_folder(token, batch)}/task-{task:05d}.json"


def source_key(token: str) -> str:
    return f"{token}/source.json"


def now_ms() -> int:
    return int(time.time() * 1000)


def split_budget(total: int, shard_ids: list[K], rotate: int) -> dict[K, int]:
    """Share a batch-wide limit between shards: equal parts, the remainder to a rotating few, so that a
    limit smaller than the shard count still lets every shard progress over successive batches."""
    count = len(shard_ids)
    base, extra = divmod(total, count)
    out = {}
    for index, sid in enumerate(shard_ids):
        out[sid] = base + (1 if (index - rotate) % count < extra else 0)
    return out


@dataclass
class _Stream:
    """The planner's caches for one stream: its AWS proxy, when it was last listed, what was listed."""

    spec: StreamSpec
    proxy: KinesisProxy
    last_discovery_ms: int = 0
    infos: dict[str, ShardInfo] = field(default_factory=dict)  # latest ListShards view, for hash ranges


class Planner:
    """Plans batches for one query run. Holds only caches; the truth is the offset and the store."""

    def __init__(
        self,
        config: SourceConfig,
        store: BatchEndStore,
        proxy_factory: Callable[[StreamSpec], KinesisProxy],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.store = store
        self._proxy_factory = proxy_factory
        self._streams: dict[str, _Stream] = {}
        self._configured = [spec.key for spec in config.streams]  # the streams the options name, in order
        self.clock = clock
        self.cutoff_ms: int | None = None  # set by Trigger.AvailableNow
        self._ends_cache: tuple[int, dict[ShardRef, ShardEnd]] | None = None
        self._checked_tokens: set[str] = set()
        self._collected_below = 0
        self._done: set[ShardRef] = set()
        self._initial: SourceOffset | None = None
        self._load: dict[ShardRef, float] = {}  # recent bytes per batch per shard (moving average)

    def _stream(self, key: str) -> _Stream:
        if key not in self._streams:
            spec = self.config.stream(key)
            assert spec is not None, f"stream {key} is not in the options"
            self._streams[key] = _Stream(spec, self._proxy_factory(spec))
        return self._streams[key]

    # -- start of a new query, or of a stream added to it ----------------------------------------
    def initial_offset(self) -> SourceOffset:
        """Computed once per run: Spark may ask more than once, and every answer must be the same."""
        if self._initial is None:
            self._initial = self._new_initial_offset()
        return self._initial

    def _new_initial_offset(self) -> SourceOffset:
        streams = {spec.key: self._initial_states(spec.key) for spec in self.config.streams}
        token = uuid.uuid4().hex
        meta = {"token": token, "streams": sorted(streams)}
        self.store.put_if_absent(source_key(token), orjson.dumps(meta))
        self._checked_tokens.add(token)
        return SourceOffset(token=token, batch=-1, streams=streams)

    def _initial_states(self, key: str) -> dict[str, ShardState]:
        stream = self._stream(key)
        start = stream.spec.starting_position
        listed = stream.proxy.list_shards(open_only=start.kind == LATEST)
        stream.last_discovery_ms = self.clock()
        stream.infos = {s.shard_id: s for s in listed}
        if start.kind == LATEST:
            # "From the moment the query first started": pinned as a timestamp in the first offset, so
            # records put between now and the first batch are read, and a restart does not move it.
            start = Position.at_timestamp(self.clock())
            listed = lineage.open_only(listed)
        return lineage.initial_states(listed, start)

    # -- checks that the checkpoint and the records belong together ------------------------------
    def check_offset(self, offset: SourceOffset) -> None:
        configured = set(self._configured)
        if offset.streams and not configured & set(offset.streams):
            raise CheckpointMismatchError(
                f"The checkpoint was written for Kinesis stream(s) {', '.join(sorted(offset.streams))}, but "
                f"the options name {', '.join(sorted(configured))}: none of them. Use a new checkpointLocation "
                "(and metadataPath) for other streams; to add or remove streams, keep at least one."
            )
        if offset.token in self._checked_tokens:
            return
        raw = self.store.get(source_key(offset.token))
        if raw is None:
            raise CheckpointMismatchError(
                f"metadataPath '{self.config.metadata_path}' holds no records for this checkpoint "
                f"(query token {offset.token}). Restart with the metadataPath the query was first started "
                "with, or start over with a new checkpointLocation."
            )
        meta = orjson.loads(raw)
        if meta.get("token") != offset.token:
            raise CheckpointMismatchError(
                f"The records under metadataPath '{self.config.metadata_path}' belong to another query "
                f"(token {meta.get('token')}, not {offset.token}). Use the metadataPath of this query."
            )
        self._checked_tokens.add(offset.token)

    # -- reading what the last batch did ---------------------------------------------------------
    def recorded_ends(self, offset: SourceOffset) -> dict[ShardRef, ShardEnd]:
        """Where each shard of batch `offset.batch` stopped, from the tasks' records."""
        if offset.batch < 0:
            return {}
        if self._ends_cache is not None and self._ends_cache[0] == offset.batch:
            return self._ends_cache[1]
        ends: dict[ShardRef, ShardEnd] = {}
        for task, all_refs in offset.tasks().items():
            # Shards of streams removed from the options were not read when the batch ran after the
            # restart (see KinesisStreamReader.partitions): they have no end to find.
            refs = [ref for ref in all_refs if ref[0] in self._configured]
            if not refs:
                continue
            raw = self.store.get(task_key(offset.token, offset.batch, task))
            if raw is None:
                raise CheckpointMismatchError(
                    f"The batch-end record of batch {offset.batch}, task {task} is missing under metadataPath "
                    f"'{self.config.metadata_path}', although the checkpoint says that batch ran. The "
                    "metadataPath was changed or cleaned; restore it, or start over with a new checkpointLocation."
                )
            record = TaskEnd.from_json(orjson.loads(raw))
            for ref in refs:
                end = record.shards.get(ref)
                if end is None or end.start != offset.state(ref).position:
                    raise CheckpointMismatchError(
                        f"The batch-end record of batch {offset.batch}, task {task} does not match the "
                        f"checkpoint for shard {ref[1]} of {ref[0]}. metadataPath must belong to this "
                        "checkpoint only."
                    )
                ends[ref] = end
        self._ends_cache = (offset.batch, ends)
        for ref, end in ends.items():
            previous = self._load.get(ref)
            self._load[ref] = end.bytes if previous is None else 0.5 * previous + 0.5 * end.bytes
        self._collect_garbage(offset)
        return ends

    def _collect_garbage(self, offset: SourceOffset) -> None:
        """Batches before `offset.batch` can never be replayed nor re-planned once batch `offset.batch`
        ran (its start positions are in the checkpoint), so their records go."""
        if offset.batch <= self._collected_below:
            return
        for name in self.store.list_folders(offset.token):
            if name.startswith("batch-") and int(name[6:]) < offset.batch:
                self.store.delete_folder(f"{offset.token}/{name}")
        self._collected_below = offset.batch

    # -- the next offset -------------------------------------------------------------------------
    def advance(
        self, offset: SourceOffset, ends: dict[ShardRef, ShardEnd]
    ) -> dict[str, dict[str, ShardState]]:
        """Shard states after batch `offset.batch`: new positions, idle flags, poll times."""
        streams: dict[str, dict[str, ShardState]] = {}
        for key, shards in offset.streams.items():
            states = streams[key] = {}
            for sid, state in shards.items():
                end = ends.get((key, sid))
                base = replace(state, task=NO_TASK, max_records=-1, max_bytes=-1)
                if end is None:
                    states[sid] = base
                else:
                    idle = end.records == 0 and end.at_tip
                    states[sid] = replace(base, position=end.end, idle=idle, polled_ms=max(end.read_at_ms, 1))
        return streams

    def _follow_options(self, streams: dict[str, dict[str, ShardState]]) -> dict[str, dict[str, ShardState]]:
        """Streams added to the options since the checkpoint start at their starting position; streams
        removed from them leave the offset (and are not read again)."""
        out = {key: states for key, states in streams.items() if key in self._configured}
        for key in sorted(set(streams) - set(self._configured)):
            log.warning(
                "Kinesis stream %s is no longer in the options: dropped from the query's offsets", key
            )
        for key in self._configured:
            if key not in out:
                out[key] = self._initial_states(key)
                log.info("Kinesis stream %s was added to the options: read from its starting position", key)
        return out

    def _discover(self, key: str, states: dict[str, ShardState], force: bool) -> dict[str, ShardState]:
        """A full listing (not filtered): it must also show which known shards expired. One stream's
        failing listing (throttled, region down) is logged and retried at the next interval; the other
        streams go on."""
        stream = self._stream(key)
        due = self.clock() - stream.last_discovery_ms >= self.config.shard_discovery_interval_ms
        # AvailableNow: a listing from before the cutoff could show a shard closed just before it as
        # open, and a read at its tip would then count it done with its children unread.
        due = due or (self.cutoff_ms is not None and stream.last_discovery_ms < self.cutoff_ms)
        if not (force or due):
            return states
        stream.last_discovery_ms = self.clock()
        try:
            listed: list[ShardInfo] = stream.proxy.list_shards()
        except StreamAccessError as exc:
            log.warning("Kinesis stream %s: shard discovery failed, retried later: %s", key, exc)
            return states
        stream.infos = {s.shard_id: s for s in listed}
        merged = lineage.merge_discovered(states, listed)
        added = sorted(set(merged) - set(states))
        if added:
            log.info("Kinesis stream %s: new shards %s", key, ", ".join(added))
        merged, expired = lineage.mark_expired(merged, listed)
        if expired:
            log.warning(
                "Kinesis stream %s: shards %s are past retention before being read to their end; their "
                "unread records are lost and their children start now",
                key,
                ", ".join(expired),
            )
        return merged

    def next_offset(self, start: SourceOffset, max_rows: int | None, max_bytes: int | None) -> SourceOffset:
        """The offset of the next batch, or `start` itself when there is nothing to read now."""
        self.check_offset(start)
        ends = self.recorded_ends(start)
        streams = self._follow_options(self.advance(start, ends))
        for key in streams:
            closed_seen = any(e.end.is_end for (k, _sid), e in ends.items() if k == key)
            streams[key] = lineage.prune_finished(self._discover(key, streams[key], force=closed_seen))

        now = self.clock()
        drained = self._drained_now(start, ends)
        candidates: list[ShardRef] = [
            (key, sid)
            for key in sorted(streams)
            for sid in lineage.readable(streams[key])
            if (key, sid) not in drained
            # AvailableNow reads on until every shard is drained: returning `start` would end the run.
            and not (
                self.cutoff_ms is None
                and streams[key][sid].idle
                and now - streams[key][sid].polled_ms < self.config.idle_poll_interval_ms
            )
        ]
        budgets_rows = split_budget(max_rows, candidates, start.batch + 1) if max_rows and candidates else {}
        budgets_bytes = (
            split_budget(max_bytes, candidates, start.batch + 1) if max_bytes and candidates else {}
        )
        to_read = [
            ref for ref in candidates if budgets_rows.get(ref, 1) > 0 and budgets_bytes.get(ref, 1) > 0
        ]

        if not to_read:
            # Nothing to read now: no batch. Where batch `start.batch` ended stays in its records, and
            # every later call (or a restarted query) derives the same states from them, so a batch
            # that only carried new positions would cost a commit and, under AvailableNow, an extra
            # empty batch after the one that drained the stream.
            return start
        for ref, task in self._assign(to_read).items():
            key, sid = ref
            info = self._stream(key).infos.get(sid)
            streams[key][sid] = replace(
                streams[key][sid],
                task=task,
                max_records=budgets_rows.get(ref, -1),
                max_bytes=budgets_bytes.get(ref, -1),
                closed=streams[key][sid].closed or (info is not None and info.closed),
            )
        return SourceOffset(
            token=start.token, batch=start.batch + 1, streams=streams, cutoff_ms=self.cutoff_ms
        )

    def _assign(self, refs: list[ShardRef]) -> dict[ShardRef, int]:
        """Group the shards of a batch onto tasks with the configured assigner (see `assign`). Shards of
        all streams share the tasks; the assigner sees them under ids unique across streams."""
        config = self.config
        count = assign.task_count(len(refs), config.target_tasks, config.max_shards_per_task)
        if count == len(refs) and config.shard_assigner == "balanced":
            return {ref: index for index, ref in enumerate(sorted(refs))}  # one per shard
        index_of = {key: n for n, key in enumerate(sorted({key for key, _sid in refs}))}

        def uid(key: str, sid: str) -> str:
            return sid if len(index_of) == 1 else f"{index_of[key]}/{sid}"

        by_uid: dict[str, ShardRef] = {}
        shards = []
        for key, sid in sorted(refs):
            info = self._stream(key).infos.get(sid)
            shard = info.to_api() if info is not None else {"ShardId": sid}
            for parent in ("ParentShardId", "AdjacentParentShardId"):
                if shard.get(parent):
                    shard[parent] = uid(key, shard[parent])
            shard["ShardId"] = uid(key, sid)
            by_uid[shard["ShardId"]] = (key, sid)
            shards.append(shard)
        load = {uid(*ref): self._load[ref] for ref in refs if ref in self._load}
        groups = [g for g in assign.assign(shards, count, config.shard_assigner, load or None) if g]
        return {by_uid[u]: index for index, group in enumerate(groups) for u in group}

    def _drained_now(self, start: SourceOffset, ends: dict[ShardRef, ShardEnd]) -> set[ShardRef]:
        """AvailableNow: shards with nothing more to read before the cutoff stay done for this run.
        Ends read under another cutoff (an earlier run) say nothing about this one."""
        if self.cutoff_ms is None:
            return set()
        if start.cutoff_ms != self.cutoff_ms:
            self._done = set()
            return self._done
        # At the tip means nothing was left when the response was made, which was after the cutoff
        # (the run's shard list is from after it too, see `_discover`): no record put before it is left.
        self._done |= {ref for ref, e in ends.items() if e.reached_cutoff or e.at_tip}
        return self._done
