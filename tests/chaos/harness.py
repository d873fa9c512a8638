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
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import orjson

from pyspark_kinesis.cli.local_kinesis import LocalKinesis
from tests.chaos.plan import LABELS, MISPLACED, Plan, Result
from tests.chaos.processes import Producer, all_pids, everything_in, session_pids
from tests.driver import (
    TASK_FAULTS,
    committed,
    durable_offsets,
    in_flight,
    kill_in_window,
    output_rows,
    ran_batches,
    run_driver,
    start_driver,
    tip_positions,
)
from tests.helpers import merge, open_shards, split, wait_active
from tests.support.cluster import StandaloneCluster
from tests.support.fault_proxy import FaultProxy

__all__ = ["ChaosRun", "Plan", "Result"]

# A planned proxy fault kind that no call has drawn after this many calls of its family is given to the
# next call that draws none (`FaultProxy.pick_fault`): a rare kind (an efo run's few SubscribeToShard
# calls at 3%) is delivered, or the run fails as `undelivered`.
ENSURE_AFTER = 5


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
        self.trims: dict[str, int] = {}  # shard -> records below this sequence number aged out

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
        cfg: dict[str, Any] = {
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
            "chaos_shape": self.plan.shape,
        }
        if self.plan.async_ms is not None:  # Spark refuses foreachBatch under async progress tracking
            cfg |= {"sink": "foreach", "async_ms": self.plan.async_ms}
        if self.plan.age_out is not None:  # records age out: counted, and the query goes on
            cfg["options"]["failOnDataLoss"] = "false"
        return cfg

    def _executor_env(self) -> dict[str, str]:
        """A standalone cluster's executors are started by its workers: they get the environment the
        driver's local executors inherit (dummy credentials, the fault seam) through Spark's conf."""
        if self.cluster is None:
            return {}
        env = self._env() | {
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "000000000000"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "PYTHONPATH": str(TASK_FAULTS),  # (Spark adds its own entries to a Python worker's path)
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
        faults: dict[str, Callable[[], str | None]] = {
            "kill-driver-before-tasks": lambda: self._kill_driver(cfg, "before-tasks"),
            "kill-driver-mid-batch": lambda: self._kill_driver(cfg, "mid-batch"),
            "kill-driver-ahead": lambda: self._kill_ahead(cfg),
            "age-out": lambda: self._age_out(cfg, kin, proxy),
            "kill-executor": lambda: self._kill_executor(cfg),
            "kill-fanout-agent": lambda: self._kill_fanout_agent(cfg),
            "reshard": lambda: self._reshard(kin),
            # felt only by a running query (one that calls while the server is down)
            "restart-server": lambda: self._restart_server(producer, proxy) if self._ready(cfg) else None,
        }
        if kind not in faults:
            raise ValueError(kind)
        return faults[kind]()

    def _kill_driver(self, cfg: dict[str, Any], window: str) -> str | None:
        """SIGKILL the driver while a logged, uncommitted batch is in `window` ("before-tasks" or
        "mid-batch", see `tests.driver.kill_in_window`)."""
        if not self._ready(cfg):
            return None
        assert self.driver is not None
        hit = kill_in_window(self.driver, self.work / "cp", self.work / "meta", window)
        if hit is not None:
            self.driver = None
        return hit

    def _drain_options(self, cfg: dict[str, Any]) -> dict[str, str]:
        """Every drain runs with ten times the record budget, as an operator catching up after a stop
        would: a budget changed across a restart (the logged, uncommitted batch is still replayed with
        its logged end) while tasks still fail. At the run's budget the backlog of a short run takes
        some 70 batches of 3-5 s each under the proxy's delays (the smoke test brushed its timeout)."""
        return dict(cfg["options"], maxRecordsPerBatch=str(10 * self.plan.max_records_per_batch))

    def _drain_async(self, cfg: dict[str, Any], kin: Any, timeout_s: float = 600) -> None:
        """Spark refuses AvailableNow under async progress tracking, and switching it off on this
        checkpoint is not safe: drain with every offset durable (a processingTime run), stopped once the
        output holds everything the server still holds (or after two minutes without new rows: then the
        check reports what is missing). Executors' subscriptions still move while tasks fail."""
        stop = self.work / "drain.stop"
        drain = dict(
            cfg,
            options=self._drain_options(cfg),
            async_ms=0,
            until_idle_s=120,
            timeout_s=timeout_s,
            stop_file=str(stop),
        )
        wanted = {
            data
            for shard, seq, data in everything_in(kin, self.stream)
            if int(seq) >= self.trims.get(shard, 0)
        }
        process = start_driver(drain, self._env())
        deadline = time.monotonic() + timeout_s + 60
        try:
            while process.poll() is None and time.monotonic() < deadline:
                seen = {bytes(r["data"]).decode() for r in output_rows(self.work / "out")}
                if wanted <= seen:
                    stop.write_text("drained")
                    break
                time.sleep(2.0)
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError(f"the drain did not end within {timeout_s} s") from None
        if code != 0:
            log = Path(cfg["checkpoint"] + ".log").read_text(errors="replace")
            raise AssertionError(f"the drain's driver exited with {code}:\n{log[-3000:]}")

    def _kill_ahead(self, cfg: dict[str, Any], timeout_s: float = 60) -> str | None:
        """Asynchronous progress tracking: SIGKILL the driver while batches have run beyond the last
        offset Spark made durable, so the restart plans them again."""
        if not self._ready(cfg):
            return None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.driver is not None and self.driver.poll() is None:
            ran, durable = ran_batches(self.work / "out"), durable_offsets(self.work / "cp")
            if ran and max(ran) > max(durable, default=-1):
                os.killpg(self.driver.pid, signal.SIGKILL)
                self.driver.wait(timeout=30)
                self.driver = None
                return f"batch {max(ran)} ran, the offset log durable up to {max(durable, default=-1)}"
            time.sleep(0.02)
        return None

    def _age_out(self, cfg: dict[str, Any], kin: Any, proxy: FaultProxy) -> str | None:
        """Stop the query long enough for the head of a shard it reads to age out past retention: the
        fault proxy drops that shard's records up to a few past the last one the query delivered, so
        where it resumes is gone, and so are some records it never read (a loss it must report; the
        run reads with failOnDataLoss=false). The trim is always a record's sequence number, as the
        service's is: a shard whose records were all delivered (a closed parent) is not picked, since
        there a trim past its last record would be a position no server holds (kinesis-local refuses
        it, and silently moved positions would never reach the shard's end).

        The history stays one a real stream can have: a shard the query found at the tip at a position
        a restart may resume from (`tip_positions`) holds after it only records that arrived after that
        moment, seconds ago, which no retention ages out. Such a shard is picked only when no other
        can be, and then loses just what lies at or before that position (all delivered): its position
        is gone, nothing it has not read is, and the query must go on without loss (and may say
        nothing: `LossPolicy.aged_out`'s tip rule)."""
        if not self._ready(cfg):
            return None
        assert self.driver is not None and self.plan.age_out is not None
        os.killpg(self.driver.pid, signal.SIGKILL)
        self.driver.wait(timeout=30)
        self.driver = None
        delivered: dict[str, int] = {}
        for row in output_rows(self.work / "out"):
            delivered[row["shardId"]] = max(delivered.get(row["shardId"], 0), int(row["sequenceNumber"]))
        if not delivered:
            return None
        later: dict[str, list[int]] = {}
        held: list[tuple[str, str, str]] = []
        for _wait in range(50):  # bounded: the producer puts records on the open shards meanwhile
            later = {}
            held = everything_in(kin, self.stream)
            for shard, seq, _data in held:
                if shard in delivered and int(seq) > delivered[shard]:
                    later.setdefault(shard, []).append(int(seq))
            if later:
                break
            time.sleep(0.2)
        if not later:
            return None
        at_tip = tip_positions(self.work / "cp", self.work / "meta")
        lossy = sorted(shard for shard in later if shard not in at_tip)
        if lossy:
            shard = self.rng.choice(lossy)
            ahead = sorted(later[shard])
            unread = self.rng.randint(1, 6)
            below = ahead[min(unread, len(ahead) - 1)]
        else:  # every candidate was at the tip where it resumes: only its position can be gone
            shards = sorted(shard for shard in later if at_tip[shard] is not None)
            if not shards:
                return None
            shard = self.rng.choice(shards)
            ahead = sorted(later[shard])
            mine = sorted(int(seq) for s, seq, _data in held if s == shard)  # (read above: no second pass)
            below = next((seq for seq in mine if seq > int(at_tip[shard] or 0)), ahead[0])
        proxy.aged.mode = self.plan.age_out
        proxy.trim(shard, str(below))
        self.trims[shard] = max(below, self.trims.get(shard, 0))
        time.sleep(self.rng.uniform(2.0, 4.0))
        gone = sum(1 for seq in ahead if seq < below)
        return (
            f"{shard} aged out below {below} ({gone} records never delivered; answered {self.plan.age_out})"
        )

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
            victims = pick([entry for s in sessions for entry in session_pids(s)])
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
                for pid, cmd in all_pids()
                if "pyspark_kinesis.source.agent.process" in cmd and cmd.split()[-1] in owners
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
            producer = Producer(
                endpoint, self.stream, plan.rate, plan.misplace_every, seed=plan.seed * 31 + plan.index
            )
            with FaultProxy(
                endpoint,
                seed=plan.seed + plan.index,
                read_faults=plan.read_faults,
                call_faults=plan.call_faults,
                delay=plan.delay,
                subscribe_faults=plan.subscribe_faults,
                strict=True,
            ) as proxy:
                proxy.subscription_cut = plan.subscription_cut
                proxy.ensure_after = ENSURE_AFTER
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
                        self.result.faults[LABELS[kind]] += 1
                        self.result.hits.append(f"{kind}: {hit}")
                    self._ensure_driver(cfg)
                for _wait in range(100_000):
                    if time.monotonic() - begin >= plan.seconds:
                        break
                    self._ensure_driver(cfg)
                    time.sleep(0.1)
                producer.done.set()
                producer.join(timeout=30)
                # user records a reader must drop where their aggregate landed (none: `undelivered`)
                self.result.faults[MISPLACED] += producer.misplaced
                if self.driver is not None:  # the run's end is a crash too (not a scheduled fault)
                    os.killpg(self.driver.pid, signal.SIGKILL)
                    self.driver.wait(timeout=30)
                    self.driver = None
                drain = dict(
                    cfg, options=self._drain_options(cfg), trigger="availableNow", timeout_s=600
                )  # partial too: it must still end
                if self.plan.async_ms is None:
                    run_driver(drain, self._env(), timeout_s=660)
                else:
                    self._drain_async(cfg, kin)
                for kind, count in proxy.injected.items():
                    self.result.faults[f"proxy {kind}"] += count
                if proxy.rules is not None:
                    self.result.violations.update(proxy.rules.violations)
                    self.result.collisions.update(proxy.rules.collisions)
                    for line in proxy.rules.details:
                        print(f"chaos run {self.plan.index}: {line}", file=sys.stderr)
            self._check(producer.acknowledged, kin)
        except Exception as exc:  # reported in the table: a run that cannot finish is a failed run
            self.result.error = f"{exc.__class__.__name__}: {exc}"[:300]
            print(f"chaos run {self.plan.index}: {exc.__class__.__name__}: {exc}", file=sys.stderr)
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
        result = self.result
        result.other_rows = sum(1 for r in rows if r["streamName"] == "rate")  # the two-source shape's
        rows = [r for r in rows if r["streamName"] != "rate"]
        seen = Counter(bytes(r["data"]).decode() for r in rows)
        held = everything_in(kin, self.stream)  # (misplaced copies in KPL aggregates left out)
        truth = Counter(data for _shard, _seq, data in held)
        result.put, result.read = len(acknowledged), sum(seen.values())
        result.server_lost = len(set(acknowledged) - set(truth)) + sum(c - 1 for c in truth.values() if c > 1)
        # Records a stop aged out before the query delivered them are the run's loss, not the connector's
        # (which must report it: the driver's reports, from the batch-end records, are counted; an
        # executor's own warning is in the driver's log only on local[N]).
        aged = {
            data
            for shard, seq, data in held
            if shard in self.trims and int(seq) < self.trims[shard] and not seen[data]
        }
        result.aged_out = len(aged)
        log = Path(str(self.work / "cp") + ".log")
        text = log.read_text(errors="replace") if log.exists() else ""
        result.loss_warnings = text.count("Data loss in batch ")
        # Every shard whose records aged out before they were delivered must be named in a report of
        # the driver's ("Data loss in batch N, Kinesis stream S, shard X: ..."): a silent drop fails.
        reported = set(re.findall(r"Data loss in batch \d+, Kinesis stream \S+, shard ([\w-]+):", text))
        result.unreported = sorted({shard for shard, seq, data in held if data in aged} - reported)
        result.lost = sum(max(0, count - seen[p]) for p, count in truth.items() if p not in aged)
        if result.lost:  # which ones, for the run's post-mortem (kept with --keep)
            (self.work / "lost.txt").write_text(
                "".join(
                    f"{shard} {seq} {data}\n"
                    for shard, seq, data in held
                    if not seen[data] and data not in aged
                )
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
            if child and shard.get("ParentShardId"):
                result.child_rows += len(child)
            for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
                if child and parent in batches and min(child) <= max(batches[parent]):
                    result.lineage_violations += 1
