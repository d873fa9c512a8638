"""The lineage rule's functions on the cases test_offsets_lineage_planning.py leaves out: several named
shards at once, an offset shard ListShards no longer lists, what an expired shard keeps.

Written against mutation testing (bash scripts/mutation.sh 'pyspark_kinesis.source.driver.lineage.*')."""

from __future__ import annotations

from pyspark_kinesis.model import Position, ShardInfo
from pyspark_kinesis.source.driver import lineage
from pyspark_kinesis.source.state.offsets import ShardState


def _info(sid: str, *parents: str, closed: bool = False) -> ShardInfo:
    parent, adjacent = [*parents, None, None][:2]
    return ShardInfo(sid, parent, adjacent, 0, 2**128 - 1, closed)


def test_every_named_shard_hides_its_ancestors_when_several_are_named():
    """Three named shards and one parent link: the walk up from all of them still finds the parent."""
    listed = [_info("p", closed=True), _info("c", "p"), _info("x"), _info("y")]
    named = {"c": Position.after("5"), "x": Position.after("6"), "y": Position.after("7")}
    states, gone, unknown = lineage.named_states(listed, Position.trim_horizon(), named)
    assert sorted(states) == ["c", "x", "y"]
    assert states["c"] == ShardState(position=Position.after("5"), parents=("p",))
    assert (gone, unknown) == ([], [])


def test_a_shard_of_the_offset_no_longer_listed_still_hides_its_parents():
    """ListShards may leave out a shard the offset holds (past retention, or a filtered listing):
    its parents, still listed, were read before it and must not be added again."""
    states = {"c": ShardState(position=Position.after("9"), parents=("p",))}
    merged = lineage.merge_discovered(states, [_info("p", closed=True), _info("other")])
    assert sorted(merged) == ["c", "other"]
    assert merged["other"] == ShardState(position=Position.trim_horizon(), parents=())


def test_open_only_keeps_the_open_shards():
    listed = [_info("closed", closed=True), _info("open")]
    assert [s.shard_id for s in lineage.open_only(listed)] == ["open"]


def test_an_expired_shard_keeps_its_parents_and_last_poll():
    states = {"s": ShardState(position=Position.after("3"), parents=("p", "q"), polled_ms=1234, task=2)}
    out, gone = lineage.mark_expired(states, [])
    assert gone == ["s"]
    assert out["s"] == ShardState(position=Position.shard_end(), parents=("p", "q"), polled_ms=1234)
