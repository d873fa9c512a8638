"""Shard-to-task assignment: pure functions from shards to Spark task indexes (FLINK-24639).

An assigner takes the shards to read in one batch (ListShards-style dicts: ShardId, HashKeyRange,
ParentShardId, AdjacentParentShardId), the number of tasks, and an optional shard id -> load mapping
(recent bytes), and returns for each task index the shard ids it reads. The offset records the result,
so a replayed batch runs exactly as logged whatever the options are on restart; a new assignment
applies from the next new batch.

FLINK-24639's "overload" measures an assignment: the most shards on one task divided by the fewest
possible, ceil(shards / tasks). `overload_by_load` is the same idea for bytes, against a lower bound of
the best assignment that keeps shards whole (`load_lower_bound`), so 1.00 means optimal.
"""

from __future__ import annotations

import heapq
import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    # assigning
    "assign",
    "task_count",
    # assigners and their registry
    "STRATEGIES",
    "balanced",
    "hash_mod",
    "hash_range",
    "register_assigner",
    "assigner_for",
    # measures (FLINK-24639)
    "load_lower_bound",
    "overload_by_count",
    "overload_by_load",
    "shard_weights",
]

HASH_SPACE = 2**128

Shard = Mapping[str, Any]
Assigner = Callable[[Sequence[Shard], int, Mapping[str, float] | None], list[list[str]]]


def _range(shard: Shard) -> tuple[int, int]:
    keys = shard.get("HashKeyRange") or {}
    return int(keys.get("StartingHashKey", 0)), int(keys.get("EndingHashKey", HASH_SPACE - 1))


def _java_hash(text: str) -> int:
    """Java's String.hashCode, as Flink's default assigner effectively uses."""
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _lineage_order(ids: list[str], shards_by_id: Mapping[str, Shard]) -> list[str]:
    """A task's shards with every parent before its children, otherwise by shard id. A depth-first
    walk with its own stack: lineages can be thousands of generations deep."""
    chosen = set(ids)
    done: list[str] = []
    seen: set[str] = set()
    for root in sorted(ids):
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            sid, parents_done = stack.pop()
            if parents_done:
                done.append(sid)
                continue
            if sid in seen:
                continue
            seen.add(sid)
            stack.append((sid, True))
            shard = shards_by_id[sid]
            for parent in (shard.get("AdjacentParentShardId"), shard.get("ParentShardId")):
                if parent in chosen and parent not in seen:
                    stack.append((parent, False))
    return done


def _finish(tasks: list[list[str]], shards: Sequence[Shard]) -> list[list[str]]:
    by_id = {s["ShardId"]: s for s in shards}
    return [_lineage_order(t, by_id) for t in tasks]


def hash_mod(
    shards: Sequence[Shard], num_tasks: int, load: Mapping[str, float] | None = None
) -> list[list[str]]:
    """The old default, kept as a baseline: a hash of the shard id modulo the task count."""
    tasks: list[list[str]] = [[] for _ in range(num_tasks)]
    for shard in shards:
        tasks[abs(_java_hash(shard["ShardId"])) % num_tasks].append(shard["ShardId"])
    return _finish(tasks, shards)


