"""The planner on the paths an operator takes around restarts (fakes in planner_fakes.py): a batch
planned again, a replay checked against metadataPath before it runs, records kept until Spark commits,
one running query per metadataPath, an identity record expired by the storage, and shards or starts
whose records may have aged out while the query was stopped."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from pyspark_kinesis.errors import CheckpointMismatchError, DataLossError, OptionError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state.batch_log import (
    LIVE_FOR_S,
    BatchEndLog,
    batch_folder,
    planned_key,
    source_key,
)
from pyspark_kinesis.source.state.offsets import SourceOffset
from tests.unit.planner_fakes import Clock, FakeKinesis, Harness, arn, config, logged, one_stream, read, shard

A = arn("a")


def test_a_batch_planned_again_gets_the_offset_it_was_planned_with():
    """Asynchronous progress tracking: after a crash Spark plans again from an older durable offset.
    The idle skip depends on the clock, so a fresh planning would come out different (here: no batch
    at all); the marker's offset comes back instead."""
    h = one_stream(idlePollIntervalMs="500")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    at_tip = {(A, sid): read(Position.trim_horizon(), 3, tip=True, at_ms=h.clock.now) for sid in ("s0", "s1")}
    h.run(first, at_tip)
    h.clock.now += 600
    second = planner.next_offset(first, None, None)
    assert second.batch == 1 and sorted(r for refs in second.tasks().values() for r in refs) == [
        (A, "s0"),
        (A, "s1"),
    ]
    # The driver crashes; the restarted one plans batch 1 again, 100 ms after the shards were found idle.
    h.clock.now -= 500
    again = h.planner().next_offset(logged(first), None, None)
    assert again.to_json() == second.to_json()


def test_a_batch_planned_again_a_day_later_is_not_listed_against_its_plan():
    """Found by the simulation (seeds 101,998 and 102,935: asynchronous progress tracking, a re-plan a
    day after the plan): batch 1's first attempt read both shards to their end; a day later they have
    left the listing. Listed against the plan's states (shards not yet read), they were called expired
    unread, a false loss that failed the query. The replay checks its reads exactly instead."""
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    second = planner.next_offset(first, None, None)
    h.kinesis.shards[A] = [
        shard("s0", high=2**127 - 1, closed=True),
        shard("s1", low=2**127, closed=True),
        shard("c", "s0", "s1"),
    ]
    ended = {
        (A, sid): read(second.state((A, sid)).position, 5, tip=True, end=Position.shard_end())
        for sid in ("s0", "s1")
    }
    h.run(second, ended)
    h.clock.now += 30 * 3_600_000
    h.kinesis.shards[A] = [shard("c", "s0", "s1")]  # (the parents are past retention)
    again = h.planner().next_offset(logged(first), None, None)
    assert again.to_json() == second.to_json()


def test_a_batch_planned_again_from_another_start_is_refused():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    planner.next_offset(first, None, None)
    other = replace(logged(first), cutoff_ms=123)  # not the offset batch 1 was planned from
    with pytest.raises(CheckpointMismatchError, match="planned before"):
        h.planner().next_offset(other, None, None)


def test_a_replay_is_checked_against_metadata_path_before_it_runs():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    planner.check_logged_batch(logged(first))  # planned here: nothing to check
    h.planner().check_logged_batch(logged(first))  # a restarted driver: the marker matches
    tampered = logged(first)
    tampered.streams[A]["s0"] = replace(tampered.streams[A]["s0"], max_records=7)
    with pytest.raises(CheckpointMismatchError, match="planned differently"):
        h.planner().check_logged_batch(tampered)
    h.store.delete(planned_key(first.token, 0))  # a metadataPath cleaned (or an older copy of it)
    with pytest.raises(CheckpointMismatchError, match="no record under metadataPath"):
        h.planner().check_logged_batch(logged(first))


