"""Overload of every shard assigner over simulated streams (FLINK-24639's measure).

Scenarios: uniform streams (equal hash ranges), streams after random split/merge histories,
UpdateShardCount to non-powers of two, and skewed traffic (Zipf-distributed partition keys hashed
with MD5 onto the hash-key space, as Kinesis does). Load per shard is the bytes its keys carry; the
`balanced` assigner is given that load (as the connector learns it from recorded batch ends), the
other two do not use load. Everything is seeded, so a run is repeatable.
"""

from __future__ import annotations

import hashlib
import platform
import random
import statistics
from bisect import bisect_right
from dataclasses import dataclass
from datetime import date

from pyspark_kinesis import assign

SPACE = assign.HASH_SPACE


@dataclass
class Row:
    family: str
    scenario: str
    shards: int
    tasks: int
    assigner: str
    by_count: float
    by_bytes: float
    by_bytes_capped: float


def _shard(index: int, low: int, high: int, parent: str | None = None, adjacent: str | None = None) -> dict:
    return {
        "ShardId": f"shardId-{index:012d}",
        "HashKeyRange": {"StartingHashKey": str(low), "EndingHashKey": str(high)},
        "ParentShardId": parent,
        "AdjacentParentShardId": adjacent,
    }


def uniform(count: int, first_id: int = 0) -> list[dict]:
    return [_shard(first_id + i, i * SPACE // count, (i + 1) * SPACE // count - 1) for i in range(count)]


def reshard_history(start: int, operations: int, rng: random.Random) -> list[dict]:
    """Open shards after random splits (at the midpoint) and merges (of hash-adjacent shards)."""
    open_shards = uniform(start)
    next_id = start
    for _ in range(operations):
        open_shards.sort(key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
        if len(open_shards) > 1 and rng.random() < 0.35:
            i = rng.randrange(len(open_shards) - 1)
            left, right = open_shards[i], open_shards[i + 1]
            low, high = (
                int(left["HashKeyRange"]["StartingHashKey"]),
                int(right["HashKeyRange"]["EndingHashKey"]),
            )
            open_shards[i : i + 2] = [_shard(next_id, low, high, left["ShardId"], right["ShardId"])]
            next_id += 1
        else:
            i = rng.randrange(len(open_shards))
            parent = open_shards[i]
            low, high = (
                int(parent["HashKeyRange"]["StartingHashKey"]),
                int(parent["HashKeyRange"]["EndingHashKey"]),
            )
            mid = (low + high) // 2
            open_shards[i : i + 1] = [
                _shard(next_id, low, mid, parent["ShardId"]),
                _shard(next_id + 1, mid + 1, high, parent["ShardId"]),
            ]
            next_id += 2
    return open_shards


def uniform_load(shards: list[dict]) -> dict[str, float]:
    return {
        s["ShardId"]: (
            int(s["HashKeyRange"]["EndingHashKey"]) - int(s["HashKeyRange"]["StartingHashKey"]) + 1
        )
        / SPACE
        for s in shards
    }


def zipf_load(shards: list[dict], keys: int, exponent: float, rng: random.Random) -> dict[str, float]:
    """Bytes per shard when `keys` partition keys with Zipf weights are hashed (MD5) onto the shards."""
    ordered = sorted(shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    starts = [int(s["HashKeyRange"]["StartingHashKey"]) for s in ordered]
    load = {s["ShardId"]: 0.0 for s in shards}
    salt = rng.getrandbits(32)
    for rank in range(keys):
        weight = 1.0 / (rank + 1) ** exponent
        point = int.from_bytes(hashlib.md5(f"key-{salt}-{rank}".encode()).digest(), "big")
        load[ordered[bisect_right(starts, point) - 1]["ShardId"]] += weight
    return load


def measure(family: str, scenario: str, shards: list[dict], tasks: int, load: dict[str, float]) -> list[Row]:
    rows = []
    for name in ("hash_mod", "hash_range", "balanced"):
        result = assign.assign(shards, tasks, name, load if name == "balanced" else None)
        rows.append(
            Row(
                family,
                scenario,
                len(shards),
                tasks,
                name,
                assign.overload_by_count(result),
                assign.overload_by_load(result, load),
                assign.overload_by_load(result, load, capped=True),
            )
        )
    return rows


def run(seed: int = 24639) -> list[Row]:
    rng = random.Random(seed)
    rows: list[Row] = []
    for count in (4, 16, 64, 256, 1024):
        for tasks in (2, 4, 16, 64, 256):
            if tasks <= count:
                shards = uniform(count)
                rows += measure("uniform", f"{count} equal shards", shards, tasks, uniform_load(shards))
    for start, ops in ((4, 6), (8, 20), (16, 40), (64, 100), (128, 300)):
        shards = reshard_history(start, ops, rng)
        for tasks in (2, 4, 16, 64):
            if tasks <= len(shards):
                rows += measure(
                    "split/merge history",
                    f"{start} shards + {ops} reshards",
                    shards,
                    tasks,
                    uniform_load(shards),
                )
    for count in (3, 5, 7, 12, 24, 100, 300, 1000):
        shards = uniform(count, first_id=1000)
        for tasks in (2, 4, 16, 64, 256):
            if tasks <= count:
                rows += measure("UpdateShardCount", f"to {count} shards", shards, tasks, uniform_load(shards))
    for count in (16, 64, 256):
        shards = uniform(count)
        load = zipf_load(shards, 20_000, 1.1, rng)
        for tasks in (4, 8, 16, 32):
            if tasks <= count:
                rows += measure("skewed (Zipf keys)", f"{count} shards, Zipf 1.1", shards, tasks, load)
    return rows


def summary(rows: list[Row]) -> list[tuple[str, str, float, float, float, float, float, float]]:
    out = []
    families = list(dict.fromkeys(r.family for r in rows))
    for family in families:
        for name in ("hash_mod", "hash_range", "balanced"):
            sel = [r for r in rows if r.family == family and r.assigner == name]
            out.append(
                (
                    family,
                    name,
                    statistics.mean(r.by_count for r in sel),
                    max(r.by_count for r in sel),
                    statistics.mean(r.by_bytes for r in sel),
                    max(r.by_bytes for r in sel),
                    statistics.mean(r.by_bytes_capped for r in sel),
                    max(r.by_bytes_capped for r in sel),
                )
            )
    return out


def markdown(rows: list[Row]) -> str:
    lines = [
        "# Shard assignment: overload by assigner",
        "",
        f"Measured {date.today().isoformat()} on {platform.machine()} / Python {platform.python_version()} with "
        "`bash scripts/bench.sh assign --write docs/assignment-benchmark.md` (a seeded simulation; the figures "
        "do not depend on the machine).",
        "",
        "Overload by count = most shards on one task / ceil(shards / tasks) (FLINK-24639). Overload by bytes = "
        "most bytes on one task / a lower bound of the best whole-shard assignment (the average per task, and "
        "the pigeonhole bound: among the m*T+1 largest shards some task holds m+1), so 1.00 is optimal and "
        "1.10 is at most 10% above it. `balanced` is given each shard's bytes; the others ignore load. "
        "'Bytes, capped' compares with the best assignment that also keeps overload 1.00 by count (at most "
        "ceil(shards / tasks) per task), the class `balanced` is built to stay in; it only differs where that "
        "cap fills every task. Assigners that break the cap can score below 1.00 there.",
        "",
        "## Summary (mean / worst over each family)",
        "",
        "| scenarios | assigner | count: mean | count: worst | bytes: mean | bytes: worst "
        "| bytes, capped: mean | bytes, capped: worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for family, name, *figures in summary(rows):
        lines.append(f"| {family} | `{name}` | " + " | ".join(f"{f:.2f}" for f in figures) + " |")
    lines += [
        "",
        "## Every case",
        "",
        "| scenario | shards | tasks | assigner | by count | by bytes | bytes, capped |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.shards} | {r.tasks} | `{r.assigner}` | {r.by_count:.2f} | {r.by_bytes:.2f} "
            f"| {r.by_bytes_capped:.2f} |"
        )
    return "\n".join(lines) + "\n"