def hash_range(
    shards: Sequence[Shard], num_tasks: int, load: Mapping[str, float] | None = None
) -> list[list[str]]:
    """FLINK-24639: the midpoint of each shard's hash-key range mapped linearly onto the tasks."""
    tasks: list[list[str]] = [[] for _ in range(num_tasks)]
    for shard in shards:
        low, high = _range(shard)
        tasks[min(num_tasks - 1, ((low + high) // 2) * num_tasks // HASH_SPACE)].append(shard["ShardId"])
    return _finish(tasks, shards)


def shard_weights(shards: Sequence[Shard], load: Mapping[str, float] | None) -> dict[str, float]:
    """Each shard's expected load: its measured load where known; otherwise its share of the hash-key
    space, scaled so that known and unknown shards are comparable."""
    fractions = {s["ShardId"]: (_range(s)[1] - _range(s)[0] + 1) / HASH_SPACE for s in shards}
    known = {sid: float(load[sid]) for sid in fractions if load and sid in load}
    if not known:
        return fractions
    known_fraction = sum(fractions[sid] for sid in known)
    per_fraction = sum(known.values()) / known_fraction if known_fraction > 0 else 0.0
    if per_fraction <= 0:
        per_fraction = 1.0
    return {sid: known.get(sid, fractions[sid] * per_fraction) for sid in fractions}


def balanced(
    shards: Sequence[Shard], num_tasks: int, load: Mapping[str, float] | None = None
) -> list[list[str]]:
    """The default: balance the load each task carries without ever exceeding ceil(shards / tasks)
    shards on a task (overload 1.00 by count). Largest shards first, each onto the least-loaded task
    that still has room (LPT with a cardinality cap), then a bounded local search that moves or swaps
    shards off the most loaded task while that lowers it. Shards are never split."""
    cap = math.ceil(len(shards) / num_tasks) if shards else 0
    weights = shard_weights(shards, load)
    order = sorted(shards, key=lambda s: (-weights[s["ShardId"]], s["ShardId"]))
    tasks: list[list[str]] = [[] for _ in range(num_tasks)]
    heap = [(0.0, index) for index in range(num_tasks)]  # (load, task) of tasks with room left
    heapq.heapify(heap)
    for shard in order:
        total, index = heapq.heappop(heap)
        tasks[index].append(shard["ShardId"])
        if len(tasks[index]) < cap:
            heapq.heappush(heap, (total + weights[shard["ShardId"]], index))
    _improve(tasks, weights, cap, rounds=4 * len(shards))
    return _finish(tasks, shards)


def _improve(tasks: list[list[str]], weights: Mapping[str, float], cap: int, rounds: int) -> None:
    """Lower the most loaded task by one move or swap per round, while some move or swap helps."""
    totals = [sum(weights[s] for s in t) for t in tasks]
    for _round in range(rounds):
        top = max(range(len(tasks)), key=totals.__getitem__)
        peak = totals[top]
        best: tuple[float, int, str, str | None] | None = None  # (new peak of the pair, other, out, in)
        for other in range(len(tasks)):
            if other == top:
                continue
            for out in tasks[top]:
                w_out = weights[out]
                if len(tasks[other]) < cap:
                    pair = max(peak - w_out, totals[other] + w_out)
                    if pair < peak - 1e-12 and (best is None or pair < best[0]):
                        best = (pair, other, out, None)
                for inn in tasks[other]:
                    delta = w_out - weights[inn]
                    if delta <= 0:
                        continue
                    pair = max(peak - delta, totals[other] + delta)
                    if pair < peak - 1e-12 and (best is None or pair < best[0]):
                        best = (pair, other, out, inn)
        if best is None:
            return
        _pair, other, moved, swapped = best
        tasks[top].remove(moved)
        tasks[other].append(moved)
        totals[top] -= weights[moved]
        totals[other] += weights[moved]
        if swapped is not None:
            tasks[other].remove(swapped)
            tasks[top].append(swapped)
            totals[other] -= weights[swapped]
            totals[top] += weights[swapped]


STRATEGIES: dict[str, Assigner] = {"hash_mod": hash_mod, "hash_range": hash_range, "balanced": balanced}


def register_assigner(name: str, assigner: Assigner) -> None:
    """Make a custom assigner selectable by name (option ``shardAssigner``).

    Parameters
    ----------
    name : str
        The name the option will use.
    assigner : callable
        ``(shards, num_tasks, load) -> list[list[str]]``: for each task index, the shard ids it reads.
        It runs on the driver; the connector checks that it places every shard exactly once.

    Examples
    --------
    >>> from pyspark_kinesis import assign
    >>> assign.register_assigner("one_task", lambda shards, n, load: [[s["ShardId"] for s in shards]] + [[]] * (n - 1))
    """
    STRATEGIES[name] = assigner


def assigner_for(strategy: str) -> Assigner:
    """The assigner a strategy names: a registered name, or ``package.module:function``.

    Parameters
    ----------
    strategy : str
        ``balanced``, ``hash_range``, ``hash_mod``, a name given to `register_assigner`, or
        ``package.module:function`` importable on the driver.

    Returns
    -------
    callable
        The assigner.

    Raises
    ------
    KeyError, ImportError, AttributeError
        When the strategy names nothing that can be found.
    """
    if strategy in STRATEGIES:
        return STRATEGIES[strategy]
    if ":" in strategy:
        module, _, name = strategy.partition(":")
        return getattr(importlib.import_module(module), name)
    raise KeyError(strategy)


def assign(
    shards: Sequence[Shard],
    num_tasks: int,
    strategy: str = "balanced",
    load: Mapping[str, float] | None = None,
) -> list[list[str]]:
    """Assign a batch's shards to Spark tasks.

    Parameters
    ----------
    shards : sequence of dict
        ListShards-style shards: ``ShardId``, ``HashKeyRange``, ``ParentShardId``,
        ``AdjacentParentShardId``.
    num_tasks : int
        How many tasks (at least 1).
    strategy : str, default "balanced"
        See `assigner_for`.
    load : mapping of str to float, optional
        Expected work per shard id (recent bytes, say); the hash-key-range share stands in when absent.

    Returns
    -------
    list of list of str
        For each task index, the shard ids it reads, parents before their children.

    Raises
    ------
    ValueError
        If ``num_tasks`` < 1 or the assigner does not place every shard exactly once.

    Examples
    --------
    >>> from pyspark_kinesis import assign
    >>> shards = [{"ShardId": f"shardId-{i}"} for i in range(3)]
    >>> assign.assign(shards, 2)
    [['shardId-0', 'shardId-2'], ['shardId-1']]
    """
    if num_tasks < 1:
        raise ValueError("num_tasks must be at least 1")
    tasks = assigner_for(strategy)(shards, num_tasks, load)
    placed = sorted(sid for task in tasks for sid in task)
    if placed != sorted(s["ShardId"] for s in shards) or len(tasks) != num_tasks:
        raise ValueError(f"assigner {strategy!r} must place every shard exactly once on {num_tasks} tasks")
    return tasks


def task_count(shards: int, target_tasks: int | None, max_shards_per_task: int | None) -> int:
    """How many tasks a batch of `shards` shards gets: one per shard unless the options group them."""
    if shards == 0:
        return 0
    fewest = math.ceil(shards / max_shards_per_task) if max_shards_per_task else 1
    if target_tasks:
        return min(shards, max(target_tasks, fewest))
    return fewest if max_shards_per_task else shards


def overload_by_count(tasks: Sequence[Sequence[str]]) -> float:
    """FLINK-24639's overload: the most shards on one task over the fewest possible, ceil(shards / tasks).

    Parameters
    ----------
    tasks : sequence of sequence of str
        An assignment, as `assign` returns it.

    Returns
    -------
    float
        1.00 when no task holds more shards than it must.
    """
    shards = sum(len(t) for t in tasks)
    return max(len(t) for t in tasks) / math.ceil(shards / len(tasks)) if shards else 1.0


def load_lower_bound(weights: Sequence[float], num_tasks: int, capped: bool = False) -> float:
    """A lower bound of the best possible most-loaded task when shards stay whole: the average, and
    the pigeonhole bound (among the m*T+1 largest shards some task holds m+1 of them), which is exact
    for equal shards. With `capped`, only assignments with at most ceil(shards / tasks) shards per task
    count (the ones with overload 1.00 by count): when that cap fills every task, the task holding the
    biggest shard also holds cap-1 others, at least the smallest ones."""
    ordered = sorted(weights, reverse=True)
    bound = sum(ordered) / num_tasks
    m = 0
    while m * num_tasks + 1 <= len(ordered):
        top = ordered[: m * num_tasks + 1]
        bound = max(bound, sum(top[-(m + 1) :]))
        m += 1
    cap = math.ceil(len(ordered) / num_tasks) if ordered else 0
    if capped and ordered and cap * num_tasks == len(ordered):
        bound = max(bound, ordered[0] + sum(ordered[len(ordered) - (cap - 1) :]) if cap > 1 else ordered[0])
    return bound


def overload_by_load(
    tasks: Sequence[Sequence[str]], load: Mapping[str, float], capped: bool = False
) -> float:
    """The overload by work: the most load on one task over `load_lower_bound` (1.00 = optimal).

    Parameters
    ----------
    tasks : sequence of sequence of str
        An assignment, as `assign` returns it.
    load : mapping of str to float
        Work per shard id.
    capped : bool, default False
        Compare with the best assignment that keeps overload by count at 1.00.

    Returns
    -------
    float
    """
    totals = [sum(load[s] for s in t) for t in tasks]
    bound = load_lower_bound([load[s] for t in tasks for s in t], len(tasks), capped)
    return max(totals) / bound if bound > 0 else 1.0
