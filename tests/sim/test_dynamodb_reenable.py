"""A DynamoDB table's stream disabled and enabled again, read by a query that names the table by name
(issue #66's acceptance: "a stream re-enabled ... read exactly once in per-item order").

Disabling closes the stream's shards (readable 24 hours, then the stream is gone); enabling makes a
new stream with a new ARN. The query reads the old stream to its end and then the new one from its
first change (`source.driver.stream_set`), whether the change happens while it runs, while it is
stopped, or a day before it starts again; changes that aged out meanwhile are a loud loss. The model
and the query's side: tests/sim/dynamodb.py, tests/sim/dynamodb_query.py."""

from __future__ import annotations

import functools

import pytest

from pyspark_kinesis.errors import DataLossError

from .clock import chance
from .dynamodb_query import (
    HOUR_MS,
    KEYS,
    MINUTE_MS,
    OPTIONS,
    Query,
    make_world,
    restarted,
    started,
    surviving,
)

STEP_MS = 5 * MINUTE_MS


@pytest.fixture
def world(monkeypatch):
    return make_world(monkeypatch)


class Run:
    """The schedule's side: the table's writes (what the stream captured is the oracle), the service's
    rollovers, and the query, restarted by its job when it fails."""

    def __init__(self, world, options: dict[str, str]) -> None:
        self.clock, self.model, self.seed = world
        self.made: list[tuple[str, int]] = []
        self.query = Query(options, self.seed, model=self.model)
        self.query.kill_rate, self.query.copy_rate = 0.1, 0.1
        self.model.throttle_rate, self.model.list_throttle_rate = 0.05, 0.1
        self.query = started(self.query)
        self.steps = 0

    def quiet(self) -> None:
        """No task deaths, copies or throttling: a scenario whose faults are its own."""
        self.query.kill_rate = self.query.copy_rate = 0.0
        self.model.throttle_rate = self.model.list_throttle_rate = 0.0

    def loud_then_lenient(self, loss: str) -> None:
        """Restarted, the query fails with a DataLossError matching `loss`; restarted again with
        failOnDataLoss=false, it reads what is left to the end."""
        self.restart()
        with pytest.raises(DataLossError, match=loss):
            self.drain()
        self.query.options = {**self.query.options, "failOnDataLoss": "false"}
        self.restart()
        self.drain()

    def writes(self, hours: float, *, running: bool = True) -> None:
        """`hours` of the table's writes in 5-minute steps, a trigger each step while `running`."""
        for _ in range(int(hours * HOUR_MS / STEP_MS)):  # (bounded by `hours`)
            self.steps += 1
            self.clock.advance_ms(STEP_MS)
            for n in range(int(chance(self.seed, "puts", self.steps) * 5)):
                change = self.model.put(KEYS[int(chance(self.seed, "key", self.steps, n) * len(KEYS))])
                if change is not None:  # (none while the stream is disabled: no stream holds it)
                    self.made.append((change.key, change.version if change.name != "REMOVE" else -1))
            opened = self.model.open_shards()
            if opened and chance(self.seed, "roll", self.steps) < 0.03:
                shard = opened[int(chance(self.seed, "which", self.steps) * len(opened))]
                self.model.rollover(shard.sid, int(chance(self.seed, "late", self.steps) * 20) * MINUTE_MS)
            if running:
                self.query, _ = surviving(self.query, self.query.trigger)

    def stop(self) -> None:
        """The driver dies in the middle of a batch: it is logged and not committed."""
        self.query, _ = surviving(self.query, functools.partial(self.query.trigger, commit=False))

    def restart(self) -> None:
        self.query = restarted(self.query)

    def drain(self) -> None:
        for _ in range(300):  # minutes, until two triggers in a row plan nothing (bounded)
            self.clock.advance_ms(MINUTE_MS)
            self.query, ran = surviving(self.query, self.query.trigger)
            if not ran:
                self.query, ran = surviving(self.query, self.query.trigger)
                if not ran and all(s.listed_from_ms <= self.clock.now_ms for s in self.model.shards.values()):
                    return
        raise AssertionError("the query did not drain in 300 minutes")

    def read(self) -> list[tuple[str, int]]:
        return [row for batch in sorted(self.query.rows) for row in self.query.rows[batch]]


