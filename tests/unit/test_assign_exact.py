"""Exact values of the assigners and their measures, where test_assign.py checks properties with slack.

Written against mutation testing (bash scripts/mutation.sh 'pyspark_kinesis.assign.*'): a flipped sign
in the hash, a parent field misspelt, a bound off by one each changed no property test's outcome.
The oracles are independent of the code: Java's own String.hashCode (values printed by a JVM), an
exhaustive search for the best assignment, and hand-worked bounds."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_kinesis import assign
from tests.unit.test_assign import _best_capped

HASH_SPACE = 2**128

# String.hashCode() as printed by `java` (OpenJDK 17) for these strings.
JAVA_HASHES = {
    "hello": 99162322,
    "a": 97,
    "polygenelubricants": -2147483648,
    "shardId-000000000000": -1763766348,
    "shardId-000000000007": -1763766341,
    "shardId-000000000011": -1763766316,
}


def _shard(sid: str, low: int | None = None, high: int | None = None, **parents: str) -> dict:
    shard: dict = {"ShardId": sid, **parents}
    if low is not None and high is not None:
        shard["HashKeyRange"] = {"StartingHashKey": str(low), "EndingHashKey": str(high)}
    return shard


def _best_uncapped(weights: list[float], tasks: int) -> float:
    best = float("inf")
    for combo in itertools.product(range(tasks), repeat=len(weights)):
        totals = [0.0] * tasks
        for weight, task in zip(weights, combo, strict=True):
            totals[task] += weight
        best = min(best, max(totals))
    return best


# -- hash_mod: Java's String.hashCode ------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), sorted(JAVA_HASHES.items()))
def test_the_hash_is_javas_string_hash_code(text, expected):
    assert assign._java_hash(text) == expected


def test_hash_mod_places_shards_by_the_java_hash_of_their_id():
    ids = [s for s in JAVA_HASHES if s.startswith("shardId-")]
    tasks = assign.assign([_shard(s) for s in ids], 5, "hash_mod")
    for sid in ids:
        assert sid in tasks[abs(JAVA_HASHES[sid]) % 5]


# -- hash-key ranges -----------------------------------------------------------------------------


def test_a_shard_without_a_hash_key_range_spans_the_whole_space():
    whole = _shard("shardId-000000000000")
    assert assign.hash_range([whole], 2) == [["shardId-000000000000"], []]  # midpoint 2**127 - 1
    assert assign.shard_weights([whole], None) == {"shardId-000000000000": 1.0}


def test_weights_are_hash_key_shares_down_to_one_key():
    shards = [_shard("one-key", 0, 0), _shard("rest", 1, HASH_SPACE - 1), _shard("upper", 2**127, 2**128 - 1)]
    weights = assign.shard_weights(shards, None)
    assert weights["one-key"] == 1 / HASH_SPACE
    assert weights["upper"] == 0.5


def test_unknown_shards_are_scaled_by_the_known_load_per_hash_key_share():
    half, low_quarter, high_quarter = (
        _shard("half", 0, 2**127 - 1),
        _shard("q3", 2**127, 3 * 2**126 - 1),
        _shard("q4", 3 * 2**126, HASH_SPACE - 1),
    )
    shards = [half, low_quarter, high_quarter]
    assert assign.shard_weights(shards, {"half": 100.0}) == {"half": 100.0, "q3": 50.0, "q4": 50.0}
    # a small known load (below one per share) scales the same way
    assert assign.shard_weights(shards, {"half": 0.25}) == {"half": 0.25, "q3": 0.125, "q4": 0.125}
    # known shards that carried nothing say nothing about the others: their shares stand
    assert assign.shard_weights(shards, {"half": 0.0}) == {"half": 0.0, "q3": 0.25, "q4": 0.25}


# -- lineage order within a task -----------------------------------------------------------------


def test_a_merged_child_comes_after_both_parents_in_a_task():
    shards = [
        _shard("a-child", ParentShardId="z-parent", AdjacentParentShardId="y-adjacent"),
        _shard("z-parent"),
        _shard("y-adjacent"),
    ]
    [order] = assign.assign(shards, 1, "hash_mod")
    assert order.index("a-child") > max(order.index("z-parent"), order.index("y-adjacent"))


def test_a_parent_reached_twice_in_one_walk_keeps_every_shard():
    """A graph where the walk meets a shard it has already placed while the child is still open."""
    shards = [
        _shard("a", ParentShardId="c", AdjacentParentShardId="b"),
        _shard("c", ParentShardId="b"),
        _shard("b"),
    ]
    [order] = assign.assign(shards, 1, "hash_mod")
    assert order == ["b", "c", "a"]


@st.composite
def _lineages(draw):
    count = draw(st.integers(1, 12))
    shards = []
    for i in range(count):
        shard = {"ShardId": f"s{draw(st.integers(0, 99)):02d}-{i}"}
        if i and draw(st.booleans()):
            shard["ParentShardId"] = shards[draw(st.integers(0, i - 1))]["ShardId"]
        if i and draw(st.booleans()):
            shard["AdjacentParentShardId"] = shards[draw(st.integers(0, i - 1))]["ShardId"]
        shards.append(shard)
    chosen = draw(st.lists(st.sampled_from(shards), min_size=1, unique_by=lambda s: s["ShardId"]))
    return chosen


@settings(max_examples=200, deadline=None)
@given(_lineages())
def test_every_parent_in_a_task_comes_before_its_children(shards):
    [order] = assign.assign(shards, 1, "hash_mod")
    assert sorted(order) == sorted(s["ShardId"] for s in shards)
    position = {sid: i for i, sid in enumerate(order)}
    for shard in shards:
        for field in ("ParentShardId", "AdjacentParentShardId"):
            parent = shard.get(field)
            if parent in position:
                assert position[parent] < position[shard["ShardId"]], (field, order)


# -- balanced: exact optimum where it reaches it -------------------------------------------------

# Instances (loads per shard, tasks) where the largest-first placement and the local search together
# reach the exhaustive optimum and a break in either does not (found by trying the broken variants).
OPTIMAL = [
    ([5, 13, 8, 2, 8, 8, 2], 2),
    ([8, 5, 3, 1, 13, 1], 2),
    ([8, 3, 5, 13, 2, 2], 2),
    ([8, 13, 13, 8, 8, 1, 1], 2),
    ([5, 4, 3, 3, 3], 2),
]


@pytest.mark.parametrize(("loads", "tasks"), OPTIMAL)
def test_balanced_reaches_the_optimum_on_instances_that_need_both_phases(loads, tasks):
    shards = [_shard(f"s{i}") for i in range(len(loads))]
    load = {f"s{i}": float(w) for i, w in enumerate(loads)}
    result = assign.balanced(shards, tasks, load)
    assert max(len(t) for t in result) <= -(-len(loads) // tasks)
    assert max(sum(load[s] for s in t) for t in result) == _best_capped(list(load.values()), tasks)


def test_assign_defaults_to_balanced():
    shards = [_shard(f"s{i}") for i in range(6)]
    load = {f"s{i}": float(w) for i, w in enumerate([8, 5, 3, 1, 13, 1])}
    assert assign.assign(shards, 2, load=load) == assign.balanced(shards, 2, load)
    assert assign.assign(shards, 2, load=load) != assign.hash_mod(shards, 2, load)


def test_assign_refuses_no_tasks_and_resolve_names_what_it_could_not_find():
    with pytest.raises(ValueError, match=r"^num_tasks must be at least 1$"):
        assign.assign([_shard("s0")], 0)
    with pytest.raises(KeyError, match="no-such-assigner"):
        assign.assigner_for("no-such-assigner")
    assert assign.assigner_for("json:dumps") is json.dumps
    with pytest.raises(AttributeError):  # (the module is what comes before the first colon)
        assign.assigner_for("json:dumps:x")


def test_one_task_target_without_a_per_task_cap_is_one_task():
    assert assign.task_count(5, 1, None) == 1


# -- the measures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "tasks", "uncapped", "capped"),
    [
        ([5, 4, 3, 3, 3], 2, 9, 9),  # the average; the pigeonhole bound of the 5 largest is 9 too
        ([10, 1, 1, 1], 2, 10, 11),  # capped: two per task, so the 10 shares a task with a 1
        ([7, 7, 7], 2, 14, 14),  # pigeonhole: two of three equal shards share a task
        ([6, 6, 6, 6, 1], 2, 13, 13),  # pigeonhole over the three largest: 6 + 6, average 12.5
        ([9, 1, 1, 1, 1, 1], 3, 9, 10),  # capped, two per task: 9 + 1
        ([4, 4, 4, 4, 4, 4, 1], 3, 9, 9),  # pigeonhole over the seven largest: 4 + 4 + 1
        ([5], 3, 5, 5),
        ([5], 1, 5, 5),  # capped, one per task: the bound is the one shard
    ],
)
def test_the_load_lower_bound_by_hand(weights, tasks, uncapped, capped):
    assert assign.load_lower_bound(weights, tasks) == uncapped
    assert assign.load_lower_bound(weights, tasks, capped=True) == capped
    assert uncapped <= _best_uncapped(weights, tasks)
    assert capped <= _best_capped(weights, tasks)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=7), st.integers(1, 3))
def test_the_load_lower_bound_never_exceeds_the_optimum(weights, tasks):
    assert assign.load_lower_bound(weights, tasks) <= _best_uncapped(weights, tasks) + 1e-9
    assert assign.load_lower_bound(weights, tasks, capped=True) <= _best_capped(weights, tasks) + 1e-9


def test_overload_by_load_is_uncapped_unless_asked():
    tasks, load = [["big", "a"], ["b", "c"]], {"big": 10.0, "a": 1.0, "b": 1.0, "c": 1.0}
    assert assign.overload_by_load(tasks, load) == 11 / 10
    assert assign.overload_by_load(tasks, load, capped=True) == 1.0


def test_overloads_of_empty_or_weightless_assignments_are_one():
    assert assign.overload_by_count([[], []]) == 1.0
    assert assign.overload_by_load([["a"], ["b"]], {"a": 0.0, "b": 0.0}) == 1.0


def test_overload_by_load_with_loads_below_one():
    assert assign.overload_by_load([["a", "b"], []], {"a": 0.5, "b": 0.25}) == 0.75 / 0.5
