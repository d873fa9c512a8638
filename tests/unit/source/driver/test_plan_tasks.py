"""What each Spark task of a batch is told (src/pyspark_kinesis/source/driver/task_plans.py `plan_tasks`),
pinned field by field: its token, batch, task number, shards with their start, budget, closed flag, tip
time and holder hint, the batch's cutoff and the run's relay key; and the shards of streams gone from
the options, or re-created, left out with a warning that names them."""

from __future__ import annotations

import logging

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver import task_plans as tasks
from pyspark_kinesis.source.driver.task_plans import plan_tasks
from pyspark_kinesis.source.state.offsets import ShardPlan, ShardState, SourceOffset, TaskPlan
from tests.unit.planner_fakes import CREATED, arn, config, config_with_created

A, B = arn("a"), arn("b")


def offset(**more) -> SourceOffset:
    streams = {
        A: {
            "s0": ShardState(
                Position.after("10"), task=1, max_records=50, max_bytes=5000, closed=True, tip_ms=77
            ),
            "s1": ShardState(Position.trim_horizon(), task=0, max_records=60, max_bytes=6000),
        },
        B: {"s0": ShardState(Position.at_timestamp(123), task=1, max_records=70, max_bytes=7000)},
    }
    return SourceOffset("tok", 5, streams, cutoff_ms=999, created={A: CREATED, B: CREATED}, **more)


def test_each_task_gets_its_shards_with_their_start_budget_and_facts():
    holders = {(A, "s0"): "10.0.0.2:4000@17"}
    plans = plan_tasks(offset(), config("a", "b"), holders, b"key")
    assert plans == [
        TaskPlan(
            "tok", 5, 0, (ShardPlan(A, "s1", Position.trim_horizon(), 60, 6000, False, 0, ""),), 999, b"key"
        ),
        TaskPlan(
            "tok",
            5,
            1,
            (
                ShardPlan(A, "s0", Position.after("10"), 50, 5000, True, 77, "10.0.0.2:4000@17"),
                ShardPlan(B, "s0", Position.at_timestamp(123), 70, 7000, False, 0, ""),
            ),
            999,
            b"key",
        ),
    ]


def test_without_holders_or_a_key_nothing_is_made_up():
    plans = plan_tasks(offset(), config("a", "b"))
    assert {s.holder for p in plans for s in p.shards} == {""} and {p.relay_key for p in plans} == {b""}


def test_shards_of_a_stream_no_longer_in_the_options_are_left_out_naming_it(caplog):
    with caplog.at_level(logging.WARNING, logger=tasks.__name__):
        plans = plan_tasks(offset(), config("a"))
    assert [(p.task, [s.ref for s in p.shards]) for p in plans] == [(0, [(A, "s1")]), (1, [(A, "s0")])]
    assert caplog.messages == [
        f"Batch 5: skipping shards of streams no longer in the options, or re-created: {B}"
    ]


def test_a_task_left_with_no_shard_is_not_planned_and_the_rest_still_are(caplog):
    with caplog.at_level(logging.WARNING, logger=tasks.__name__):
        plans = plan_tasks(offset(), config("b"))
    assert [(p.task, [s.ref for s in p.shards]) for p in plans] == [(1, [(B, "s0")])]
    assert len(caplog.messages) == 2  # task 0 (only a's shard) and task 1 (a's beside b's)
    assert all(m.endswith(f"re-created: {A}") for m in caplog.messages)


def test_nothing_is_logged_when_every_shard_is_kept(caplog):
    with caplog.at_level(logging.WARNING, logger=tasks.__name__):
        plan_tasks(offset(), config("a", "b"))
    assert caplog.messages == []


def test_with_fail_on_data_loss_off_a_re_created_streams_shards_are_left_out(caplog):
    recreated = config_with_created(config("a", "b"), CREATED + 1, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger=tasks.__name__):
        plans = plan_tasks(offset(), recreated)
    assert plans == []
    assert any(
        m.startswith("Batch 5: skipping shards of streams no longer in the options") for m in caplog.messages
    )
