from __future__ import annotations

import itertools
import random

import pytest
from benchmarks.assignment import reshard_history, uniform, uniform_load, zipf_load

from pyspark_kinesis import assign


def ids(tasks):
    return sorted(s for t in tasks for s in t)


@pytest.mark.parametrize("strategy", ["hash_mod", "hash_range", "balanced"])
@pytest.mark.parametrize(("shards", "tasks"), [(1, 1), (4, 2), (7, 3), (16, 16), (5, 8), (100, 7)])
def test_every_assigner_places_every_shard_once(strategy, shards, tasks):
    stream = uniform(shards)
    result = assign.assign(stream, tasks, strategy)
    assert len(result) == tasks
    assert ids(result) == sorted(s["ShardId"] for s in stream)


def test_hash_range_maps_midpoints_linearly():
    result = assign.assign(uniform(8), 4, "hash_range")
    assert result == [[f"shardId-{i:012d}", f"shardId-{i + 1:012d}"] for i in range(0, 8, 2)]


def test_hash_mod_is_the_deterministic_baseline():
    stream = uniform(64)
    assert assign.assign(stream, 8, "hash_mod") == assign.assign(stream, 8, "hash_mod")
    assert assign.overload_by_count(assign.assign(stream, 8, "hash_mod")) > 1.0


def test_balanced_never_exceeds_the_count_bound_after_reshard_histories():
    rng = random.Random(1)
    for _ in range(30):
        stream = reshard_history(rng.randrange(2, 40), rng.randrange(0, 60), rng)
        tasks = rng.randrange(1, len(stream) + 1)
        assert assign.overload_by_count(assign.assign(stream, tasks, "balanced")) == 1.0


def _best_capped(weights: list[float], tasks: int) -> float:
    """The true optimum by exhaustive search, among assignments with at most ceil(S/T) per task."""
    cap = -(-len(weights) // tasks)
    best = float("inf")
    for combo in itertools.product(range(tasks), repeat=len(weights)):
        counts, totals = [0] * tasks, [0.0] * tasks
        for weight, task in zip(weights, combo, strict=True):
            counts[task] += 1
            totals[task] += weight
        if max(counts) <= cap:
            best = min(best, max(totals))
    return best


def test_balanced_matches_the_exhaustive_optimum_on_small_streams():
    rng = random.Random(5)
    checked = 0
    for _ in range(120):
        stream = reshard_history(rng.randrange(2, 5), rng.randrange(0, 6), rng)
        if len(stream) > 8:
            continue
        tasks = rng.randrange(1, min(4, len(stream)) + 1)
        load = {sid: rng.choice([1, 2, 3, 5, 8, 13]) * v for sid, v in uniform_load(stream).items()}
        result = assign.assign(stream, tasks, "balanced", load)
        got = max(sum(load[s] for s in task) for task in result)
        assert got <= _best_capped([load[s["ShardId"]] for s in stream], tasks) * 1.10 + 1e-12
        checked += 1
    assert checked >= 50


def test_balanced_uses_load_and_beats_hash_mod_on_skewed_traffic():
    rng = random.Random(2)
    stream = uniform(64)
    load = zipf_load(stream, 5000, 1.1, rng)
    balanced = assign.overload_by_load(assign.assign(stream, 16, "balanced", load), load)
    baseline = assign.overload_by_load(assign.assign(stream, 16, "hash_mod"), load)
    assert balanced <= 1.10 < baseline


def test_unknown_load_falls_back_to_hash_range_size():
    stream = reshard_history(4, 10, random.Random(3))
    weights = assign.shard_weights(stream, {stream[0]["ShardId"]: 1000.0})
    assert weights[stream[0]["ShardId"]] == 1000.0
    assert all(w > 0 for w in weights.values())


def test_parents_come_before_children_within_a_task():
    parent = {
        "ShardId": "shardId-000000000009",
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "10"},
    }
    child = {
        "ShardId": "shardId-000000000001",
        "ParentShardId": "shardId-000000000009",
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "5"},
    }
    assert assign.assign([child, parent], 1, "balanced") == [["shardId-000000000009", "shardId-000000000001"]]


def test_task_count_follows_the_options():
    assert assign.task_count(10, None, None) == 10
    assert assign.task_count(10, 3, None) == 3
    assert assign.task_count(10, None, 4) == 3
    assert assign.task_count(10, 2, 4) == 3  # maxShardsPerTask wins over a too small targetTasks
    assert assign.task_count(2, 8, None) == 2
    assert assign.task_count(0, 8, None) == 0


def test_custom_assigner_by_import_path_and_bad_ones():
    assert assign.assigner_for("pyspark_kinesis.assign:hash_range") is assign.hash_range
    with pytest.raises(KeyError):
        assign.assigner_for("nope")
    with pytest.raises(ValueError, match="every shard exactly once"):
        assign.register_assigner("broken", lambda shards, n, load: [[] for _ in range(n)])
        assign.assign(uniform(3), 2, "broken")
