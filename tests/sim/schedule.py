"""What happens in a run, drawn from its seed: the run's settings (`Setup`) and a timeline of events
(`Event`s) that the runner applies at their moment. A schedule is plain data (JSON both ways), so a
failing run prints its schedule, shrinking removes events from it, and `--replay` runs it again.

The draws lean towards the combinations defects hide in: quiet spells longer than the retention,
misplaced aggregates soon after a reshard, a driver crash right before a commit followed by a listing
outage at the restart, no-data batches of stateful queries, AvailableNow runs on a server that never
ends a closed shard.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class Setup:
    """A run's settings: the server, the query, the cluster."""

    seed: int
    days: float
    flavor: str = "service"  # service | kinesalite | moto (see kinesis.Flavor)
    trimmed_seq_error: bool = False
    retention_h: int = 24
    spark_line: str = (
        "4.2"  # 4.2: latestOffset(start, limit), AvailableNow; 4.0: latestOffset() and one batch a run
    )
    trigger: str = "processing"  # processing | available_now
    trigger_ms: int = 2_000  # the processing-time trigger while data comes
    idle_step_ms: int = 20 * 60_000  # triggers while nothing happens are sampled this far apart
    shards: int = 2
    streams: int = 1
    async_progress: bool = False
    async_every: int = 3  # batches between durable offset/commit log entries (asyncProgressTracking)
    stateful: bool = False  # no-data batches (Spark commits an offset that did not move)
    partial_rate: float = 0.0  # a batch's foreachBatch runs only some of its tasks
    retry_rate: float = 0.05  # a task attempt fails (before or after recording its end) and is retried
    speculation_rate: float = 0.03  # a second attempt of a task runs too
    executors: int = 2
    max_records: int = 0  # maxRecordsPerBatch (0: none)
    target_tasks: int = 0  # targetTasks (0: the default)
    sink_buffer: int = 8  # the sink part's producer buffer (aggregates)


@dataclass(frozen=True)
class Event:
    at_ms: int  # from the run's start
    kind: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Schedule:
    setup: Setup
    events: tuple[Event, ...]

    def to_json(self) -> str:
        return json.dumps({"setup": asdict(self.setup), "events": [asdict(e) for e in self.events]})

    @staticmethod
    def from_json(text: str) -> Schedule:
        data = json.loads(text)
        return Schedule(Setup(**data["setup"]), tuple(Event(**e) for e in data["events"]))

    def without(self, drop: set[int]) -> Schedule:
        return replace(self, events=tuple(e for n, e in enumerate(self.events) if n not in drop))


