"""CPU time of every process of a local Spark application, split by role, while something runs.

Why: a user pays for the whole pipeline, not for the decoder. In local mode one JVM plays driver and
executor, and PySpark starts Python processes of three kinds beside it: the executor's workers
(`pyspark.daemon pyspark.worker`) that run the reader's partitions, the driver-side workers of the
Python Data Source API (the streaming source runner that plans batches, and the short-lived
`pyspark.sql.worker.*` ones that look up, create and plan the source), and the Python process that
drives the query through Py4J (this one). Counting them all, split by role, shows where the CPU goes.

A sampler thread reads every process's own user+system time every `interval` seconds (children's
times are left out: PySpark's daemon reaps its workers, so counting reaped children too would count
them twice). A process that starts and ends between two samples is missed, and one that ends keeps
the time of its last sample; the meter reports how many processes it saw start and end, so a run in
which that matters shows it. The sampler's own time is taken out of this process's figure.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil

JVM, EXECUTOR_PYTHON, DRIVER_PYTHON = "JVM", "executor Python", "driver Python"
ROLES = (JVM, EXECUTOR_PYTHON, DRIVER_PYTHON)


def role(process: psutil.Process) -> str:
    if process.name() == "java":
        return JVM
    command = process.cmdline()
    return EXECUTOR_PYTHON if command and command[-1] == "pyspark.worker" else DRIVER_PYTHON


def spark_jvm() -> psutil.Process:
    """The local Spark JVM: the java process this Python process started through Py4J."""
    for child in psutil.Process().children():
        if child.name() == "java":
            return child
    raise RuntimeError("no Spark JVM among this process's children: start the SparkSession first")


@dataclass
class Usage:
    """CPU seconds per role between start and stop, with the processes that came and went."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ROLES, 0.0))
    started: int = 0
    ended: int = 0

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def _own_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


class ProcessMeter:
    """`with ProcessMeter() as meter: ...` then `meter.usage`: the CPU the Spark processes spent inside."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.me = psutil.Process()
        self.jvm = spark_jvm()
        self._base: dict[int, float] = {}  # seconds at start, for processes alive then
        self._last: dict[int, tuple[str, float]] = {}  # role and latest seconds of every process seen
        self._stop = threading.Event()
        self._sampler_seconds = 0.0
        self.usage = Usage()

    def _processes(self) -> list[psutil.Process]:
        return [self.me, self.jvm, *self.jvm.children(recursive=True)]

    def _sample(self) -> None:
        for process in self._processes():
            try:
                known = self._last.get(process.pid)
                self._last[process.pid] = (known[0] if known else role(process), _own_seconds(process))
            except psutil.Error:  # ended between listing and reading
                continue

    def _run(self) -> None:
        begin = time.thread_time()
        while not self._stop.wait(self.interval):
            self._sample()
        self._sampler_seconds = time.thread_time() - begin

    def __enter__(self) -> ProcessMeter:
        self._sample()
        self._base = {pid: seconds for pid, (_role, seconds) in self._last.items()}
        self._thread = threading.Thread(target=self._run, name="process-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        alive_before = set(self._base)
        self._sample()
        alive_now = {p.pid for p in self._processes()}
        usage = Usage(started=len(set(self._last) - alive_before), ended=len(set(self._last) - alive_now))
        for pid, (process_role, seconds) in self._last.items():
            spent = seconds - self._base.get(pid, 0.0)
            if pid == self.me.pid:
                spent -= self._sampler_seconds
            usage.seconds[process_role] += max(0.0, spent)
        self.usage = usage
