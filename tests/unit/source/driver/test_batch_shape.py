"""The batch shape's own decisions, without a planner around it: what the assigner is shown (shards of
several streams under ids unique across them, parents renamed alike, recent load), which tasks come
first (the starved), how budgets are shared and which shards wait.

Written against mutation testing (bash scripts/mutation.sh 'pyspark_kinesis.source.driver.batch_shape.*'):
the planner tests reach these paths with one stream, no load and no custom assigner."""

from __future__ import annotations

from pyspark_kinesis import assign
from pyspark_kinesis.model import Position, ShardInfo, ShardRef
from pyspark_kinesis.source.driver.batch_shape import BatchShape, ShardAssignment
from pyspark_kinesis.source.state.offsets import ShardEnd
from tests.unit.planner_fakes import arn, config

A, B = arn("alpha"), arn("beta")
S0, S1, S2, S3 = (f"shardId-{n:012d}" for n in range(4))


def _info(key: str, sid: str) -> ShardInfo | None:
    """Shard 2 of each stream is shard 0's child; shard 3 is not listed (None)."""
    if sid == S3:
        return None
    parent = S0 if sid == S2 else None
    return ShardInfo(sid, parent, None, 0, 2**128 - 1, sid == S0)


def _end(size: int) -> ShardEnd:
    return ShardEnd(Position.trim_horizon(), Position.after("1"), records=1, bytes=size)


def test_no_shards_no_tasks():
    assert BatchShape(config("alpha")).assign([], _info) == {}


def test_one_task_per_shard_in_shard_order_with_the_starved_first():
    shape = BatchShape(config("alpha"))
    refs = [(A, S2), (A, S0), (A, S1)]
    assert shape.assign(refs, _info) == {(A, S0): 0, (A, S1): 1, (A, S2): 2}
    shape.observe({(A, S0): _end(5)}, unrun=[(A, S2)])
    assert shape.assign(refs, _info) == {(A, S2): 0, (A, S0): 1, (A, S1): 2}
    shape.observe({(A, S2): _end(5)}, unrun=[])  # read again: no longer starved
    assert shape.assign(refs, _info)[(A, S0)] == 0


def test_the_assigner_sees_shards_of_several_streams_under_unique_ids_with_their_parents():
    seen: list[list[dict]] = []

    def recording(shards, num_tasks, load):
        seen.append([dict(s) for s in shards])
        return assign.hash_mod(shards, num_tasks, load)

    assign.register_assigner("recording-for-test", recording)
    try:
        shape = BatchShape(config("alpha", "beta", targetTasks="2", shardAssigner="recording-for-test"))
        refs = [(B, S2), (A, S0), (B, S0), (A, S3)]
        result = shape.assign(refs, _info)
    finally:
        del assign.STRATEGIES["recording-for-test"]
    [shards] = seen
    by_id = {s["ShardId"]: s for s in shards}
    assert sorted(by_id) == [
        "0/shardId-000000000000",
        "0/shardId-000000000003",
        "1/shardId-000000000000",
        "1/shardId-000000000002",
    ]
    assert by_id["1/shardId-000000000002"]["ParentShardId"] == "1/shardId-000000000000"
    assert not by_id["1/shardId-000000000002"].get("AdjacentParentShardId")
    assert by_id["0/shardId-000000000003"] == {
        "ShardId": "0/shardId-000000000003"
    }  # not listed: the id alone
    assert by_id["0/shardId-000000000000"]["HashKeyRange"] == {
        "StartingHashKey": "0",
        "EndingHashKey": str(2**128 - 1),
    }
    assert sorted(result) == sorted(refs) and set(result.values()) <= {0, 1}


def test_one_stream_keeps_its_shard_ids_and_the_assigner_gets_the_recent_load():
    seen: list[tuple[list[str], dict | None]] = []

    def recording(shards, num_tasks, load):
        seen.append(([s["ShardId"] for s in shards], load))
        return assign.balanced(shards, num_tasks, load)

    assign.register_assigner("recording-load-for-test", recording)
    try:
        shape = BatchShape(config("alpha", maxShardsPerTask="2", shardAssigner="recording-load-for-test"))
        refs = [(A, S0), (A, S1), (A, S2), (A, S3)]
        shape.assign(refs, _info)
        shape.observe({(A, S0): _end(100), (A, S1): _end(100), (A, S2): _end(2)}, unrun=[])
        shape.observe({(A, S0): _end(300)}, unrun=[])
        result = shape.assign(refs, _info)
    finally:
        del assign.STRATEGIES["recording-load-for-test"]
    assert seen[0] == ([S0, S1, S2, S3], None)
    assert seen[1] == ([S0, S1, S2, S3], {S0: 200.0, S1: 100.0, S2: 2.0})  # a moving average of bytes
    assert result[(A, S0)] != result[(A, S1)]  # the two heavy shards on different tasks