def test_records_live_until_spark_commits_their_batch():
    h = one_stream()
    planner = h.planner()
    offsets = [planner.initial_offset()]
    for _batch in range(3):
        offsets.append(planner.next_offset(offsets[-1], None, None))
        h.run(offsets[-1])
    planner.next_offset(offsets[-1], None, None)
    token = offsets[0].token
    folders = BatchEndLog(h.store, "mem://").store.list_folders(token)
    assert [f for f in folders if f.startswith("batch-")] == [batch_folder(token, b)[33:] for b in range(4)]
    planner.committed(offsets[2])  # the batch ending at batch 1's offset committed: batch 0 can go
    folders = h.store.list_folders(token)
    assert [f for f in folders if f.startswith("batch-")] == [batch_folder(token, b)[33:] for b in (1, 2, 3)]


def test_an_offset_committed_while_it_is_still_the_latest_keeps_what_planning_from_it_needs():
    """Spark's order for a batch in which this source did not move (a stateful query's no-data batch,
    a batch only another source had data for): it logs that batch with the source's offset unchanged
    and commits that same offset; the next planning, in this run or after a restart, starts from it."""
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    second = planner.next_offset(first, None, None)
    h.run(second)
    planner.committed(logged(first))  # Spark logs the batch after `first`'s and commits `first`
    planner.committed(logged(second))  # a no-data batch logged with `second` unchanged: `second` committed
    third = h.planner().next_offset(logged(second), None, None)  # a restart plans from `second`
    assert third.batch == 2
    assert {s.position for s in third.streams[A].values()} == {Position.after("1010")}
    token = first.token
    assert [f for f in h.store.list_folders(token) if f.startswith("batch-")] == [
        batch_folder(token, b)[33:] for b in (1, 2)
    ]  # batch 0, which no planning needs, is gone


def start(h: Harness) -> SourceOffset:
    """A new query's run: its first batch planned (its token claimed, its live record fresh)."""
    planner = h.planner()
    first = planner.initial_offset()
    planner.next_offset(first, None, None)
    return first


def test_a_second_query_on_a_metadata_path_in_use_is_refused():
    h = one_stream()
    start(h)  # a query runs: its live record is fresh
    other = h.planner()
    begun = other.initial_offset()  # asked for, nothing claimed yet (see the restart below)
    with pytest.raises(CheckpointMismatchError, match="in use by another running query"):
        other.next_offset(begun, None, None)  # another query (a new token) on the same metadataPath


def test_a_refused_query_leaves_no_live_record_and_the_running_one_restarts_at_once():
    """The refused query's beat, written before its check, is withdrawn: left, it would make the
    running query's own restart within the live window look like a second query."""
    h = one_stream()
    running = start(h)
    other = h.planner()
    begun = other.initial_offset()
    with pytest.raises(CheckpointMismatchError, match="in use by another running query"):
        other.next_offset(begun, None, None)
    assert h.store.list_records(f"{begun.token}/live") == []
    restarted = h.planner()  # the running query, stopped and restarted at once
    restarted.check_offset(logged(running))  # claims its own token: nobody else is live


def test_a_restart_inside_the_first_batch_runs_it_again_under_its_own_token():
    """Killed while batch 0 ran (its live record fresh), then restarted at once: Spark asks for the
    initial offset to run logged batch 0 again; the restart is the logged query, not a new one."""
    h = one_stream()
    planner = h.planner()
    batch0 = planner.next_offset(planner.initial_offset(), None, None)
    restarted = h.planner()
    again = restarted.initial_offset()  # no new query claims metadataPath here
    restarted.check_logged_batch(logged(batch0))  # Spark's partitions(initial, batch 0): the logged query's
    h.run(batch0)
    batch1 = restarted.next_offset(logged(batch0), None, None)
    assert batch1.token == batch0.token and again.token != batch0.token
    assert h.store.list_folders("") == [batch0.token]  # no second query's records beside it


def test_a_query_gone_for_longer_than_the_live_window_leaves_the_metadata_path_free():
    h = one_stream()
    first = start(h)
    log = BatchEndLog(h.store, "mem://")
    (beat,) = h.store.list_records(f"{first.token}/live")
    h.store.delete(f"{first.token}/live/{beat}")
    old = int(time.time() * 1000 - LIVE_FOR_S * 1000 - 1000)
    h.store.put_if_absent(f"{first.token}/live/{old:015d}.json", b"{}")
    log.check_alone("another-token")
    start(h)  # starts