def draw(seed: int, days: float) -> Schedule:
    """The schedule of seed `seed` over `days` simulated days."""
    rng = random.Random(seed)
    setup = Setup(
        seed=seed,
        days=days,
        flavor=rng.choices(["service", "kinesalite", "moto"], [6, 2, 2])[0],
        trimmed_seq_error=rng.random() < 0.5,
        retention_h=rng.choice([24, 24, 48]),
        spark_line=rng.choices(["4.2", "4.0"], [3, 1])[0],
        trigger=rng.choices(["processing", "available_now"], [3, 1])[0],
        trigger_ms=rng.choice([1_000, 2_000, 10_000]),
        idle_step_ms=rng.choice([20, 60, 180]) * 60_000,
        shards=rng.randint(1, 4),
        streams=rng.choices([1, 2], [4, 1])[0],
        async_progress=rng.random() < 0.25,
        async_every=rng.randint(2, 5),
        stateful=rng.random() < 0.4,
        partial_rate=rng.choice([0.0, 0.0, 0.1]),
        executors=rng.randint(1, 3),
        max_records=rng.choice([0, 0, 7, 40]),
        target_tasks=rng.choice([0, 0, 1, 3]),
    )
    if setup.async_progress:  # (Spark refuses asynchronous progress tracking for these)
        setup = replace(setup, stateful=False, trigger="processing")
    events: list[Event] = []
    total = int(days * DAY_MS)
    t = rng.randint(0, HOUR_MS)
    last_reshard = -DAY_MS
    while t < total:
        roll = rng.random()
        if roll < 0.06:  # a quiet spell, sometimes longer than the retention
            t += rng.choice([6, 12, 30, 40]) * HOUR_MS
            continue
        burst_at = t
        for _put in range(rng.randint(1, 4)):
            style = rng.choices(
                ["plain", "agg", "stale", "hostile"], [14, 3, 3 if t - last_reshard < 2 * HOUR_MS else 0, 1]
            )[0]
            events.append(
                Event(
                    burst_at,
                    "put",
                    {
                        "count": rng.randint(1, 25),
                        "keys": rng.randint(1, 6),
                        "style": style,
                        "stream": rng.randrange(setup.streams),
                    },
                )
            )
            burst_at += rng.randint(1, 90) * 1000
        if rng.random() < 0.12:
            last_reshard = burst_at + 1000
            kind = rng.choice(["split", "split", "merge", "scale"])
            events.append(
                Event(
                    last_reshard,
                    kind,
                    {
                        "stream": rng.randrange(setup.streams),
                        "roll": rng.random(),
                        "count": rng.randint(1, 5),
                    },
                )
            )
            if rng.random() < 0.3:  # a stale producer's aggregate in a batch whose driver dies before its
                # commit, and a listing outage at the restart (the replay must filter as its first attempt did)
                stream = events[-1].args["stream"]
                outage = {
                    "calls": ["ListShards"],
                    "rate": 1.0,
                    "for_ms": 600_000,
                    "code": "LimitExceededException",
                }
                events.append(
                    Event(
                        last_reshard + 60_000,
                        "put",
                        {"count": rng.randint(4, 20), "keys": 6, "style": "stale", "stream": stream},
                    )
                )
                events.append(Event(last_reshard + 61_000, "crash", {"phase": "before_commit"}))
                events.append(Event(last_reshard + 61_000, "faults", outage))
        if rng.random() < 0.06:
            down_for = rng.choice([60_000, 10 * 60_000, 3 * HOUR_MS, 30 * HOUR_MS])
            at = burst_at + rng.randint(1, 600) * 1000
            events.append(Event(at, "stop", {}))
            events.append(Event(at + down_for, "start", _restart_options(rng)))
        if rng.random() < 0.08:
            at = burst_at + rng.randint(0, 120) * 1000
            events.append(
                Event(
                    at,
                    "crash",
                    {"phase": rng.choice(["after_log", "mid_tasks", "before_commit", "before_commit"])},
                )
            )
            if rng.random() < 0.5:  # the restart meets a listing outage
                events.append(
                    Event(
                        at,
                        "faults",
                        {
                            "calls": ["ListShards"],
                            "rate": 1.0,
                            "for_ms": 600_000,
                            "code": "LimitExceededException",
                        },
                    )
                )
        if rng.random() < 0.04:
            calls = rng.choice(
                [["GetRecords"], ["GetShardIterator"], ["GetRecords", "GetShardIterator", "ListShards"]]
            )
            code = rng.choice(
                ["ProvisionedThroughputExceededException", "InternalFailure", "ExpiredIteratorException"]
            )
            events.append(
                Event(
                    burst_at,
                    "faults",
                    {
                        "calls": calls,
                        "rate": rng.choice([0.2, 0.5]),
                        "for_ms": rng.randint(10, 600) * 1000,
                        "code": code,
                    },
                )
            )
        if rng.random() < 0.03:
            events.append(Event(burst_at, "lose_executor", {"executor": rng.randrange(setup.executors)}))
        if rng.random() < 0.03:
            events.append(
                Event(
                    burst_at,
                    "sink",
                    {"rows": rng.randint(20, 400), "keys": rng.randint(1, 12), "reshard": rng.random() < 0.7},
                )
            )
        if rng.random() < 0.01:
            events.append(Event(burst_at, "efo_start", {}))
        t = burst_at + rng.choice([5, 30, 120, 600, 3600]) * 1000 + rng.randint(0, 4 * HOUR_MS)
    events.sort(key=lambda e: e.at_ms)
    return Schedule(setup, tuple(events))


def _restart_options(rng: random.Random) -> dict[str, Any]:
    """What a restart may change: the cluster's size and the batch's shape (the checkpoint goes on)."""
    out: dict[str, Any] = {}
    if rng.random() < 0.3:
        out["max_records"] = rng.choice([0, 5, 50])
    if rng.random() < 0.3:
        out["target_tasks"] = rng.choice([0, 1, 2, 4])
    if rng.random() < 0.3:
        out["executors"] = rng.randint(1, 3)
    return out
