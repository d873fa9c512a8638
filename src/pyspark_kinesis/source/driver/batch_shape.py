"""The shape of the next batch: which readable shards it reads, within which budgets, on which task.

The planner (`planner`) decides where each shard stands (recorded ends, discovery, the lineage rule);
this module decides what the batch does with the shards that may be read, as Spark's Kafka source
parts its stream from its range calculator:

- admission: shards an AvailableNow run has drained stay out; idle shards are told apart, for the
  planner to look at them first (`tip_probe`);
- budgets: Spark's read limit split over the admitted shards (`split_budget`); a shard whose share is
  zero waits for a later batch;
- assignment: the configured assigner groups the shards onto tasks, weighted by each shard's recent
  bytes per batch (`load`), and tasks holding shards whose task did not run last time come first
  (`starved`), so that a foreachBatch that runs only the first task still moves every shard on. Unless
  the options set the task count, shards that were light in recent batches share tasks
  (`light_task_count`): a task costs Spark and its Python worker about as much as reading a few
  hundred kilobytes, and more tasks than cores run in waves, so a quiet stream's batches would take
  several times longer than their reads.

It keeps only what it learned from earlier batches (load, starvation, drained shards), all of which a
restarted driver may forget: the offset it helps build holds every decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ... import assign
from ...model import ShardInfo, ShardRef
from ..options import SourceConfig
from ..state.offsets import ShardEnd, ShardState
from . import lineage

K = TypeVar("K", bound=Hashable)

# Unless the options set the task count: a task carries shards of at most this many recent bytes per
# batch together, and at most LIGHT_SHARDS_PER_TASK of them (the shards a task reads at once, the
# executor's `protocol.MAX_THREADS`: more would read in waves, each with a share of maxFetchTimeMs).
LIGHT_TASK_BYTES = 1 << 20
LIGHT_SHARDS_PER_TASK = 16
# Spark ends an executor's idle Python workers after a minute. The first batch after a quiet spell
# longer than that (a running query, not AvailableNow) reads each shard that found news and, up to
# WAKE_TASKS in all, idle ones too, each on a task of its own: the executors start their new workers
# side by side in that batch, instead of one executor per batch as the next batches' tasks land
# (docs/performance.md, `bench-latency-modes-quiet`). Not where the options set the task count.
WORKERS_IDLE_MS = 60_000
WAKE_TASKS = 16


def light_task_count(loads: list[float | None]) -> int:
    """The tasks a batch of shards with these recent bytes per batch needs (None: not known yet, a
    task of its own): a task per LIGHT_TASK_BYTES of the known ones, at least one per
    LIGHT_SHARDS_PER_TASK of them, never more than one per shard."""
    known = [load for load in loads if load is not None]
    grouped = max(math.ceil(sum(known) / LIGHT_TASK_BYTES), math.ceil(len(known) / LIGHT_SHARDS_PER_TASK))
    return min(len(loads), max(1, grouped + len(loads) - len(known)))


def split_budget(total: int, shard_ids: list[K], rotate: int) -> dict[K, int]:
    """Share a batch-wide limit between shards: equal parts, the remainder to a rotating few, so that a
    limit smaller than the shard count still lets every shard progress over successive batches."""
    count = len(shard_ids)
    base, extra = divmod(total, count)
    out = {}
    for index, sid in enumerate(shard_ids):
        out[sid] = base + (1 if (index - rotate) % count < extra else 0)
    return out


@dataclass(frozen=True)
class ShardAssignment:
    """What the next batch does with one shard: its task and its budgets (-1: only the per-shard cap)."""

    task: int
    max_records: int = -1
    max_bytes: int = -1


class BatchShape:
    """Admission, budgets and assignment of successive batches of one query run."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.load: dict[ShardRef, float] = {}  # recent bytes per batch per shard (moving average)
        self.starved: dict[ShardRef, int] = {}  # batches in a row whose task for the shard never ran
        self._done: set[ShardRef] = set()  # AvailableNow: shards drained under `_done_cutoff`
        self._done_cutoff: int | None = None
        self.planned_ms: int | None = None  # when this run last planned a batch (its planner's clock)
        self.waking = False  # the batch being planned is the first after a quiet spell (`after_looks`)
        self._now = 0  # the planner's clock at `admit`, the start of each planning

    # -- what the last batch taught ---------------------------------------------------------------
    def observe(self, ends: Mapping[ShardRef, ShardEnd], unrun: list[ShardRef]) -> None:
        """Take one batch's recorded ends (shards read) and its shards whose task never ran."""
        for ref in unrun:
            self.starved[ref] = self.starved.get(ref, 0) + 1
        for ref, end in ends.items():
            self.starved.pop(ref, None)
            previous = self.load.get(ref)
            self.load[ref] = end.bytes if previous is None else 0.5 * previous + 0.5 * end.bytes

    # -- the next batch ----------------------------------------------------------------------------
    def admit(
        self,
        streams: Mapping[str, Mapping[str, ShardState]],
        ends: Mapping[ShardRef, ShardEnd],
        start_cutoff: int | None,
        cutoff_ms: int | None,
        now: int,
    ) -> tuple[list[ShardRef], set[ShardRef]]:
        """The shards the next batch may read, in plan order (readable by the lineage rule, not drained
        under this AvailableNow run), and those of them that are idle (their last read found nothing
        new; under AvailableNow also those whose last read ended at the tip, records or not): the
        planner reads those only where a look finds something (`tip_probe`)."""
        self._now, self.waking = now, False
        drained = self._drained(ends, start_cutoff, cutoff_ms)
        readable = [
            ShardRef(key, sid)
            for key in sorted(streams)
            for sid in lineage.readable(streams[key])
            if (key, sid) not in drained
        ]
        at_tip = cutoff_ms is not None  # (a run's first look replaces a read that would find nothing)
        return readable, {
            ref
            for ref in readable
            if streams[ref.stream][ref.shard].idle or (at_tip and streams[ref.stream][ref.shard].tip_ms > 0)
        }

    def after_looks(
        self, readable: list[ShardRef], idle: set[ShardRef], found: set[ShardRef], running: bool
    ) -> list[ShardRef]:
        """The shards the next batch reads once the looks at idle ones are made: those not idle and those
        a look found news in; after a quiet spell (see WORKERS_IDLE_MS), idle ones too, up to WAKE_TASKS."""
        admitted = [ref for ref in readable if ref not in idle or ref in found]
        quiet = self.planned_ms is not None and self._now - self.planned_ms > WORKERS_IDLE_MS
        chosen = self.config.target_tasks is not None or self.config.max_shards_per_task is not None
        self.waking = running and quiet and bool(found) and not chosen  # (the user's count: no waking)
        if not self.waking:
            return admitted
        quiet_ones = [ref for ref in readable if ref in idle and ref not in found]
        extra = set(quiet_ones[: max(0, WAKE_TASKS - len(admitted))])
        return [ref for ref in readable if ref in extra or ref not in idle or ref in found]

    def drained_by_look(self, refs: set[ShardRef], cutoff_ms: int) -> None:
        """AvailableNow: idle shards a look found nothing in are done for the run with this cutoff (the
        look was answered after the cutoff, so nothing put before it is left)."""
        if self._done_cutoff != cutoff_ms:
            self._done, self._done_cutoff = set(), cutoff_ms
        self._done |= refs

    def _drained(
        self, ends: Mapping[ShardRef, ShardEnd], start_cutoff: int | None, cutoff_ms: int | None
    ) -> set[ShardRef]:
        """AvailableNow: shards with nothing more to read before the cutoff stay done for this run.
        Ends read under another cutoff (an earlier run) say nothing about this one. At the tip means
        nothing was left when the response was made, which was after the cutoff (the run's shard list
        is from after it too, see `ShardDiscovery.refresh`): no record put before it is left."""
        if cutoff_ms is None:
            return set()
        if start_cutoff != cutoff_ms or self._done_cutoff != cutoff_ms:
            self._done, self._done_cutoff = set(), cutoff_ms
        if start_cutoff == cutoff_ms:
            self._done |= {ref for ref, e in ends.items() if e.reached_cutoff or e.at_tip}
        return self._done

    def slots(
        self,
        candidates: list[ShardRef],
        max_rows: int | None,
        max_bytes: int | None,
        batch: int,
        info: Callable[[str, str], ShardInfo | None],
    ) -> dict[ShardRef, ShardAssignment]:
        """Budgets and tasks of the admitted shards; shards whose budget share is zero wait."""
        rows = split_budget(max_rows, candidates, batch) if max_rows and candidates else {}
        size = split_budget(max_bytes, candidates, batch) if max_bytes and candidates else {}
        to_read = [ref for ref in candidates if rows.get(ref, 1) > 0 and size.get(ref, 1) > 0]
        if to_read:
            self.planned_ms = self._now
        return {
            ref: ShardAssignment(task, rows.get(ref, -1), size.get(ref, -1))
            for ref, task in self.assign(to_read, info).items()
        }

    def assign(
        self, refs: list[ShardRef], info: Callable[[str, str], ShardInfo | None]
    ) -> dict[ShardRef, int]:
        """Group the shards of a batch onto tasks with the configured assigner (see `assign`). Shards of
        all streams share the tasks; the assigner sees them under ids unique across streams."""
        if not refs:
            return {}
        config = self.config
        count = assign.task_count(len(refs), config.target_tasks, config.max_shards_per_task)
        if config.target_tasks is None and config.max_shards_per_task is None:
            count = light_task_count([self.load.get(ref) for ref in refs])
            if self.waking:
                count = max(count, min(len(refs), WAKE_TASKS))
        if count == len(refs) and config.shard_assigner == "balanced":
            ordered = self._first_the_starved([[ref] for ref in sorted(refs)])  # one task per shard
            return {group[0]: index for index, group in enumerate(ordered)}
        index_of = {key: n for n, key in enumerate(sorted({key for key, _sid in refs}))}

        def uid(key: str, sid: str) -> str:
            return sid if len(index_of) == 1 else f"{index_of[key]}/{sid}"

        by_uid: dict[str, ShardRef] = {}
        shards = []
        for key, sid in sorted(refs):
            known = info(key, sid)
            shard = known.to_api() if known is not None else {"ShardId": sid}
            for parent in ("ParentShardId", "AdjacentParentShardId"):
                if shard.get(parent):
                    shard[parent] = uid(key, shard[parent])
            shard["ShardId"] = uid(key, sid)
            by_uid[shard["ShardId"]] = ShardRef(key, sid)
            shards.append(shard)
        load = {uid(*ref): self.load[ref] for ref in refs if ref in self.load}
        groups = [
            [by_uid[u] for u in g] for g in assign.assign(shards, count, config.shard_assigner, load or None)
        ]
        ordered = self._first_the_starved([g for g in groups if g])
        return {ref: index for index, group in enumerate(ordered) for ref in group}

    def _first_the_starved(self, groups: list[list[ShardRef]]) -> list[list[ShardRef]]:
        """Task order: groups holding shards whose task did not run last time come first."""
        ranked = sorted(
            range(len(groups)), key=lambda i: (-max(self.starved.get(r, 0) for r in groups[i]), i)
        )
        return [groups[i] for i in ranked]