def test_grouping_with_the_default_assigner_balances_the_recent_load():
    shape = BatchShape(config("alpha", targetTasks="2"))
    refs = [(A, S0), (A, S1), (A, S2), (A, S3)]
    shape.observe({(A, S0): _end(1000), (A, S1): _end(900), (A, S2): _end(10), (A, S3): _end(10)}, unrun=[])
    result = shape.assign(refs, _info)
    assert result[(A, S0)] != result[(A, S1)] and sorted(result.values()) == [0, 0, 1, 1]


def test_budgets_are_shared_and_a_shard_whose_share_is_zero_waits():
    shape = BatchShape(config("alpha"))
    refs = [(A, S0), (A, S1), (A, S2)]
    assert shape.slots(refs, 2, None, 0, _info) == {
        (A, S0): ShardAssignment(0, 1, -1),
        (A, S1): ShardAssignment(1, 1, -1),
    }
    assert shape.slots(refs, 2, None, 1, _info) == {
        (A, S1): ShardAssignment(0, 1, -1),
        (A, S2): ShardAssignment(1, 1, -1),
    }
    assert shape.slots(refs, None, 7, 0, _info) == {
        (A, S0): ShardAssignment(0, -1, 3),
        (A, S1): ShardAssignment(1, -1, 2),
        (A, S2): ShardAssignment(2, -1, 2),
    }
    assert shape.slots(refs, None, None, 0, _info) == {ref: ShardAssignment(i) for i, ref in enumerate(refs)}
    assert shape.slots([], 5, 5, 0, _info) == {}


def test_a_merged_shards_two_parents_are_both_renamed_for_the_assigner():
    seen: list[dict] = []

    def recording(shards, num_tasks, load):
        seen.extend(dict(s) for s in shards)
        return assign.hash_mod(shards, num_tasks, load)

    def merged(key: str, sid: str) -> ShardInfo:
        return (
            ShardInfo(sid, S0, S1, 0, 2**128 - 1, False)
            if sid == S2
            else ShardInfo(sid, None, None, 0, 1, True)
        )

    assign.register_assigner("recording-merge-for-test", recording)
    try:
        shape = BatchShape(config("alpha", "beta", targetTasks="1", shardAssigner="recording-merge-for-test"))
        shape.assign([(B, S2), (A, S0)], merged)
    finally:
        del assign.STRATEGIES["recording-merge-for-test"]
    child = next(s for s in seen if s["ShardId"] == "1/shardId-000000000002")
    assert (child["ParentShardId"], child["AdjacentParentShardId"]) == ("1/" + S0, "1/" + S1)


def test_one_shard_per_task_keeps_shard_order_whatever_the_load():
    """(The balanced assigner, given the load, would put the heaviest shard first.)"""
    shape = BatchShape(config("alpha", maxShardsPerTask="1"))
    shape.observe({(A, S0): _end(1), (A, S1): _end(10), (A, S2): _end(1000)}, unrun=[])
    assert shape.assign([(A, S0), (A, S1), (A, S2)], _info) == {(A, S0): 0, (A, S1): 1, (A, S2): 2}


def test_starvation_counts_batches_in_a_row():
    shape = BatchShape(config("alpha"))
    shape.observe({}, unrun=[(A, S0), (A, S1)])
    shape.observe({}, unrun=[(A, S1)])
    assert shape.starved == {(A, S0): 1, (A, S1): 2}


def _at_tip() -> ShardEnd:
    return ShardEnd(Position.trim_horizon(), Position.after("1"), records=1, at_tip=True)


def test_an_available_now_run_keeps_the_shards_it_drained_by_read_or_by_look_until_its_cutoff_changes():
    shape = BatchShape(config("alpha"))
    assert shape._drained({(A, S0): _at_tip()}, None, None) == set()  # (no cutoff: not AvailableNow)
    assert shape._drained({(A, S0): _at_tip()}, 50, 100) == set()  # (ends of an earlier run's cutoff)
    shape.drained_by_look({(A, S1)}, 100)
    shape.drained_by_look({(A, S2)}, 100)
    assert shape._drained({(A, S0): _at_tip()}, 100, 100) == {(A, S0), (A, S1), (A, S2)}
    assert shape._drained({}, 100, 100) == {(A, S0), (A, S1), (A, S2)}  # (kept for the run)
    shape.drained_by_look({(A, S3)}, 200)  # (a new run: what the last one drained says nothing)
    assert shape._drained({}, 200, 200) == {(A, S3)}
    shape.drained_by_look({(A, S1)}, 300)
    assert shape._drained({}, 250, 300) == set()  # (this run's first planning starts afresh)


