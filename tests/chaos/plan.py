"""What one chaos run does (`Plan`, drawn from a seed so that a failing run can be replayed) and what it
found (`Result`)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

KEYS = 12
# User records the producer writes where a reader must drop them (a KPL aggregate with a stale shard
# map): counted apart from the faults aimed at the connector, since there are thousands of them.
MISPLACED = "KPL misplaced record"
LABELS = {  # scheduled fault kind -> the column it is counted in once delivered
    "kill-driver-before-tasks": "driver SIGKILL before tasks",
    "kill-driver-mid-batch": "driver SIGKILL mid-batch",
    "kill-executor": "executor SIGKILL",
    "reshard": "reshard",
    "restart-server": "server restart",
    "kill-fanout-agent": "fan-out agent SIGKILL",
    "kill-driver-ahead": "driver SIGKILL ahead of the durable log",
    "age-out": "stop past retention",
}


@dataclass
class Plan:
    """What one run does; drawn from a seed so a failing run can be replayed."""

    index: int
    seed: int
    kind: str  # kinesis-local | kinesalite
    master: str
    seconds: float
    rate: int  # records put per second
    shards: int
    speculation: bool
    task_fault: str | None  # before-record | after-record | None
    read_faults: dict[str, float]
    call_faults: dict[str, float]
    delay: tuple[float, float]
    events: list[tuple[float, str]]  # (seconds after start, kind)
    max_records_per_batch: int
    partial: bool = False  # a foreachBatch that uses none of some batches and partition 0 of others
    consumer: str = "polling"  # or "efo": enhanced fan-out (kinesis-local runs only)
    subscribe_faults: dict[str, float] = field(default_factory=dict)
    # Enhanced fan-out runs: every subscription ended by the proxy after n events, ("end", n) cleanly as
    # Kinesis does every 5 minutes, or ("reset", n) with a TCP reset in the middle of an event.
    subscription_cut: tuple[str, int] | None = None
    # Spark's asynchronous progress tracking with this checkpoint interval (None: off); such a run writes
    # through a foreach sink (Spark refuses foreachBatch there) and drains with a processingTime run.
    async_ms: int | None = None
    # A stop during which the head of a shard ages out past retention, answered "silent" or "error"
    # (see the fault proxy's `aged_out`); the run reads with failOnDataLoss=false.
    age_out: str | None = None
    # The query's shape (tests/integration/driver_app.py): "plain" (the source's rows), "stateful" (a
    # watermark and a Python stateful operator that passes every row through: no-data batches, offsets
    # committed unchanged) or "two-source" (a union with Spark's rate-micro-batch source: batches only
    # the other source has data for).
    shape: str = "plain"
    # Every nth chunk the producer puts is a KPL aggregate put with a stale shard map (a random explicit
    # hash key), its misplaced user records re-sent to their own shards (processes.Producer); 0: none.
    misplace_every: int = 0

    def planned(self) -> set[str]:
        """Every fault kind this run is meant to deliver, as the table counts it: the scheduled events
        (`LABELS`), each proxy fault with a rate, the subscription cut, task failures, speculation,
        partial batches and misplaced KPL records. A kind planned and never delivered fails the run
        (`Result.undelivered`): a table that shows no column for it would otherwise read as tested."""
        kinds = {LABELS[kind] for _at, kind in self.events}
        kinds |= {f"proxy {kind}" for kind, rate in self.read_faults.items() if rate > 0}
        kinds |= {f"proxy {kind}" for kind, rate in self.call_faults.items() if rate > 0}
        kinds |= {f"proxy subscribe {kind}" for kind, rate in self.subscribe_faults.items() if rate > 0}
        if self.delay[0] > 0:
            kinds.add("proxy delay")
        if self.subscription_cut is not None:
            kinds.add(f"proxy subscription {'ended' if self.subscription_cut[0] == 'end' else 'reset'}")
        if self.task_fault:
            kinds.add("task failure")
        if self.speculation:
            kinds.add("speculative attempt")
        if self.partial:
            kinds.add("partial batch")
        if self.misplace_every:
            kinds.add(MISPLACED)
        return kinds

    @staticmethod
    def draw(index: int, seed: int, seconds: float, short: bool = False) -> Plan:
        rng = random.Random(seed * 1000 + index)
        kind = "kinesis-local" if index % 2 == 0 else "kinesalite"
        efo = not short and index % 4 == 0  # every other kinesis-local run reads by enhanced fan-out
        cluster = not short and index % 3 == 2  # local-cluster: executors in their own JVMs
        standalone = not short and index % 3 == 1  # a standalone cluster, workers on two loopback hosts
        events: list[tuple[float, str]] = [
            (rng.uniform(0.15, 0.35) * seconds, "kill-driver-before-tasks"),
            (rng.uniform(0.55, 0.75) * seconds, "kill-driver-mid-batch"),
        ]
        events += [
            (rng.uniform(0.1, 0.9) * seconds, "reshard") for _ in range(1 if short else rng.randint(2, 3))
        ]
        if not short and index % 4 != 2:
            events.append((rng.uniform(0.4, 0.6) * seconds, "restart-server"))
        if cluster or standalone:
            events += [(rng.uniform(0.2, 0.8) * seconds, "kill-executor") for _ in range(2)]
        if efo:  # the executors' fan-out agents hold the subscriptions: lose one mid-batch
            events.append((rng.uniform(0.3, 0.7) * seconds, "kill-fanout-agent"))
        plan = Plan(
            index=index,
            seed=seed,
            kind="kinesalite" if short else kind,
            master="local-cluster[2,1,1024]" if cluster else "standalone" if standalone else "local[2,8]",
            seconds=seconds,
            rate=40 if kind == "kinesalite" or short else 25,
            shards=rng.randint(2, 4),
            # Spark speculates only in cluster modes and only onto another host: on the standalone runs.
            speculation=standalone,
            task_fault=rng.choice([None, "before-record", "after-record"]) if not short else "after-record",
            read_faults={
                "throttle": rng.uniform(0.05, 0.15),
                "internal": rng.uniform(0.02, 0.05),
                "unavailable": rng.uniform(0.02, 0.05),
                "expired": rng.uniform(0.02, 0.05),
                "reset": rng.uniform(0.01, 0.03),
            },
            call_faults={"limit": rng.uniform(0.05, 0.15), "internal": rng.uniform(0.02, 0.05)},
            delay=(0.05, 0.8),
            events=sorted(events),
            max_records_per_batch=rng.choice([50, 150, 400]),
            # (Not in the stateful shape: Spark fails a stateful query whose foreachBatch leaves some of
            # the batch's partitions unrun, for any source: its state stores' commit validation.)
            partial=(short or rng.random() < 0.5) and (short or index % 8 not in (1, 5)),
            consumer="efo" if efo else "polling",
            shape="plain"
            if short
            else {1: "stateful", 5: "stateful", 2: "two-source", 6: "two-source"}.get(index % 8, "plain"),
            subscribe_faults={
                "in_use": rng.uniform(0.05, 0.15),
                "limit": rng.uniform(0.05, 0.1),
                "internal": 0.03,
            }
            if efo
            else {},
            # (its own generator: the other draws, and so every other run's schedule, stay as they were)
            subscription_cut=_subscription_cut(random.Random(seed * 7919 + index)) if efo else None,
            misplace_every=random.Random(seed * 104_729 + index).choice([3, 4, 6]),
        )
        return plan if short or index % 8 not in (0, 3) else plan.in_production(rng)

    def in_production(self, rng: random.Random) -> Plan:
        """One enhanced fan-out run and one kinesalite run in every eight run as production does:
        asynchronous progress tracking (the driver killed while batches run ahead of the durable offset
        log, instead of the windows a synchronous log shows) and a stop during which a shard's head ages
        out. Drawn after everything else, so the other runs keep their schedules."""
        events = [(at, kind) for at, kind in self.events if not kind.startswith("kill-driver")]
        events += [(rng.uniform(0.15, 0.35) * self.seconds, "kill-driver-ahead")]
        events += [(rng.uniform(0.45, 0.7) * self.seconds, "age-out")]
        return replace(
            self,
            events=sorted(events),
            partial=False,
            shape="plain",  # (Spark refuses stateful operators under asynchronous progress tracking)
            # (batches take seconds, under the strict proxy's quotas polling's too: an interval shorter
            # than a batch makes every offset durable before the batch's output, and a driver kill
            # never finds batches ahead of it; one run at 1000 ms missed it)
            async_ms=rng.choice([5000, 8000]) if self.consumer != "efo" else rng.choice([10_000, 15_000]),
            age_out="silent" if self.index % 16 < 8 else "error",
        )


@dataclass
class Result:
    plan: Plan
    faults: Counter[str] = field(default_factory=Counter)
    put: int = 0
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    extra: int = 0
    order_violations: int = 0
    lineage_violations: int = 0  # a child shard's rows in a batch not after every batch of its parents'
    child_rows: int = 0  # rows the query read from shards a reshard made (a reshard that changed nothing: 0)
    server_lost: int = 0  # acknowledged records the server does not hold once (not the connector's doing)
    aged_out: int = 0  # records a stop aged out before the query delivered them (expected, reported)
    loss_warnings: int = 0  # the driver's data-loss reports (failOnDataLoss=false), any master
    unreported: list[str] = field(default_factory=list)  # shards that lost records no driver report named
    other_rows: int = 0  # rows of the query's other source (the two-source shape): none means it never ran
    unplanned_exits: int = 0  # driver processes that ended by themselves with an error
    hits: list[str] = field(default_factory=list)  # what each delivered scheduled fault hit
    missed: list[str] = field(default_factory=list)  # scheduled faults that found no state to hit
    # The service's quotas and rules the connector broke, by rule (the proxy's strict mode: throttles
    # and refusals Kinesis would have answered). Any fails the run: the connector must keep them.
    violations: Counter[str] = field(default_factory=Counter)
    # SubscribeToShard refusals of one process's call just after another's (service_rules.collisions):
    # the service arbitrates them and the reader retries; shown, not failing the run.
    collisions: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.extra
            or self.order_violations
            or self.lineage_violations
            or self.server_lost
            or self.unplanned_exits
            or self.unreported
            or (self.plan.shape == "two-source" and not self.other_rows)
            or self.missed
            or self.undelivered
            or self.violations
            or self.error
        )

    @property
    def undelivered(self) -> list[str]:
        """Fault kinds the plan meant to deliver that never were (scheduled events are in `missed`)."""
        return sorted(kind for kind in self.plan.planned() if not self.faults.get(kind))

    @property
    def aimed(self) -> int:
        """Faults aimed at the system (everything but the producer's misplaced user records)."""
        return sum(n for kind, n in self.faults.items() if kind != MISPLACED)

    def verdict(self) -> str:
        if self.ok:
            return "ok"
        why = [self.error] if self.error else []
        counts = {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "invented": self.extra,
            "out of key order": self.order_violations,
            "child before parent": self.lineage_violations,
            "lost by the server": self.server_lost,
            "driver exits": self.unplanned_exits,
        }
        why += [f"{n} {what}" for what, n in counts.items() if n]
        why += [f"losses no report named on {', '.join(self.unreported)}"] if self.unreported else []
        if self.plan.shape == "two-source" and not self.other_rows:
            why.append("the other source never ran")
        why += [f"missed {m}" for m in self.missed]
        why += [f"never delivered: {k}" for k in self.undelivered]
        why += [f"{rule}: {n}" for rule, n in sorted(self.violations.items())]
        return "FAILED " + "; ".join(why).replace("|", "/")


def _subscription_cut(rng: random.Random) -> tuple[str, int]:
    """A cut after 3-8 events (kinesis-local pushes one a second): a local-mode run's executor, and with
    it the fan-out agent holding the subscriptions, lives in the driver's JVM and dies with every driver
    kill, so a subscription there lives seconds; at 15 events none reached the cut in the chaos run of
    2026-11-29 (seed 9, run 0), and a planned fault that never fires fails its run."""
    return rng.choice(["end", "reset"]), rng.randint(3, 8)
