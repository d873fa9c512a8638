"""The plain values of src/pyspark_kinesis/model.py that the service's answers become: a ListShards
entry as `ShardInfo` (what planning keeps of it, and the shape the assigners take back), whether a
sequence number lies in a shard's range, and the AT_SEQUENCE_NUMBER position."""

from __future__ import annotations

from pyspark_kinesis.model import Position, ShardInfo

CLOSED = {
    "ShardId": "shardId-000000000003",
    "ParentShardId": "shardId-000000000001",
    "AdjacentParentShardId": "shardId-000000000002",
    "HashKeyRange": {"StartingHashKey": "170141183460469231731687303715884105728", "EndingHashKey": "340"},
    "SequenceNumberRange": {"StartingSequenceNumber": "100", "EndingSequenceNumber": "200"},
}


def test_a_listshards_entry_keeps_its_lineage_range_and_sequence_range():
    info = ShardInfo.from_api(CLOSED)
    assert info == ShardInfo(
        shard_id="shardId-000000000003",
        parent="shardId-000000000001",
        adjacent_parent="shardId-000000000002",
        start_hash=2**127,
        end_hash=340,
        closed=True,
        first_seq="100",
        last_seq="200",
    )
    assert info.parents == ("shardId-000000000001", "shardId-000000000002")


def test_an_open_shard_without_parents_or_ranges_reads_as_unknown():
    """An open shard has no EndingSequenceNumber; a local server may leave out a range altogether."""
    info = ShardInfo.from_api({"ShardId": "s", "SequenceNumberRange": {"StartingSequenceNumber": "7"}})
    assert info == ShardInfo("s", None, None, 0, 0, closed=False, first_seq="7", last_seq=None)
    assert info.parents == ()
    bare = ShardInfo.from_api({"ShardId": "s"})
    assert (bare.closed, bare.first_seq, bare.last_seq, bare.start_hash, bare.end_hash) == (
        False,
        None,
        None,
        0,
        0,
    )


def test_back_to_the_listshards_shape_the_assigners_take():
    info = ShardInfo.from_api({k: v for k, v in CLOSED.items() if k != "SequenceNumberRange"})
    assert info.to_api() == {k: v for k, v in CLOSED.items() if k != "SequenceNumberRange"} | {
        "HashKeyRange": {"StartingHashKey": str(2**127), "EndingHashKey": "340"}
    }
    assert ShardInfo.from_api(info.to_api()) == info


def test_a_sequence_number_lies_in_a_range_bounds_included():
    info = ShardInfo.from_api(CLOSED)  # 100..200
    assert [info.holds(s) for s in ("99", "100", "150", "200", "201")] == [False, True, True, True, False]
    open_shard = ShardInfo("s", None, None, 0, 1, closed=False, first_seq="100")
    assert [open_shard.holds(s) for s in ("99", "100", "10000")] == [False, True, True]
    unknown = ShardInfo("s", None, None, 0, 1, closed=False)
    assert unknown.holds("1") and unknown.holds("99999")


def test_an_end_below_the_start_is_not_a_range():
    """A local server may report an end below the start: not known, so the shard holds what is at or
    after its start."""
    odd = ShardInfo("s", None, None, 0, 1, closed=True, first_seq="100", last_seq="50")
    assert [odd.holds(s) for s in ("99", "100", "300")] == [False, True, True]
    single = ShardInfo("s", None, None, 0, 1, closed=True, first_seq="100", last_seq="100")
    assert [single.holds(s) for s in ("99", "100", "101")] == [
        False,
        True,
        False,
    ]  # an end equal to the start
    no_start = ShardInfo("s", None, None, 0, 1, closed=True, last_seq="50")
    assert [no_start.holds(s) for s in ("10", "50", "51")] == [True, True, False]


def test_at_sequence_is_before_the_records_first_sub_record():
    at = Position.at_sequence("5")
    assert at == Position.inside("5", -1)
    assert not at.skips("5", 0) and at.describe() == "at sequence number 5"