def test_light_task_count_groups_by_recent_bytes_and_at_most_sixteen_shards_a_task():
    from pyspark_kinesis.source.driver.batch_shape import LIGHT_TASK_BYTES, light_task_count

    assert light_task_count([None, None, None]) == 3  # (nothing known yet: a task each)
    assert light_task_count([10.0, 20.0, 30.0, 40.0]) == 1
    assert light_task_count([10.0, None, 30.0]) == 2  # (the unknown one alone)
    assert light_task_count([LIGHT_TASK_BYTES * 0.6] * 4) == 3  # (2.4 task-loads of bytes)
    assert light_task_count([LIGHT_TASK_BYTES * 5.0] * 4) == 4  # (never more than one per shard)
    assert light_task_count([1.0] * 16) == 1 and light_task_count([1.0] * 17) == 2
    assert light_task_count([0.0]) == 1


def test_the_light_rule_matches_the_shards_a_task_reads_at_once():
    from pyspark_kinesis.source.driver.batch_shape import LIGHT_SHARDS_PER_TASK
    from pyspark_kinesis.source.executor.protocol import MAX_THREADS

    assert LIGHT_SHARDS_PER_TASK == MAX_THREADS


def test_light_shards_share_a_task_unless_the_options_set_the_count():
    refs = [(A, S0), (A, S1), (A, S2), (A, S3)]
    light = {ref: _end(100) for ref in refs}
    shape = BatchShape(config("alpha"))
    assert set(shape.assign(refs, _info).values()) == {0, 1, 2, 3}  # (no load known: a task each)
    shape.observe(light, unrun=[])
    assert set(shape.assign(refs, _info).values()) == {0}
    shape.observe({(A, S0): _end(5 << 20)}, unrun=[])  # (s0 heavy now: 2.5 MiB on average)
    grouped = shape.assign(refs, _info)
    assert len(set(grouped.values())) == 3 and list(grouped.values()).count(grouped[(A, S0)]) == 1
    for options in ({"targetTasks": "4"}, {"maxShardsPerTask": "1"}):
        chosen = BatchShape(config("alpha", **options))
        chosen.observe(light, unrun=[])
        assert set(chosen.assign(refs, _info).values()) == {0, 1, 2, 3}
    fan_out = BatchShape(config("alpha", consumerType="efo"))  # (the agents' relay carries a shard's
    fan_out.observe(light, unrun=[])  # subscription to whichever executor its task runs on)
    assert set(fan_out.assign(refs, _info).values()) == {0}


def test_the_first_batch_after_a_quiet_spell_wakes_every_executor_with_a_task_per_shard():
    """Spark ends idle Python workers after a minute: the first batch after a longer quiet spell takes
    the idle shards too, a task each, so that every executor starts its new worker in that batch."""
    shape = BatchShape(config("alpha"))
    refs = [ShardRef(A, s) for s in (S0, S1, S2)]
    shape.observe({ref: _end(10) for ref in refs}, unrun=[])  # light: they would share one task
    shape.admit({}, {}, None, None, now=1_000)
    assert len(set(shape.slots(refs, None, None, 1, _info).values())) == 1  # (a batch planned at 1 s)
    idle, found = {refs[1], refs[2]}, {refs[1]}

    def tasks_at(now: int, running: bool = True) -> tuple[list[ShardRef], int]:
        shape.admit({}, {}, None, None, now=now)
        admitted = shape.after_looks(refs, idle, found, running)
        slots = shape.assign(admitted, _info)
        return admitted, len(set(slots.values()))

    assert tasks_at(50_000) == ([refs[0], refs[1]], 1)  # within the minute: only the news, grouped
    assert tasks_at(62_000, running=False) == ([refs[0], refs[1]], 1)  # (AvailableNow: never)
    assert tasks_at(62_000) == (refs, 3)
    shape.admit({}, {}, None, None, now=62_000)
    shape.slots(refs, None, None, 2, _info)  # the waking batch is planned...
    assert tasks_at(63_000) == ([refs[0], refs[1]], 1)  # ...and the next one is shaped as usual


def test_a_task_count_the_options_set_turns_the_waking_batch_off():
    """With targetTasks or maxShardsPerTask the idle shards would only be packed onto the tasks the user
    asked for: reads for nothing, no executor woken."""
    refs = [ShardRef(A, s) for s in (S0, S1, S2)]
    for options in ({"targetTasks": "1"}, {"maxShardsPerTask": "3"}):
        shape = BatchShape(config("alpha", **options))
        shape.admit({}, {}, None, None, now=1_000)
        shape.slots(refs, None, None, 1, _info)
        shape.admit({}, {}, None, None, now=62_000)
        assert shape.after_looks(refs, {refs[1], refs[2]}, {refs[1]}, True) == [refs[0], refs[1]]
        assert not shape.waking
