"""A seeded week of a DynamoDB table's stream read by the source (`service=dynamodb`), on the simulated
clock: the schedule and its checks, for one seed (`week`), and many seeds from the command line:

    python -m tests.sim.dynamodb_week --seeds 100 --first 5000 [--days 7]

prints each seed's figures and the totals, and exits 1 naming the first seed that failed (run it
again alone with `--seeds 1 --first SEED`: a seed decides the whole run).

The service changes the shards itself: rollovers (one child) every few hours, partition splits (two
children), children listed minutes after their parent closed, and the table's stream disabled and
enabled again (a new stream: changes made meanwhile are in none). The query is stopped and started
again between a parent and its child with a batch logged and not committed, its tasks die in the
middle of their reads or after their rows, speculative copies run, calls are throttled. Every change
a stream captured must come out exactly once (a replayed batch replaces itself), and each item's
changes in the order they were made (parents read before children, old stream before new).
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import time

import pytest

from .clock import chance
from .dynamodb_query import KEYS, MINUTE_MS, OPTIONS, Query, make_world, restarted, started, surviving

STEP_MS = 5 * MINUTE_MS
WEEK_OPTIONS = {
    **OPTIONS,
    "shardDiscoveryIntervalMs": "30000",
    "maxFetchTimeMs": "2000",
    "idlePollIntervalMs": "500",
}


def week(seed: int, monkeypatch: pytest.MonkeyPatch, days: int = 7) -> dict[str, int]:
    """One seed's run; raises AssertionError when a change is lost, repeated or out of its item's
    order. Returns what happened (the figures)."""
    clock, model, seed = make_world(monkeypatch, seed)
    query = Query(WEEK_OPTIONS, seed, model=model)
    query.kill_rate, query.copy_rate = 0.1, 0.1  # (tasks killed mid-read or after their record; copies)
    model.throttle_rate, model.list_throttle_rate = 0.05, 0.05
    query = started(query)
    made: list[tuple[str, int]] = []
    stopped_until = enable_at = None
    figures = collections.Counter({"rollovers": 0, "splits": 0, "late": 0, "restarts": 0, "re-enabled": 0})
    for step in range(days * 24 * 12):  # 5-minute steps, each a trigger (bounded)
        clock.advance_ms(STEP_MS)
        for n in range(int(chance(seed, "puts", step) * 6)):
            change = model.put(KEYS[int(chance(seed, "key", step, n) * len(KEYS))])
            if change is not None:  # (none while the stream is disabled)
                made.append((change.key, change.version if change.name != "REMOVE" else -1))
        if enable_at is None and chance(seed, "disable", step) < 0.003:  # about once a day
            model.disable()
            enable_at = step + 1 + int(chance(seed, "off", step) * 36)  # 5 minutes to 3 hours later
        elif enable_at is not None and step >= enable_at:
            model.enable()
            enable_at = None
            figures["re-enabled"] += 1
        roll, opened = chance(seed, "roll", step), model.open_shards()
        if roll < 0.03 and opened and len(opened) < 8:  # about every three hours
            shard = opened[int(chance(seed, "which", step) * len(opened))]
            late = (
                int(chance(seed, "late", step) * 20) * MINUTE_MS if chance(seed, "is-late", step) < 0.4 else 0
            )
            figures["late"] += bool(late)
            if roll < 0.012:
                model.split(shard.sid, late)
                figures["splits"] += 1
            else:
                model.rollover(shard.sid, late)
                figures["rollovers"] += 1
            if stopped_until is None and chance(seed, "stop", step) < 0.3:
                # stopped between parent and child, a batch not committed
                query, _ = surviving(query, functools.partial(query.trigger, commit=False))
                stopped_until = step + 1 + int(chance(seed, "down", step) * 24)
                continue
        if stopped_until is not None:
            if step < stopped_until:
                continue
            query = restarted(query)
            stopped_until = None
            figures["restarts"] += 1
        query, _ = surviving(query, query.trigger)
    if stopped_until is not None:
        query = restarted(query)
    query = _drained(query, clock, model)
    read = [row for batch in sorted(query.rows) for row in query.rows[batch]]
    assert sorted(read) == sorted(made), f"seed {seed}: every change exactly once"
    for key in KEYS:  # each item's changes in the order they were made
        assert [r for r in read if r[0] == key] == [m for m in made if m[0] == key], f"seed {seed}: {key}"
    figures.update(
        changes=len(made),
        batches=len(query.rows),
        streams=len(model.streams),
        lost=model.faults["lost"],
        throttled=model.faults["throttled"],
        **{k.replace(" ", "-"): v for k, v in query.done.items()},
    )
    return dict(figures)


def _drained(query: Query, clock, model) -> Query:
    """Triggers a minute apart until nothing is left: two in a row plan nothing with every shard listed
    and the last stream's renewal past its wait (bounded)."""
    for _minute in range(300):
        clock.advance_ms(MINUTE_MS)
        listed = all(s.listed_from_ms <= clock.now_ms for s in model.shards.values())
        query, ran = surviving(query, query.trigger)
        if not ran and listed:
            query, ran = surviving(query, query.trigger)
            if not ran and clock.now_ms - model.streams[model.arn].created_ms > 45 * MINUTE_MS:
                return query
    raise AssertionError("the query did not drain in 300 simulated minutes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (1-100000)")
    parser.add_argument("--first", type=int, default=5000, help="the first seed")
    parser.add_argument("--days", type=int, default=7, help="simulated days per seed (1-60)")
    args = parser.parse_args(argv)
    if not (1 <= args.seeds <= 100_000 and 1 <= args.days <= 60):
        parser.error("--seeds must be 1-100000 and --days 1-60")
    totals: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    for seed in range(args.first, args.first + args.seeds):
        with pytest.MonkeyPatch.context() as patches:
            try:
                figures = week(seed, patches, args.days)
            except Exception as exc:
                print(f"seed {seed} FAILED: {type(exc).__name__}: {exc}", flush=True)
                return 1
        totals.update(figures)
        print(f"seed {seed}: " + " ".join(f"{k}={v}" for k, v in sorted(figures.items())), flush=True)
    print(
        f"{args.seeds} seeds x {args.days} days, {time.monotonic() - started:.0f} s, all exact: "
        + " ".join(f"{k}={v}" for k, v in sorted(totals.items()))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