def test_a_stream_disabled_and_enabled_again_is_followed_once_in_item_order(world):
    """Three times over four days: while the query runs; while it is stopped with a batch not
    committed; and while it runs, then stopped for a day (the old stream, read to its end before the
    stop, is gone when it starts again). Every change the streams captured comes out once, each item's
    in order. (Stopped before it read the old stream's ends, and started again after the stream was
    gone, it cannot know what it missed: the other test.)"""
    clock, model, _seed = world
    run = Run(world, {**OPTIONS, "shardDiscoveryIntervalMs": "60000", "idlePollIntervalMs": "500"})
    first = model.arn
    run.writes(12)
    model.disable()  # while the query runs: the old stream's shards close
    run.writes(1)  # (changes now are in no stream)
    model.enable()
    second = model.arn
    run.writes(12)
    assert run.query.reader._planner.stream_set.covered(first)
    assert second in run.query.offsets[max(run.query.offsets)], (
        "the running query went on with the new stream"
    )

    run.stop()  # stopped with a batch not committed and changes unread in the stream
    run.writes(1, running=False)
    model.disable()
    run.writes(0.25, running=False)
    model.enable()
    run.writes(2, running=False)
    run.restart()  # (its options resolve the table to the newest stream; the checkpoint holds the old)
    run.writes(12)

    model.disable()  # while the query runs, which reads the closed shards to their ends and stops
    run.drain()
    run.stop()
    clock.advance_ms(20 * HOUR_MS)
    model.enable()
    run.writes(6, running=False)  # 26 hours after the disable: the old stream is gone
    assert model.stream(second) is None
    run.restart()
    run.writes(12)
    run.drain()

    assert len(model.streams) == 4 and len(run.made) > 300
    assert model.faults["throttled"] >= 10 and run.query.done["copies"] >= 3, (model.faults, run.query.done)
    read = run.read()
    assert sorted(read) == sorted(run.made), "every captured change exactly once"
    for key in KEYS:  # each item's changes in the order they were made
        assert [r for r in read if r[0] == key] == [m for m in run.made if m[0] == key], key


def test_a_disabled_streams_changes_that_aged_out_while_the_query_was_stopped_are_a_loud_loss(world):
    """Stopped with changes unread, the table's stream disabled and enabled again, and the query
    started 30 hours later: the old stream is gone with them. With failOnDataLoss (the default) the
    query fails saying so; with failOnDataLoss=false it reads the new stream's changes once."""
    clock, model, _seed = world
    run = Run(world, {**OPTIONS, "idlePollIntervalMs": "500"})
    run.quiet()
    run.writes(2)
    run.drain()
    before = list(run.made)
    run.writes(1, running=False)
    unread = run.made[len(before) :]
    model.disable()
    clock.advance_ms(22 * HOUR_MS)
    model.enable()
    run.writes(8, running=False)
    after = run.made[len(before) + len(unread) :]
    assert unread and after
    run.loud_then_lenient(r"went past retention before they were read to their end")
    assert run.read() == before + after


def test_a_new_stream_reached_more_than_a_day_after_it_was_enabled_is_a_loud_possible_loss(world):
    """The old stream read to its end, the query stopped, the table's stream enabled again and written
    to, and the query started 28 hours later: the new stream's oldest changes aged out before the query
    reached it. Said (failOnDataLoss), or with failOnDataLoss=false what is left is read once."""
    clock, model, _seed = world
    run = Run(world, {**OPTIONS, "idlePollIntervalMs": "500"})
    run.quiet()
    run.writes(1)
    model.disable()
    run.drain()
    run.stop()
    read_before = list(run.made)
    model.enable()
    run.writes(2, running=False)
    aged = run.made[len(read_before) :]
    clock.advance_ms(25 * HOUR_MS)
    run.writes(1, running=False)
    kept = run.made[len(read_before) + len(aged) :]
    assert aged and kept
    run.loud_then_lenient(r"was enabled 2\d hours ago, and changes stay 24 hours")
    assert run.read() == read_before + kept
