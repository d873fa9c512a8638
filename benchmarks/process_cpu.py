"""CPU time of every process of a local Spark application, split by role, while something runs.

Why: a user pays for the whole pipeline, not for the decoder. In local mode one JVM plays driver and
executor, and PySpark starts Python processes of three kinds beside it: the executor's workers
(`pyspark.daemon pyspark.worker`) that run the reader's partitions, the driver-side workers of the
Python Data Source API (the streaming source runner that plans batches, and the short-lived
`pyspark.sql.worker.*` ones that look up, create and plan the source), and the Python process that
drives the query through Py4J (this one). Counting them all, split by role, shows where the CPU goes.

Counted exactly, not sampled: a process that starts and ends between two samples (the short-lived
`pyspark.sql.worker.*` ones, a worker per task when workers are not reused) would be missed, and one
that ends would lose its last slice, which flatters the connector's fixed cost. So the meter reads, at
the start and at the end only, every live process's own user+system time *and* the time of the children
it has reaped: a process that ended was reaped by its parent (PySpark's daemon reaps its workers, the
JVM the Python processes it starts), and its whole time is then in its parent's children times. The
difference between the two readings is the exact CPU the tree spent in between. Reaped time goes to the
reaper's children's role (the daemon's to the executor's Python, the JVM's to the driver-side Python);
a process alive at the start that ended before the end moves its earlier time to that role, so the
split by role is exact up to such processes, the total exactly.
"""

from __future__ import annotations

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
    """`with ProcessMeter() as meter: ...` then `meter.usage`: the CPU the Spark processes spent inside.
    `root`: the tree's root (default: the local Spark JVM this process started)."""

    def __init__(self, root: psutil.Process | None = None) -> None:
        self.me = psutil.Process()
        self.root = root if root is not None else spark_jvm()
        self._base: dict[str, float] = {}
        self._pids: set[int] = set()
        self.usage = Usage()

    def _processes(self) -> list[psutil.Process]:
        return [self.root, *self.root.children(recursive=True)]

    def _reaped_role(self, process: psutil.Process) -> str:
        """Whose time a process's reaped children spent."""
        if process.pid == self.root.pid and process.name() == "java":
            return DRIVER_PYTHON  # (the executor's daemon lives as long as the JVM: not reaped meanwhile)
        return role(process)  # the daemon's reaped children are its workers: the executor's Python

    def _reading(self) -> tuple[dict[str, float], set[int]]:
        seconds = dict.fromkeys(ROLES, 0.0)
        pids = set()
        for process in self._processes():
            try:
                times = process.cpu_times()
                seconds[role(process)] += times.user + times.system
                seconds[self._reaped_role(process)] += times.children_user + times.children_system
                pids.add(process.pid)
            except psutil.Error:  # ended between listing and reading: its parent has (or will have) it
                continue
        if self.me.pid != self.root.pid:  # the Python process driving the query (its children: the root)
            times = self.me.cpu_times()
            seconds[DRIVER_PYTHON] += times.user + times.system
        return seconds, pids

    def __enter__(self) -> ProcessMeter:
        self._base, self._pids = self._reading()
        return self

    def __exit__(self, *exc: object) -> None:
        seconds, pids = self._reading()
        usage = Usage(started=len(pids - self._pids), ended=len(self._pids - pids))
        for name in ROLES:
            usage.seconds[name] = seconds[name] - self._base[name]
        self.usage = usage