def test_an_identity_record_removed_by_an_expiry_rule_is_written_again():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    h.store.delete(source_key(first.token))  # an S3 lifecycle rule expired it (written once, long ago)
    second = h.planner().next_offset(logged(first), None, None)
    assert second.batch == 1 and h.store.get(source_key(first.token)) is not None
    h.store.delete_folder(first.token)  # everything gone: a clear error that names the cause
    with pytest.raises(CheckpointMismatchError, match="expiry rule"):
        h.planner().next_offset(logged(second), None, None)


def test_a_never_read_child_of_a_parent_past_retention_is_a_loss():
    """The query was stopped longer than the retention while the stream resharded: the child's oldest
    records aged out with its parent, which the listing no longer shows."""
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a", shardDiscoveryIntervalMs="0"), kinesis, Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, {(A, "p"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    stopped = logged(first)
    kinesis.shards[A] = [shard("c", "p")]  # down past retention: the parent is no longer listed
    with pytest.raises(DataLossError, match="their parents are past retention"):
        h.planner().next_offset(stopped, None, None)
    lenient = Harness(
        config("a", shardDiscoveryIntervalMs="0", failOnDataLoss="false"), kinesis, h.clock, h.store
    )
    again = lenient.planner().next_offset(stopped, None, None)
    assert set(again.streams[A]) == {"c"} and again.tasks() == {0: [(A, "c")]}


def test_a_child_whose_parent_is_still_listed_is_no_loss():
    kinesis = FakeKinesis({A: [shard("p", closed=True), shard("c", "p")]})
    h = Harness(config("a", shardDiscoveryIntervalMs="0"), kinesis, Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, {(A, "p"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    assert planner.next_offset(first, None, None).tasks() == {0: [(A, "c")]}


def test_a_start_longer_ago_than_the_retention_fails_at_query_start():
    kinesis = FakeKinesis({A: [shard("s0")]})
    days_ago = int(time.time() * 1000) - 3 * 24 * 3600 * 1000
    stale = f"AT_TIMESTAMP:{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(days_ago / 1000))}"
    h = Harness(config("a", startingPosition=stale), kinesis, Clock(int(time.time() * 1000)))
    with pytest.raises(OptionError, match=r"startingPosition.*longer ago than the retention"):
        h.planner().initial_offset()
    lenient = Harness(config("a", startingPosition=stale, failOnDataLoss="false"), kinesis, h.clock)
    assert lenient.planner().initial_offset().streams[A]["s0"].position.kind == "ts"


def test_the_tip_is_remembered_where_a_read_found_it():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(
        first,
        {
            (A, "s0"): read(Position.trim_horizon(), 3, tip=True, at_ms=5000),
            (A, "s1"): read(Position.trim_horizon(), 3, tip=False, at_ms=5000),
        },
    )
    second = planner.next_offset(first, None, None)
    assert (second.streams[A]["s0"].tip_ms, second.streams[A]["s1"].tip_ms) == (5000, 0)
    plans = {piece.shard_id: piece.tip_ms for plan in _tasks(second, h) for piece in plan.shards}
    assert plans == {"s0": 5000, "s1": 0}


def _tasks(offset: SourceOffset, h: Harness):
    from pyspark_kinesis.source.driver.task_plans import plan_tasks

    return plan_tasks(offset, h.config)


def test_listings_a_closure_forces_check_the_stream_at_most_once_per_interval():
    """DescribeStreamSummary (20 calls per second per account) was called before every listing,
    forced ones included: here two closures within one discovery interval."""
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a", shardDiscoveryIntervalMs="10000"), kinesis, Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, {(A, "p"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    kinesis.shards[A] = [shard("p", closed=True), shard("c", "p")]
    h.clock.now += 1000
    second = planner.next_offset(first, None, None)  # the closure forces a listing
    assert second.tasks() == {0: [(A, "c")]} and kinesis.checks[A] == 1
    h.run(second, {(A, "c"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    kinesis.shards[A] = [shard("p", closed=True), shard("c", "p", closed=True), shard("d", "c")]
    h.clock.now += 1000
    third = planner.next_offset(second, None, None)  # another closure, within the interval
    assert third.tasks() == {0: [(A, "d")]} and kinesis.list_calls[A] == 3
    assert kinesis.checks[A] == 1
    h.clock.now += 10_000
    h.run(third)
    planner.next_offset(third, None, None)
    assert kinesis.checks[A] == 2
