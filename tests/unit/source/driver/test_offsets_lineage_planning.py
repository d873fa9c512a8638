from __future__ import annotations

from pyspark_kinesis.model import Position, ShardInfo
from pyspark_kinesis.source.driver import lineage
from pyspark_kinesis.source.driver.batch_shape import split_budget
from pyspark_kinesis.source.state.offsets import ShardEnd, ShardState, SourceOffset, TaskEnd


def shard(sid, parent=None, adjacent=None, closed=False):
    return ShardInfo(sid, parent, adjacent, 0, 1, closed)


def test_offset_round_trip_keeps_tasks():
    offset = SourceOffset(
        token="t",
        batch=3,
        streams={
            "arn:s": {
                "b": ShardState(Position.after("9"), parents=("a",), task=1, max_records=10),
                "a": ShardState(Position.shard_end(), closed=True),
                "c": ShardState(Position.trim_horizon(), task=0),
            },
            "arn:r": {"c": ShardState(Position.trim_horizon(), task=1)},
        },
        cutoff_ms=77,
    )
    again = SourceOffset.from_json(offset.to_json())
    assert again == offset
    assert again.tasks() == {0: [("arn:s", "c")], 1: [("arn:r", "c"), ("arn:s", "b")]}
    end = TaskEnd(
        "t",
        3,
        1,
        {
            ("arn:s", "b"): ShardEnd(
                Position.after("9"), Position.inside("12", 4), 7, 70, children=("x", "y")
            ),
            ("arn:r", "b"): ShardEnd(Position.trim_horizon(), Position.shard_end()),
        },
    )
    assert TaskEnd.from_json(end.to_json()) == end


def test_children_wait_until_every_parent_is_finished():
    states = {
        "p1": ShardState(Position.trim_horizon()),
        "p2": ShardState(Position.shard_end()),
        "merged": ShardState(Position.trim_horizon(), parents=("p1", "p2")),
        "orphan": ShardState(Position.trim_horizon(), parents=("expired",)),
    }
    assert lineage.readable(states) == ["orphan", "p1"]
    states["p1"] = ShardState(Position.shard_end())
    assert lineage.readable(states) == ["merged", "orphan"]


def test_discovery_adds_new_children_at_trim_horizon_and_never_readds_forgotten_parents():
    states = {"child": ShardState(Position.after("5"), parents=("parent",), polled_ms=1)}
    listed = [shard("parent", closed=True), shard("child", "parent"), shard("grandchild", "child")]
    merged = lineage.merge_discovered(states, listed)
    assert set(merged) == {"child", "grandchild"}
    assert merged["grandchild"].position == Position.trim_horizon()
    assert merged["grandchild"].parents == ("child",)


def test_finished_parents_are_dropped_once_all_children_started():
    states = {
        "parent": ShardState(Position.shard_end()),
        "left": ShardState(Position.trim_horizon(), parents=("parent",), polled_ms=5),
        "right": ShardState(Position.trim_horizon(), parents=("parent",)),
        "lonely": ShardState(Position.shard_end()),
    }
    assert set(lineage.prune_finished(states)) == set(
        states
    )  # right has not started; lonely has no child yet
    states["right"] = ShardState(Position.trim_horizon(), parents=("parent",), polled_ms=6)
    assert set(lineage.prune_finished(states)) == {"left", "right", "lonely"}


def test_split_budget_is_exact_and_rotates_the_remainder():
    ids = ["a", "b", "c"]
    for total in (1, 2, 3, 10, 100):
        for rotate in range(4):
            parts = split_budget(total, ids, rotate)
            assert sum(parts.values()) == total
            assert max(parts.values()) - min(parts.values()) <= 1
    assert split_budget(1, ids, 0) != split_budget(1, ids, 1)


def test_shards_gone_from_the_listing_count_as_finished():
    states = {
        "old": ShardState(Position.after("3")),
        "child": ShardState(Position.trim_horizon(), parents=("old",)),
        "done": ShardState(Position.shard_end()),
    }
    marked, gone = lineage.mark_expired(states, [shard("child", "old")])
    assert gone == ["old"]
    assert marked["old"].finished and marked["done"].finished
    assert lineage.readable(marked) == ["child"]


def test_lineage_walks_survive_thousands_of_generations():
    """An hourly reshard for a few months: no recursion limit on the walks up and down the lineage."""
    depth = 5000
    listed = [shard("g0", closed=True)] + [
        shard(f"g{i}", f"g{i - 1}", closed=i < depth - 1) for i in range(1, depth)
    ]
    states = {f"g{depth - 1}": ShardState(Position.trim_horizon(), parents=(f"g{depth - 2}",), polled_ms=1)}
    merged = lineage.merge_discovered(states, listed)
    assert set(merged) == set(states)  # every listed ancestor was read before: none comes back
    from pyspark_kinesis import assign

    chain = [{"ShardId": f"g{i}", "ParentShardId": f"g{i - 1}" if i else None} for i in range(depth)]
    assert assign.assign(list(reversed(chain)), 1, "hash_mod")[0] == [f"g{i}" for i in range(depth)]


def test_parents_of_children_that_expired_unread_are_pruned():
    states = {
        "parent": ShardState(Position.shard_end()),
        "left": ShardState(Position.shard_end(), parents=("parent",)),  # expired before it was read
        "right": ShardState(Position.after("5"), parents=("parent",), polled_ms=3),
    }
    assert "parent" not in lineage.prune_finished(states)
