"""A replay that went on past lost records (failOnDataLoss=false) is reported by the driver.

A task's record describes its first attempt and stands; a replay of it (after a restart, under
asynchronous progress tracking, or a retry) that finds records gone warns in its executor's log and
notes what it went without beside the record (`protocol.exactly_once`, `BatchEndLog.note_losses`). The
driver reads those notes for the batches it knows were replayed (checked or re-planned in its run)
and reports them as it reports a first read's losses: its log and the lag report."""

from __future__ import annotations

import logging
from dataclasses import replace

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.protocol import exactly_once
from pyspark_kinesis.source.state.batch_log import BatchEndLog, loss_key
from pyspark_kinesis.source.state.offsets import ShardPlan, TaskEnd, TaskPlan
from tests.unit.planner_fakes import arn, config, logged, one_stream, read

A = arn("a")
REF = (A, "s0")
GONE = "batch 0 must be read again exactly as first read (...): about 3 records are past retention"


def test_a_note_adds_to_the_ends_of_its_shards_and_the_first_note_of_a_task_stands(tmp_path):
    log = BatchEndLog.open(str(tmp_path))
    log.write(TaskEnd("tok", 0, 1, {REF: read(Position.trim_horizon(), 5, tip=False)}))
    other = (A, "s1")
    log.note_losses("tok", 0, 1, {REF: (GONE,), (A, "gone"): ("not in the ends",)})
    log.note_losses("tok", 0, 1, {REF: ("a later replay's",)})
    log.note_losses("tok", 0, 2, {other: ("task 2's",)})
    ends = {REF: read(Position.trim_horizon(), 5, tip=False), other: read(Position.after("7"), 2, tip=True)}
    noted = log.with_noted_losses("tok", 0, ends)
    assert noted == {
        REF: replace(ends[REF], losses=(GONE,)),
        other: replace(ends[other], losses=("task 2's",)),
    }
    assert ends[REF].losses == ()  # (the ends given are not changed)
    assert log.with_noted_losses("tok", 1, ends) == ends  # another batch's folder: nothing noted there


def _plan(task: int = 0) -> TaskPlan:
    return TaskPlan("tok", 0, task, (ShardPlan(A, "s0", Position.trim_horizon(), 10, 10_000),), None)


def test_a_replay_notes_what_it_went_without_and_a_first_attempt_does_not(tmp_path):
    cfg = config("a", metadataPath=str(tmp_path))
    log = BatchEndLog.open(str(tmp_path))
    first = read(Position.trim_horizon(), 5, tip=False)
    exactly_once(cfg, _plan(), lambda plan, expect: {REF: first})  # a first attempt: it records
    assert log.read("tok", 0, 0) is not None and log.store.get(loss_key("tok", 0, 0)) is None
    short = replace(first, records=2, losses=(GONE,))
    exactly_once(cfg, _plan(), lambda plan, expect: {REF: short})  # a replay of that record
    assert log.with_noted_losses("tok", 0, {REF: first}) == {REF: replace(first, losses=(GONE,))}
    exactly_once(cfg, _plan(task=1), lambda plan, expect: {REF: short})  # (first attempt, with loss)
    assert log.store.get(loss_key("tok", 0, 1)) is None  # its record holds the loss itself


def test_the_driver_reports_a_replays_loss_of_a_batch_it_checked_or_re_planned(caplog):
    h = one_stream()
    planner = h.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    h.run(offset)
    task = offset.state(REF).task
    BatchEndLog(h.store, "mem://").note_losses(offset.token, offset.batch, task, {REF: (GONE,)})
    # A note is read whichever attempt wrote it: a task retried in this run, a losing speculative copy.
    assert planner.recorded_ends(offset)[REF].losses == (GONE,)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyspark_kinesis.source.driver"):
        restarted = h.planner()
        restarted.check_logged_batch(logged(offset))  # Spark runs the logged batch 0 again after a restart
        restarted.next_offset(offset, None, None)
    assert caplog.messages == [
        f"Data loss in batch 0, Kinesis stream {A}, shard s0: {GONE}; failOnDataLoss=false, so the query "
        "went on without them"
    ]
    report = restarted.lag.report()
    assert report is not None and report["streams"][A]["shardsWithDataLoss"] == 1


def test_the_driver_reports_a_replays_loss_of_a_batch_planned_again(caplog):
    """Asynchronous progress tracking: after a crash Spark plans again from an older durable offset,
    and a batch that ran already is planned anew (the same offset) and its tasks replay its records."""
    h = one_stream()
    planner = h.planner()
    offset0 = planner.next_offset(planner.initial_offset(), None, None)
    h.run(offset0)
    offset1 = planner.next_offset(offset0, None, None)
    h.run(offset1)
    restarted = h.planner()
    restarted.check_logged_batch(logged(offset0))
    again = restarted.next_offset(logged(offset0), None, None)  # batch 1 planned again
    assert again == offset1
    report = restarted.lag.report()  # (a batch planned again: the lag says what the one before read)
    assert report is not None and report["batch"] == 0
    BatchEndLog(h.store, "mem://").note_losses(offset1.token, 1, offset1.state(REF).task, {REF: (GONE,)})
    with caplog.at_level(logging.WARNING, logger="pyspark_kinesis.source.driver"):
        restarted.next_offset(again, None, None)
    assert [m.split(": ")[0] for m in caplog.messages] == [
        f"Data loss in batch 1, Kinesis stream {A}, shard s0"
    ]
    report = restarted.lag.report()
    assert report is not None and report["batch"] == 1 and report["streams"][A]["shardsWithDataLoss"] == 1
