"""What the driver says about the batch-end records it reads back (src/pyspark_kinesis/source/driver/
recorded.py and ledger.py), word for word: a task that never ran, records gone with the batch's
planned marker, a batch planned before a restart, and the records of a query whose driver died before
its first batch was logged (a record deleted from under a batch that ran: test_restart_paths.py).
Planner and batch-end log without Spark or a server (planner_fakes.py)."""

from __future__ import annotations

import logging

import pytest

from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver import ledger, recorded
from pyspark_kinesis.source.state.batch_log import planned_key
from tests.unit.planner_fakes import arn, logged, one_stream
from tests.unit.source.driver.test_restart_paths import dead_pid, forge_beats

A = arn("a")


def test_a_task_that_never_ran_is_said_with_its_shards(caplog):
    h = one_stream(maxShardsPerTask="2")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert len(first.tasks()) == 1  # both shards in task 0
    h.run(first, only=set())  # a foreachBatch that used none of its DataFrame
    with caplog.at_level(logging.INFO, logger=recorded.__name__):
        again = h.planner().next_offset(logged(first), None, None)
    assert {s.position for s in again.streams[A].values()} == {Position.trim_horizon()}
    assert caplog.messages == [
        "Batch 0, task 0 never ran (a foreachBatch that used only part of its DataFrame, or none of it): its "
        "shards s0, s1 are read again from the same positions"
    ]


def test_records_gone_with_the_batchs_planned_marker_say_the_metadata_path_changed():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.store.delete(planned_key(first.token, 0))  # (no task ran: no record either)
    with pytest.raises(CheckpointMismatchError) as failed:
        h.planner().next_offset(logged(first), None, None)
    assert str(failed.value) == (
        "The batch-end record of batch 0, task 0 is missing under metadataPath 'mem://', and so is the record "
        "that this batch was planned, although the checkpoint says that batch ran: the metadataPath was "
        "changed or cleaned. Restore it, or start over with a new checkpointLocation."
    )


def test_a_batch_planned_before_a_restart_gets_its_offset_again_and_says_so(caplog):
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    second = planner.next_offset(first, None, None)
    restarted = h.planner()
    with caplog.at_level(logging.INFO, logger=ledger.__name__):
        again = restarted.next_offset(logged(first), None, None)
        assert restarted.next_offset(logged(first), None, None) == again  # (looked up once per run)
    assert again == second
    assert (
        caplog.messages.count("Batch 1 was planned before (a restart re-plans it): its offset is used again")
        == 1
    )


def test_the_records_of_a_query_killed_before_its_first_batch_are_removed_and_said(caplog):
    h = one_stream()
    killed = h.planner()
    killed.next_offset(killed.initial_offset(), None, None)
    forge_beats(h, killed.token or "", pid=dead_pid())
    restarted = h.planner()
    with caplog.at_level(logging.INFO, logger=ledger.__name__):
        first = restarted.next_offset(restarted.initial_offset(), None, None)
    assert (
        caplog.messages.count(
            f"metadataPath: removed the records of query {killed.token}, whose driver ended before Spark logged its "
            "first batch (its restart began this query)"
        )
        == 1
    )
    assert restarted.ledger.token == first.token


def test_the_live_record_is_renewed_only_once_the_query_is_known():
    class Log:
        beats: list[str | None]

        def beat(self, token: str | None) -> None:
            self.beats.append(token)

    log = Log()
    log.beats = []
    run = ledger.Ledger(log, "mem://")  # type: ignore[arg-type]
    run.beat()
    assert log.beats == []
    run.token = "tok"
    run.beat()
    assert log.beats == ["tok"]
