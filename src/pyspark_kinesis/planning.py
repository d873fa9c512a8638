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
from collections.abc import Callable
from dataclasses import replace

import orjson

from . import assign, lineage
from .aws.kinesis import KinesisProxy, ShardInfo
from .errors import CheckpointMismatchError
from .offsets import NO_TASK, ShardEnd, ShardState, SourceOffset, TaskEnd
from .options import SourceConfig
from .positions import LATEST, Position
from .store import BatchEndStore

log = logging.getLogger(__name__)


def batch_folder(token: str, batch: int) -> str:
    return f"{token}/batch-{batch:012d}"


def task_key(token: str, batch: int, task: int) -> str:
    return f"{batch_folder(token, batch)}/task-{task:05d}.json"


def source_key(token: str) -> str:
    return f"{token}/source.json"


def now_ms() -> int:
    return int(time.time() * 1000)


def split_budget(total: int, shard_ids: list[str], rotate: int) -> dict[str, int]:
    """Share a batch-wide limit between shards: equal parts, the remainder to a rotating few, so that a
    limit smaller than the shard count still lets every shard progress over successive batches."""
    count = len(shard_ids)
    base, extra = divmod(total, count)
    out = {}
    for index, sid in enumerate(shard_ids):
        out[sid] = base + (1 if (index - rotate) % count < extra else 0)
    return out


