"""Restart and replay paths that once stuck (#42): a driver killed before Spark logged its first batch,
a stream removed and re-added while a batch that read it is still the latest, a record deleted from
under a batch that ran, and loss notes whichever attempt wrote them. Planner and batch-end log
without Spark or a server (fakes in planner_fakes.py)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import orjson
import pytest

from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver.task_plans import plan_tasks
from pyspark_kinesis.source.executor.protocol import exactly_once
from pyspark_kinesis.source.state.batch_log import BatchEndLog, task_key
from pyspark_kinesis.source.state.offsets import TaskEnd
from tests.unit.planner_fakes import Clock, FakeKinesis, Harness, arn, config, logged, one_stream, read, shard

A, B = arn("a"), arn("b")


def dead_pid() -> int:
    """The id of a process of this host that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def forge_beats(h: Harness, token: str, **identity: object) -> None:
    """Make `token`'s live records say they were written by another process."""
    for name in h.store.list_records(f"{token}/live"):
        key = f"{token}/live/{name}"
        h.store.data[key] = orjson.dumps({**orjson.loads(h.store.data[key]), **identity})


# -- a new query killed after its first planning, before Spark logged its batch 0 -----------------
def test_a_new_query_killed_before_its_first_batch_was_logged_restarts_at_once_and_leaves_nothing():
    h = one_stream()
    killed = h.planner()
    killed.next_offset(killed.initial_offset(), None, None)  # planned (marker written), never logged
    forge_beats(h, killed.token or "", pid=dead_pid())  # its driver is gone from this host
    restarted = h.planner()  # Spark finds no logged offset: it asks for the initial offset again
    first = restarted.next_offset(restarted.initial_offset(), None, None)
    assert first.batch == 0 and first.token != killed.token
    assert h.store.list_folders("") == [first.token]  # the dead query's folder is collected


def test_a_query_whose_driver_runs_elsewhere_or_here_still_holds_the_metadata_path():
    h = one_stream()
    running = h.planner()
    running.next_offset(running.initial_offset(), None, None)
    for identity in ({"host": "another-host"}, {}):  # another host: unknown; this process: alive
        forge_beats(h, running.token or "", **identity)
        other = h.planner()
        with pytest.raises(CheckpointMismatchError, match="in use by another running query"):
            other.next_offset(other.initial_offset(), None, None)
    assert running.token in h.store.list_folders("")


def test_only_queries_that_never_recorded_a_task_are_collected():
    h = one_stream()
    ran = h.planner()
    offset = ran.next_offset(ran.initial_offset(), None, None)
    h.run(offset)  # its batch 0 ran: Spark logged it, and a restart of its checkpoint needs it
    forge_beats(h, ran.token or "", pid=dead_pid())
    log = BatchEndLog(h.store, "mem://")
    assert log.collect_abandoned("another") == []
    assert ran.token in h.store.list_folders("")


# -- a stream removed, then added again while a batch that read it is the latest ----------------
def test_a_stream_re_added_after_a_run_that_dropped_it_is_read_from_where_it_stood():
    kinesis = FakeKinesis({A: [shard("s0"), shard("s1")], B: [shard("s0"), shard("s1")]})
    both = Harness(config("a", "b", maxShardsPerTask="4"), kinesis, Clock())
    planner = both.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    assert len(offset.tasks()) == 1  # one task reads the shards of both streams
    # The query restarts without b and runs the logged batch: its task reads a's shards only.
    only_a = Harness(config("a", maxShardsPerTask="4"), kinesis, both.clock, both.store)
    (plan,) = plan_tasks(logged(offset), only_a.config)
    assert plan.dropped == (B,) and {piece.stream for piece in plan.shards} == {A}
    # (what the executor's `exactly_once` writes: see the next test)
    BatchEndLog(both.store, "mem://").write(
        TaskEnd(
            plan.token,
            plan.batch,
            plan.task,
            {p.ref: read(p.start, 10, tip=False) for p in plan.shards},
            dropped=plan.dropped,
        )
    )
    # b is back in the options while that batch is still the latest: b's shards go on where they stood.
    nxt = both.planner().next_offset(logged(offset), None, None)
    assert {sid: s.position for sid, s in nxt.streams[B].items()} == {
        "s0": Position.trim_horizon(),
        "s1": Position.trim_horizon(),
    }
    assert {s.position for s in nxt.streams[A].values()} == {Position.after("1010")}
    assert sum(1 for refs in nxt.tasks().values() for ref in refs if ref[0] == B) == 2  # read now


def test_a_task_writes_which_streams_its_run_dropped(tmp_path):
    kinesis = FakeKinesis({A: [shard("s0")], B: [shard("s0")]})
    both = Harness(config("a", "b", maxShardsPerTask="4"), kinesis, Clock())
    planner = both.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    only_a = replace(config("a", maxShardsPerTask="4"), metadata_path=str(tmp_path))
    (plan,) = plan_tasks(logged(offset), only_a)
    exactly_once(only_a, plan, lambda part, expect: {p.ref: read(p.start, 3, tip=False) for p in part.shards})
    record = BatchEndLog.open(str(tmp_path)).read(plan.token, plan.batch, plan.task)
    assert record is not None and record.dropped == (B,) and set(record.shards) == {(A, "s0")}
    assert TaskEnd.from_json(orjson.loads(orjson.dumps(record.to_json()))) == record


# -- a record deleted from under a batch that ran -------------------------------------------------
def test_a_record_deleted_after_the_driver_read_it_is_loud_not_a_task_that_never_ran():
    h = one_stream(idlePollIntervalMs="60000")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    at_tip = {
        ref: read(Position.trim_horizon(), 4, tip=True, at_ms=h.clock.now) for ref in [(A, "s0"), (A, "s1")]
    }
    h.run(first, at_tip)
    second = planner.next_offset(first, None, None)  # reads batch 0's records
    h.run(second, {ref: read(at_tip[ref].reached, 0, tip=True, at_ms=h.clock.now) for ref in at_tip})
    assert planner.next_offset(second, None, None) is second  # idle: planned from batch 1, nothing new
    task = second.state((A, "s0")).task
    h.store.delete(task_key(second.token, second.batch, task))  # by hand, or an expiry rule
    with pytest.raises(CheckpointMismatchError) as failed:
        h.planner().next_offset(logged(second), None, None)  # a restart plans from batch 1 again
    assert str(failed.value) == (
        f"The batch-end record of batch 1, task {task} under metadataPath 'mem://' was deleted after the query "
        "read it: that task ran and its rows were delivered, so its shards cannot be read again from the "
        "batch's start without duplicates, nor from its end, which only the record held. Restore the record "
        "(metadataPath must be kept as the query writes it: exclude it from cleanups and expiry rules), or "
        "start over with a new checkpointLocation and metadataPath."
    )


def test_a_task_that_never_ran_is_still_closed_after_a_restart():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, only={0})  # task 1 never ran (a foreachBatch that used part of its DataFrame)
    again = h.planner().next_offset(logged(first), None, None)
    assert again.batch == 1 and len(again.tasks()) == 2
    assert BatchEndLog(h.store, "mem://").tasks_read(first.token, 0) == {0, 1}
