"""One chaos run: a streaming query under injected faults, checked for exactly-once and per-key order.

A run starts a local Kinesis (with persistence, so it can be restarted), a counting fault proxy in
front of it for the connector, a producer putting numbered records straight into the server, and
the query in its own driver process (tests/integration/driver_app.py: foreachBatch into per-batch
Parquet folders, overwritten on replay, so the sink is idempotent). While records flow, a seeded
schedule picks when faults are due; each fires only once the query is in the state it targets (a
driver that has committed a batch since it started; a batch logged and not committed, before or
after its tasks recorded their ends) and reports what it hit: driver SIGKILLs, executor SIGKILLs
(local-cluster mode), reshards, and a server restart (delivered only if calls were refused while it
was down). A fault that finds no such state in time is a miss, and a run with a miss fails; the
proxy throttles, fails, delays, cuts and expires calls at the run's rates; tasks fail on their
first attempt; speculation may be on; the foreachBatch may use none of some batches and only
partition 0 of others (so their other tasks never run). Then the producer stops, a last AvailableNow run drains the
stream, and the output is compared with what the producer was told was written.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import orjson

from pyspark_kinesis.tools.local import LocalKinesis
from pyspark_kinesis.tools.local.cluster import StandaloneCluster
from pyspark_kinesis.tools.local.fault_proxy import FaultProxy
from tests.driver import committed, in_flight, kill_in_window, output_rows, run_driver, start_driver
from tests.helpers import merge, open_shards, split, wait_active

KEYS = 12
_LABELS = {  # scheduled fault kind -> the column it is counted in once delivered
    "kill-driver-before-tasks": "driver SIGKILL before tasks",
    "kill-driver-mid-batch": "driver SIGKILL mid-batch",
    "kill-executor": "executor SIGKILL",
    "reshard": "reshard",
    "restart-server": "server restart",
    "kill-fanout-agent": "fan-out agent SIGKILL",
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
        return Plan(
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
            partial=short or rng.random() < 0.5,
            consumer="efo" if efo else "polling",
            subscribe_faults={
                "in_use": rng.uniform(0.05, 0.15),
                "limit": rng.uniform(0.05, 0.1),
                "internal": 0.03,
            }
            if efo
            else {},
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
    server_lost: int = 0  # acknowledged records the server does not hold once (not the connector's doing)
    unplanned_exits: int = 0  # driver processes that ended by themselves with an error
    hits: list[str] = field(default_factory=list)  # what each delivered scheduled fault hit
    missed: list[str] = field(default_factory=list)  # scheduled faults that found no state to hit
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
            or self.missed
            or self.error
        )


class Producer(threading.Thread):
    """Puts records 'c-<n>' with keys k<n % KEYS> at a steady rate; keeps what Kinesis acknowledged."""

    def __init__(self, endpoint: str, stream: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        self.stream, self.rate = stream, rate
        self.acknowledged: list[str] = []
        self.running = threading.Event()
        self.running.set()
        self.done = threading.Event()
        self.next = 0

    def run(self) -> None:
        chunk = max(1, self.rate // 5)
        for _tick in range(1_000_000):  # bounded; ended by `done`
            if self.done.is_set():
                return
            if not self.running.is_set():
                time.sleep(0.05)
                continue
            numbers = range(self.next, self.next + chunk)
            records = [{"Data": f"c-{n}".encode(), "PartitionKey": f"k{n % KEYS}"} for n in numbers]
            try:
                response = self.client.put_records(StreamName=self.stream, Records=records)
            except Exception:
                time.sleep(0.2)
                continue
            if response.get("FailedRecordCount"):
                # Only a prefix is safe to count: a later record of a key after a failed one would be out
                # of order. The local servers never reject, so this is a guard, not a path.
                raise RuntimeError("the local server rejected records")
            self.acknowledged += [f"c-{n}" for n in numbers]
            self.next += chunk
            time.sleep(0.2)


def _session_pids(session: int) -> list[tuple[int, str]]:
    """(pid, command line) of live processes in a session (the driver's, started with its own)."""
    return [(pid, command) for pid, command, sid in _processes() if sid == session]


def _all_pids() -> list[tuple[int, str]]:
    return [(pid, command) for pid, command, _sid in _processes()]


def _processes() -> list[tuple[int, str, int]]:
    """(pid, command line, session) of live processes."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            sid = int(stat.rsplit(")", 1)[1].split()[3])  # after the name: state ppid pgrp session
            command = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry), command.strip(), sid))
    return out


class ChaosRun:
    def __init__(self, plan: Plan, work: Path) -> None:
        self.plan, self.work = plan, work
        self.rng = random.Random(plan.seed * 7919 + plan.index)
        self.result = Result(plan)
        self.server: LocalKinesis | None = None
        self.driver: subprocess.Popen[bytes] | None = None
        self.commits_at_start = 0  # batches committed when the running driver started
        self.cluster: StandaloneCluster | None = None  # the runs whose master is "standalone"
        self.stream = f"chaos-{plan.index}-{int(time.time())}"

    # -- pieces --------------------------------------------------------------------------------
    def _start_server(self, port: int | None = None) -> LocalKinesis:
        server = LocalKinesis(self.plan.kind, port=port, persist_dir=str(self.work / "kinesis-data"))
        return server.start()

    def _config(self, proxy: FaultProxy) -> dict[str, Any]:
        (self.work / "events").mkdir(exist_ok=True)
        conf = {
            "spark.task.maxFailures": "8",  # local-cluster mode (local mode takes it from the master)
            "spark.eventLog.enabled": "true",  # shows which task attempts were speculative
            "spark.eventLog.dir": str(self.work / "events"),
            "spark.eventLog.compress": "false",
        }
        if self.plan.speculation:
            conf |= {
                "spark.speculation": "true",
                "spark.speculation.interval": "100ms",
                "spark.speculation.quantile": "0.1",
                "spark.speculation.multiplier": "1.1",
                "spark.speculation.minTaskRuntime": "10ms",
            }
        return {
            "options": {
                "streamName": self.stream,
                "region": "us-east-1",
                "endpointUrl": proxy.endpoint,
                "startingPosition": "TRIM_HORIZON",
                "metadataPath": str(self.work / "meta"),
                "maxRecordsPerBatch": str(self.plan.max_records_per_batch),
                "shardDiscoveryIntervalMs": "1000",
                "maxFetchTimeMs": "3000",
                "idlePollIntervalMs": "200",
                "consumerType": self.plan.consumer,
            },
            "checkpoint": str(self.work / "cp"),
            "out": str(self.work / "out"),
            "master": self.cluster.url if self.cluster is not None else self.plan.master,
            "conf": conf | self._executor_env(),
            "interval": "300 milliseconds",
            "timeout_s": self.plan.seconds * 4 + 120,
            "partial": self.plan.partial,
        }

    def _executor_env(self) -> dict[str, str]:
        """A standalone cluster's executors are started by its workers: they get the environment the
        driver's local executors inherit (dummy credentials, the fault seam) through Spark's conf."""
        if self.cluster is None:
            return {}
        env = self._env() | {
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "000000000000"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        return {f"spark.executorEnv.{k}": v for k, v in env.items()} | {"spark.cores.max": "4"}

    def _env(self) -> dict[str, str]:
        env = {"PYSPARK_KINESIS_FAULT_LOG": str(self.work / "task-faults.log")}
        if self.plan.task_fault:
            env["PYSPARK_KINESIS_FAULT"] = self.plan.task_fault
        return env

    def _ensure_driver(self, cfg: dict[str, Any]) -> None:
        if self.driver is not None and self.driver.poll() is not None:
            if self.driver.returncode != 0:
                self.result.unplanned_exits += 1
            self.driver = None
        if self.driver is None:
            self.driver = start_driver(cfg, self._env())
            self.commits_at_start = committed(self.work / "cp")

    def _ready(self, cfg: dict[str, Any], timeout_s: float = 120) -> bool:
        """Wait until the running driver has committed a batch since it started: a fault aimed at a
        running query must not land in the driver's JVM start-up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._ensure_driver(cfg)
            if committed(self.work / "cp") > self.commits_at_start:
                return True
            time.sleep(0.1)
        return False

    def _fire(
        self, kind: str, cfg: dict[str, Any], kin: Any, producer: Producer, proxy: FaultProxy
    ) -> str | None:
        """Deliver one scheduled fault once the query is in the state it targets; what it hit, or None."""
        if kind.startswith("kill-driver"):
            if not self._ready(cfg):
                return None
            window = "mid-batch" if kind.endswith("mid-batch") else "before-tasks"
            assert self.driver is not None
            hit = kill_in_window(self.driver, self.work / "cp", self.work / "meta", window)
            if hit is not None:
                self.driver = None
            return hit
        if kind == "kill-executor":
            return self._kill_executor(cfg)
        if kind == "kill-fanout-agent":
            return self._kill_fanout_agent(cfg)
        if kind == "reshard":
            return self._reshard(kin)
        if kind == "restart-server":  # felt only by a running query (one that calls while it is down)
            return self._restart_server(producer, proxy) if self._ready(cfg) else None
        raise ValueError(kind)

    def _kill_in_flight(
        self, cfg: dict[str, Any], label: str, pick: Callable[[list[tuple[int, str]]], list[int]]
    ) -> str | None:
        """SIGKILL one of the processes `pick` chooses (given the run's processes, as (pid, command
        line)) while a batch is in flight."""
        if not self._ready(cfg):
            return None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.driver is not None:
            batch = in_flight(self.work / "cp")
            sessions = [self.driver.pid]
            if self.cluster is not None:  # a standalone cluster's executors belong to its workers
                sessions = [w.pid for w in self.cluster.worker_processes if w is not None]
            victims = pick([entry for s in sessions for entry in _session_pids(s)])
            if batch is not None and victims:
                victim = self.rng.choice(victims)
                os.kill(victim, signal.SIGKILL)
                return f"{label} {victim} while batch {batch} was in flight"
            time.sleep(0.02)
        return None

    def _kill_executor(self, cfg: dict[str, Any]) -> str | None:
        """SIGKILL one executor JVM while a batch is in flight."""
        return self._kill_in_flight(
            cfg, "executor", lambda ours: [p for p, cmd in ours if "CoarseGrainedExecutorBackend" in cmd]
        )

    def _kill_fanout_agent(self, cfg: dict[str, Any]) -> str | None:
        """SIGKILL a fan-out agent of this run's executors while a batch is in flight: its
        subscriptions and the events it held are gone, and the reads must subscribe again from their
        own positions. An agent is the run's when its owner (the Python daemon, its last argument) is."""

        def agents(ours: list[tuple[int, str]]) -> list[int]:
            owners = {str(p) for p, _cmd in ours}
            return [
                pid
                for pid, cmd in _all_pids()
                if "pyspark_kinesis.source.fanout_agent" in cmd and cmd.split()[-1] in owners
            ]

        return self._kill_in_flight(cfg, "fan-out agent", agents)

    def _reshard(self, kin: Any) -> str:
        shards = open_shards(kin, self.stream)
        choice = self.rng.random()
        target = max(1, min(8, self.rng.choice([len(shards) + 1, len(shards) * 2 - 1, len(shards) - 1])))
        target = max(target, (len(shards) + 1) // 2)
        if self.plan.kind == "kinesis-local" and choice < 0.34 and target != len(shards):
            kin.update_shard_count(
                StreamName=self.stream, TargetShardCount=target, ScalingType="UNIFORM_SCALING"
            )
            wait_active(kin, self.stream)
            return f"UpdateShardCount {len(shards)} -> {target}"
        if len(shards) > 1 and choice < 0.67:
            i = self.rng.randrange(len(shards) - 1)
            merge(kin, self.stream, shards[i], shards[i + 1])
            return f"merge {shards[i]['ShardId']} + {shards[i + 1]['ShardId']}"
        victim = self.rng.choice(shards)
        split(kin, self.stream, victim)
        return f"split {victim['ShardId']}"

    def _restart_server(self, producer: Producer, proxy: FaultProxy) -> str | None:
        """Stop the server (data kept) and start it again; delivered when the connector felt it: calls
        answered 503 by the proxy while the server was down."""
        assert self.server is not None
        producer.running.clear()
        time.sleep(3)  # kinesis-local snapshots every second: let the last records reach the disk
        port = self.server.port
        snapshot = self._complete_snapshot()
        refused_before = proxy.injected.get("server-down", 0)
        self.server.stop()
        if snapshot is not None:
            self._restore_if_cut(snapshot)
        # Down for a while, and until the connector has called and been refused (a query in a long batch
        # may make no call for seconds): bounded, so a query that never calls makes the fault a miss.
        time.sleep(self.rng.uniform(1.5, 3.0))
        deadline = time.monotonic() + 20
        while proxy.injected.get("server-down", 0) == refused_before and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = proxy.injected.get("server-down", 0) - refused_before
        self.server = self._start_server(port)
        producer.running.set()
        return f"{refused} calls refused while down" if refused else None

    def _snapshot_file(self) -> Path:
        return self.work / "kinesis-data" / "kinesis-data.json"

    def _complete_snapshot(self) -> bytes | None:
        """kinesis-local rewrites its data file in place every second, so a stop can land mid-write and
        leave a cut file it then refuses to load (seen once in 20 runs: the restart died with
        NoSuchElementException). With the producer paused nothing changes any more, so a complete copy
        taken now holds everything the server holds."""
        if self.plan.kind != "kinesis-local":
            return None
        for _try in range(50):  # bounded: 5 s
            try:
                data = self._snapshot_file().read_bytes()
                orjson.loads(data)
                return data
            except (OSError, orjson.JSONDecodeError):
                time.sleep(0.1)
        return None

    def _restore_if_cut(self, snapshot: bytes) -> None:
        try:
            orjson.loads(self._snapshot_file().read_bytes())
        except (OSError, orjson.JSONDecodeError):
            self._snapshot_file().write_bytes(snapshot)
            print(
                f"{self.work.name}: kinesis-local's data file was cut by its stop; restored a complete copy"
            )

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> Result:
        started = time.monotonic()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        plan = self.plan
        try:
            if plan.master == "standalone":
                self.cluster = StandaloneCluster(workers=2, cores=2).start()
            self.server = self._start_server()
            endpoint = self.server.endpoint
            kin = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
            kin.create_stream(StreamName=self.stream, ShardCount=plan.shards)
            wait_active(kin, self.stream)
            producer = Producer(endpoint, self.stream, plan.rate)
            with FaultProxy(
                endpoint,
                seed=plan.seed + plan.index,
                read_faults=plan.read_faults,
                call_faults=plan.call_faults,
                delay=plan.delay,
                subscribe_faults=plan.subscribe_faults,
            ) as proxy:
                cfg = self._config(proxy)
                producer.start()
                self._ensure_driver(cfg)
                begin = time.monotonic()
                for at, kind in plan.events:
                    for _wait in range(100_000):  # bounded: the schedule ends within the run's length
                        if time.monotonic() - begin >= at:
                            break
                        self._ensure_driver(cfg)
                        time.sleep(0.1)
                    hit = self._fire(kind, cfg, kin, producer, proxy)
                    if hit is None:
                        self.result.missed.append(kind)
                    else:
                        self.result.faults[_LABELS[kind]] += 1
                        self.result.hits.append(f"{kind}: {hit}")
                    self._ensure_driver(cfg)
                for _wait in range(100_000):
                    if time.monotonic() - begin >= plan.seconds:
                        break
                    self._ensure_driver(cfg)
                    time.sleep(0.1)
                producer.done.set()
                producer.join(timeout=30)
                if self.driver is not None:  # the run's end is a crash too (not a scheduled fault)
                    os.killpg(self.driver.pid, signal.SIGKILL)
                    self.driver.wait(timeout=30)
                    self.driver = None
                drain = dict(cfg, trigger="availableNow", timeout_s=600)  # partial too: it must still end
                run_driver(drain, self._env(), timeout_s=660)
                for kind, count in proxy.injected.items():
                    self.result.faults[f"proxy {kind}"] += count
            self._check(producer.acknowledged, kin)
        except Exception as exc:  # reported in the table: a run that cannot finish is a failed run
            self.result.error = f"{exc.__class__.__name__}: {exc}"[:300]
        finally:
            if self.driver is not None and self.driver.poll() is None:
                os.killpg(self.driver.pid, signal.SIGKILL)
            if self.server is not None:
                self.server.stop()
            if self.cluster is not None:
                self.cluster.stop()
        log = self.work / "task-faults.log"
        if log.exists():
            self.result.faults["task failure"] += len(log.read_text().splitlines())
        speculative = sum(
            f.read_text(errors="replace").count('"Speculative":true')
            for f in (self.work / "events").rglob("*")
            if f.is_file()
        )
        if speculative:  # from Spark's event log: speculative task attempts that started
            self.result.faults["speculative attempt"] += speculative
        partial_log = self.work / "cp.partial.log"
        if partial_log.exists():  # batches (replays counted once) the foreachBatch used only part of
            used = {line for line in partial_log.read_text().splitlines() if line}
            self.result.faults["partial batch"] += len(used)
        self.result.seconds = time.monotonic() - started
        return self.result

    def _check(self, acknowledged: list[str], kin: Any) -> None:
        """The connector must deliver exactly what the server holds, each copy once, in per-key order;
        and the server must hold exactly what the producer was told it wrote."""
        rows = output_rows(self.work / "out")
        seen = Counter(bytes(r["data"]).decode() for r in rows)
        held = _everything_in(kin, self.stream)
        truth = Counter(data for _shard, _seq, data in held)
        result = self.result
        result.put, result.read = len(acknowledged), sum(seen.values())
        result.server_lost = len(set(acknowledged) - set(truth)) + sum(c - 1 for c in truth.values() if c > 1)
        result.lost = sum(max(0, count - seen[p]) for p, count in truth.items())
        if result.lost:  # which ones, for the run's post-mortem (kept with --keep)
            (self.work / "lost.txt").write_text(
                "".join(f"{shard} {seq} {data}\n" for shard, seq, data in held if not seen[data])
            )
        result.duplicated = sum(max(0, count - truth[p]) for p, count in seen.items() if p in truth)
        result.extra = sum(count for p, count in seen.items() if p not in truth)
        last: dict[str, int] = {}
        for row in rows:
            key, number = row["partitionKey"], int(bytes(row["data"]).decode().split("-")[1])
            if key in last and number <= last[key]:
                result.order_violations += 1
            last[key] = max(number, last.get(key, -1))
        # Order rule 2, per batch: a child shard's rows come in batches after every batch holding rows
        # of its parents.
        batches: dict[str, list[int]] = {}
        for row in rows:
            batches.setdefault(row["shardId"], []).append(row["batch"])
        for shard in kin.list_shards(StreamName=self.stream)["Shards"]:
            child = batches.get(shard["ShardId"])
            for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
                if child and parent in batches and min(child) <= max(batches[parent]):
                    result.lineage_violations += 1


def _everything_in(kin: Any, stream: str) -> list[tuple[str, str, str]]:
    """Every record the server holds in the stream (closed shards included), as (shard, sequence
    number, data): the ground truth."""
    out = []
    shards = kin.list_shards(StreamName=stream)["Shards"]
    for shard in shards:
        iterator = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _call in range(10_000):
            response = kin.get_records(ShardIterator=iterator, Limit=10_000)
            out += [(shard["ShardId"], r["SequenceNumber"], r["Data"].decode()) for r in response["Records"]]
            iterator = response.get("NextShardIterator")
            if iterator is None or (not response["Records"] and response.get("MillisBehindLatest", 0) == 0):
                break
    return out
