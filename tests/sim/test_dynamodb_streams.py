"""A week of a DynamoDB table's stream read by the source (`service=dynamodb`), on the simulated clock:
the connector's real stream reader, planner, batch-end records and reads against the DynamoDB Streams
model (tests/sim/dynamodb.py), with Spark's micro-batch protocol reduced to its offset and commit logs
(tests/sim/dynamodb_query.py).

The service changes the shards itself: rollovers (one child) every few hours, partition splits (two
children), children listed minutes after their parent closed, and the query is stopped and started
again between a parent and its child, with a batch logged and not committed. Every change must come
out exactly once (a replayed batch replaces itself), and each item's changes in the order they were
made (parents read before children)."""

from __future__ import annotations

import functools

import pytest

from pyspark_kinesis.errors import DataLossError

from .clock import chance
from .dynamodb_query import HOUR_MS, KEYS, MINUTE_MS, OPTIONS, Query, make_world, restarted, surviving


@pytest.fixture
def world(monkeypatch):
    return make_world(monkeypatch)


def test_a_week_of_rollovers_splits_and_late_children_is_read_once_in_item_order(world):
    clock, model, seed = world
    options = {
        **OPTIONS,
        "shardDiscoveryIntervalMs": "30000",
        "maxFetchTimeMs": "2000",
        "idlePollIntervalMs": "500",
    }
    query = Query(options, seed, model=model)
    query.kill_rate, query.copy_rate = 0.1, 0.1  # (tasks killed mid-read or after their record; copies)
    model.throttle_rate = 0.05
    query.start()
    made: list[tuple[str, int]] = []
    stopped_until = None
    changes = {"rollovers": 0, "splits": 0, "late": 0, "restarts": 0}
    for step in range(7 * 24 * 12):  # a week in 5-minute steps, each a trigger (bounded)
        clock.advance_ms(5 * MINUTE_MS)
        for n in range(int(chance(seed, "puts", step) * 6)):
            change = model.put(KEYS[int(chance(seed, "key", step, n) * len(KEYS))])
            made.append((change.key, change.version if change.name != "REMOVE" else -1))
        roll = chance(seed, "roll", step)
        if roll < 0.03 and len(model.open_shards()) < 8:  # about every three hours
            shard = model.open_shards()[int(chance(seed, "which", step) * len(model.open_shards()))]
            late = (
                int(chance(seed, "late", step) * 20) * MINUTE_MS if chance(seed, "is-late", step) < 0.4 else 0
            )
            changes["late"] += bool(late)
            if roll < 0.012:
                model.split(shard.sid, late)
                changes["splits"] += 1
            else:
                model.rollover(shard.sid, late)
                changes["rollovers"] += 1
            if chance(seed, "stop", step) < 0.3:  # stopped between parent and child, a batch not committed
                query, _ = surviving(query, functools.partial(query.trigger, commit=False))
                stopped_until = step + 1 + int(chance(seed, "down", step) * 24)
                continue
        if stopped_until is not None:
            if step < stopped_until:
                continue
            query = restarted(query)
            stopped_until = None
            changes["restarts"] += 1
        query, _ = surviving(query, query.trigger)
    for _drain in range(200):  # then until nothing is left (bounded)
        clock.advance_ms(MINUTE_MS)
        listed = all(s.listed_from_ms <= clock.now_ms for s in model.shards.values())
        query, ran = surviving(query, query.trigger)
        if not ran and listed:
            query, ran = surviving(query, query.trigger)  # (nothing twice in a row: drained)
            if not ran:
                break
    assert changes["splits"] >= 2 and changes["rollovers"] >= 5 and changes["late"] >= 2
    assert changes["restarts"] >= 3
    assert model.faults["lost"] >= 3 and model.faults["throttled"] >= 10, model.faults
    assert query.done["killed after its record"] >= 3 and query.done["copies"] >= 3, query.done
    read = [row for batch in sorted(query.rows) for row in query.rows[batch]]
    assert sorted(read) == sorted(made), "every change exactly once"
    for key in KEYS:  # each item's changes in the order they were made
        assert [r for r in read if r[0] == key] == [m for m in made if m[0] == key], key


def test_changes_that_aged_out_while_the_query_was_stopped_are_a_loud_loss(world):
    """Stopped for 30 hours, the query finds the changes it had not read trimmed (24 hours): with
    failOnDataLoss (the default) it fails naming the shard; with failOnDataLoss=false it goes on and
    reads every change still there exactly once."""
    clock, model, _seed = world
    options = dict(OPTIONS)
    query = Query(options)
    query.start()
    for n in range(5):
        model.put(KEYS[n])
    clock.advance_ms(MINUTE_MS)
    assert query.trigger()
    first = [row for rows in query.rows.values() for row in rows]
    assert len(first) == 5
    lost = [model.put(KEYS[n]) for n in range(5, 10)]  # never read: they age out while stopped
    clock.advance_ms(30 * HOUR_MS)
    kept = [model.put(KEYS[n]) for n in range(10, 13)]
    clock.advance_ms(MINUTE_MS)
    query = restarted(query)
    with pytest.raises(DataLossError, match=r"^DynamoDB (stream|table) .*lost"):
        for _ in range(5):  # (bounded: the loss is found at the batch that reads the shard)
            query.trigger()
    lenient = Query({**options, "failOnDataLoss": "false"})
    lenient.offsets, lenient.commits, lenient.rows = query.offsets, query.commits, query.rows
    lenient.start()
    for _ in range(5):
        clock.advance_ms(MINUTE_MS)
        lenient.trigger()
    read = [row for batch in sorted(lenient.rows) for row in lenient.rows[batch]]
    assert read == first + [(c.key, c.version) for c in kept]
    assert not {(c.key, c.version) for c in lost} & set(read)