class Planner:
    """Plans batches for one query run. Holds only caches; the truth is the offset and the store."""

    def __init__(
        self,
        config: SourceConfig,
        store: BatchEndStore,
        proxy_factory: Callable[[], KinesisProxy],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.store = store
        self._proxy_factory = proxy_factory
        self._proxy: KinesisProxy | None = None
        self.clock = clock
        self.cutoff_ms: int | None = None  # set by Trigger.AvailableNow
        self._last_discovery_ms = 0
        self._ends_cache: tuple[int, dict[str, ShardEnd]] | None = None
        self._checked_tokens: set[str] = set()
        self._collected_below = 0
        self._done: set[str] = set()
        self._initial: SourceOffset | None = None
        self._infos: dict[str, ShardInfo] = {}  # latest ListShards view, for hash ranges
        self._load: dict[str, float] = {}  # recent bytes per batch per shard (moving average)

    @property
    def proxy(self) -> KinesisProxy:
        if self._proxy is None:
            self._proxy = self._proxy_factory()
        return self._proxy

    # -- start of a new query -------------------------------------------------------------------
    def initial_offset(self) -> SourceOffset:
        """Computed once per run: Spark may ask more than once, and every answer must be the same."""
        if self._initial is None:
            self._initial = self._new_initial_offset()
        return self._initial

    def _new_initial_offset(self) -> SourceOffset:
        start = self.config.starting_position
        listed = self.proxy.list_shards(open_only=start.kind == LATEST)
        self._last_discovery_ms = self.clock()
        self._infos = {s.shard_id: s for s in listed}
        if start.kind == LATEST:
            # "From the moment the query first started": pinned as a timestamp in the first offset, so
            # records put between now and the first batch are read, and a restart does not move it.
            start = Position.at_timestamp(self.clock())
            listed = lineage.open_only(listed)
        states = lineage.initial_states(listed, start)
        token = uuid.uuid4().hex
        meta = {"token": token, "stream": self.config.stream_name, "region": self.config.aws.region}
        self.store.put_if_absent(source_key(token), orjson.dumps(meta))
        self._checked_tokens.add(token)
        return SourceOffset(token=token, batch=-1, stream=self.config.stream_name, shards=states)

    # -- checks that the checkpoint and the records belong together ------------------------------
    def check_offset(self, offset: SourceOffset) -> None:
        if offset.stream != self.config.stream_name:
            raise CheckpointMismatchError(
                f"The checkpoint was written for Kinesis stream '{offset.stream}', but option streamName is "
                f"'{self.config.stream_name}'. Use a new checkpointLocation (and metadataPath) for another stream."
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
        if meta.get("stream") != offset.stream:
            raise CheckpointMismatchError(
                f"The records under metadataPath '{self.config.metadata_path}' belong to stream "
                f"'{meta.get('stream')}', not '{offset.stream}'. Use the metadataPath of this query."
            )
        self._checked_tokens.add(offset.token)

    # -- reading what the last batch did ---------------------------------------------------------
    def recorded_ends(self, offset: SourceOffset) -> dict[str, ShardEnd]:
        """Where each shard of batch `offset.batch` stopped, from the tasks' records."""
        if offset.batch < 0:
            return {}
        if self._ends_cache is not None and self._ends_cache[0] == offset.batch:
            return self._ends_cache[1]
        ends: dict[str, ShardEnd] = {}
        for task, shard_ids in offset.tasks().items():
            raw = self.store.get(task_key(offset.token, offset.batch, task))
            if raw is None:
                raise CheckpointMismatchError(
                    f"The batch-end record of batch {offset.batch}, task {task} is missing under metadataPath "
                    f"'{self.config.metadata_path}', although the checkpoint says that batch ran. The "
                    "metadataPath was changed or cleaned; restore it, or start over with a new checkpointLocation."
                )
            record = TaskEnd.from_json(orjson.loads(raw))
            for sid in shard_ids:
                end = record.shards.get(sid)
                if end is None or end.start != offset.shards[sid].position:
                    raise CheckpointMismatchError(
                        f"The batch-end record of batch {offset.batch}, task {task} does not match the "
                        f"checkpoint for shard {sid}. metadataPath must belong to this checkpoint only."
                    )
                ends[sid] = end
        self._ends_cache = (offset.batch, ends)
        for sid, end in ends.items():
            previous = self._load.get(sid)
            self._load[sid] = end.bytes if previous is None else 0.5 * previous + 0.5 * end.bytes
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
    def advance(self, offset: SourceOffset, ends: dict[str, ShardEnd]) -> dict[str, ShardState]:
        """Shard states after batch `offset.batch`: new positions, idle flags, poll times."""
        states: dict[str, ShardState] = {}
        for sid, state in offset.shards.items():
            end = ends.get(sid)
            base = replace(state, task=NO_TASK, max_records=-1, max_bytes=-1)
            if end is None:
                states[sid] = base
            else:
                idle = end.records == 0 and end.at_tip
                states[sid] = replace(base, position=end.end, idle=idle, polled_ms=max(end.read_at_ms, 1))
        return states

    def _discover(self, states: dict[str, ShardState], force: bool) -> dict[str, ShardState]:
        """A full listing (not filtered): it must also show which known shards expired."""
        due = self.clock() - self._last_discovery_ms >= self.config.shard_discovery_interval_ms
        if not (force or due):
            return states
        listed: list[ShardInfo] = self.proxy.list_shards()
        self._last_discovery_ms = self.clock()
        self._infos = {s.shard_id: s for s in listed}
        merged = lineage.merge_discovered(states, listed)
        added = sorted(set(merged) - set(states))
        if added:
            log.info("Kinesis stream %s: new shards %s", self.config.stream_name, ", ".join(added))
        merged, expired = lineage.mark_expired(merged, listed)
        if expired:
            log.warning(
                "Kinesis stream %s: shards %s are past retention before being read to their end; their "
                "unread records are lost and their children start now",
                self.config.stream_name,
                ", ".join(expired),
            )
        return merged

    def next_offset(self, start: SourceOffset, max_rows: int | None, max_bytes: int | None) -> SourceOffset:
        """The offset of the next batch, or `start` itself when there is nothing to read now."""
        self.check_offset(start)
        ends = self.recorded_ends(start)
        states = self.advance(start, ends)
        closed_seen = any(e.end.is_end for e in ends.values())
        states = self._discover(states, force=closed_seen)
        states = lineage.prune_finished(states)

        now = self.clock()
        drained = self._drained_now(start, ends)
        candidates = [
            sid
            for sid in lineage.readable(states)
            if sid not in drained
            # AvailableNow reads on until every shard is drained: returning `start` would end the run.
            and not (
                self.cutoff_ms is None
                and states[sid].idle
                and now - states[sid].polled_ms < self.config.idle_poll_interval_ms
            )
        ]
        budgets_rows = split_budget(max_rows, candidates, start.batch + 1) if max_rows and candidates else {}
        budgets_bytes = (
            split_budget(max_bytes, candidates, start.batch + 1) if max_bytes and candidates else {}
        )
        to_read = [
            sid for sid in candidates if budgets_rows.get(sid, 1) > 0 and budgets_bytes.get(sid, 1) > 0
        ]

        unchanged = {s: v.position for s, v in states.items()} == {
            s: v.position for s, v in start.shards.items()
        }
        if not to_read and unchanged:
            return start
        tasks = self._assign(to_read)
        for sid, task in tasks.items():
            states[sid] = replace(
                states[sid],
                task=task,
                max_records=budgets_rows.get(sid, -1),
                max_bytes=budgets_bytes.get(sid, -1),
            )
        return SourceOffset(
            token=start.token,
            batch=start.batch + 1,
            stream=start.stream,
            shards=states,
            cutoff_ms=self.cutoff_ms,
        )

    def _assign(self, shard_ids: list[str]) -> dict[str, int]:
        """Group the shards of a batch onto tasks with the configured assigner (see `assign`)."""
        config = self.config
        count = assign.task_count(len(shard_ids), config.target_tasks, config.max_shards_per_task)
        if count == len(shard_ids) and config.shard_assigner == "balanced":
            return {sid: index for index, sid in enumerate(sorted(shard_ids))}  # one per shard
        shards = [
            self._infos[sid].to_api() if sid in self._infos else {"ShardId": sid} for sid in sorted(shard_ids)
        ]
        load = {sid: self._load[sid] for sid in shard_ids if sid in self._load}
        groups = [g for g in assign.assign(shards, count, config.shard_assigner, load or None) if g]
        return {sid: index for index, group in enumerate(groups) for sid in group}

    def _drained_now(self, start: SourceOffset, ends: dict[str, ShardEnd]) -> set[str]:
        """AvailableNow: shards with nothing more to read before the cutoff stay done for this run.
        Ends read under another cutoff (an earlier run) say nothing about this one."""
        if self.cutoff_ms is None:
            return set()
        if start.cutoff_ms != self.cutoff_ms:
            self._done = set()
            return self._done
        self._done |= {sid for sid, e in ends.items() if e.reached_cutoff or (e.at_tip and e.records == 0)}
        return self._done
