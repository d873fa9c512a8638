"""CPU time of every process of a local Spark application, split by role, while something runs.

Why: a user pays for the whole pipeline, not for the decoder. In local mode one JVM plays driver and
executor, and PySpark starts Python processes of three kinds beside it: the executor's workers
(`pyspark.daemon pyspark.worker`) that run the reader's partitions, the driver-side workers of the
Python Data Source API (the streaming source runner that plans batches, and the short-lived
`pyspark.sql.worker.*` ones that look up, create and plan the source), and the Python process that
drives the query through Py4J (this one). Counting them all, split by role, shows where the CPU goes.

Counted exactly, not sampled: a process that starts and ends between two samples would be missed, and
one that ends would lose its last slice, which flatters the connector's fixed cost. So the meter reads,
at the start and at the end only, every process's own user+system time *and* the time of the children
it has reaped (a process that ended was reaped by its parent, and its whole time is then in its
parent's children times). The difference between the two readings is the CPU the tree spent between.

Three ways a process's time could still be lost, and what the meter does about each:
- A process that ended but is not reaped yet (a zombie: the planner process Spark starts per streaming
  query exits as the query ends) has its time in neither its own live reading nor its parent's
  children times. psutil refuses most calls on a zombie; `/proc/<pid>/stat` still holds its times, so
  the meter reads `/proc` itself, and gives a zombie whose role it cannot read the role of the time its
  parent will reap (`_reaped_role`), or the role an earlier reading saw.
- A child reaped between the reading of the child and that of its parent would be counted twice (its
  own reading, then in the parent's children times): children are read before their parents, and a
  child gone once its parent has been read is dropped (its parent's reading has it).
- A child reaped before it was read is in its parent's children times: read after it, so counted.

- A process whose parent ignores SIGCHLD is reaped by the kernel without its time going to its
  parent's children times: PySpark's daemon does so (`signal(SIGCHLD, SIG_IGN)`), so an executor worker
  (or a Data Source API worker) that ends takes its whole time with it; read at the start and gone at
  the end, it even makes a measurement negative. A sampler thread reads the tree every
  `SAMPLE_EVERY` seconds; a process gone at the end whose parent ignores SIGCHLD (`SigIgn` in
  /proc/<pid>/status) is credited with its last sampled time (at most a sampling interval of its CPU
  is lost; a worker idle before it ends loses none). `Usage.credited` counts them.
- A process that leaves the tree before it ends (orphaned when its parent ends first, it is re-parented
  to init or a subreaper outside the tree) takes its time with it too. While measuring, the meter makes
  the driving process a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`), so that an orphan of the
  tree is re-parented to it and stays countable (known from a reading or from the sampler: a scheduled
  job's JVM is born after the first reading and outlives the job's Python), reaps such orphans itself
  at each reading (their final time is kept by the meter), and reports a process still alive outside the tree (`Usage.left`), which
  flags the measurement.

Every measurement is cross-checked against the machine's busy time (`/proc/stat`) minus the CPU of the
processes named as the servers' and the meter's own: what none explains (`Usage.unexplained`) is
printed beside each figure, and a measurement where it exceeds `UNEXPLAINED_LIMIT` of the busy time is
flagged (the `cpu` benchmark then exits non-zero after printing its figures).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

JVM, EXECUTOR_PYTHON, DRIVER_PYTHON = "JVM", "executor Python", "driver Python"
ROLES = (JVM, EXECUTOR_PYTHON, DRIVER_PYTHON)
TICK = os.sysconf("SC_CLK_TCK")
UNEXPLAINED_LIMIT = 0.05  # of the machine's busy time
PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
SAMPLE_EVERY = 0.05  # seconds between the sampler's readings of the tree (its own CPU is not counted)
SEEN: set[int] = set()  # every pid any meter of this process found in its tree (an orphan of it is
# adopted by the next meter too)


def set_subreaper(on: bool) -> bool:
    """Make this process the child subreaper of its descendants, or no longer (Linux 3.4+): while it
    is one, an orphan among them is re-parented here instead of to init, so the meter still sees it.
    False when the call fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class Stat:
    """One process's line of /proc/<pid>/stat, times in seconds."""

    pid: int
    ppid: int
    state: str
    own: float  # utime + stime
    reaped: float  # cutime + cstime: its children that ended and were waited for


def read_stat(pid: int) -> Stat | None:
    """None when the process is gone (reaped) or not readable."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    name_end = text.rindex(")")  # (the name may hold spaces and parentheses)
    fields = text[name_end + 2 :].split()
    # fields[0] is field 3 of proc(5): state; 4 ppid; 14-17 utime stime cutime cstime
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return Stat(pid, int(fields[1]), fields[0], (utime + stime) / TICK, (cutime + cstime) / TICK)


SIGCHLD_BIT = 1 << 16  # signal 17, in /proc/<pid>/status's SigIgn mask


def ignores_sigchld(pid: int) -> bool:
    """Whether a process ignores SIGCHLD: the kernel then reaps its children and their time is added
    to no one's children times. False when it cannot be read."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & SIGCHLD_BIT)
    except (OSError, ValueError):
        pass
    return False


def ended_whole(pid: int) -> bool:
    """Whether a child of this process has ended as a whole, every thread, without reaping it (a
    JVM's first thread shows a zombie in /proc before its others end, and its reading is low until
    they have); True when it is gone already."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def command_of(pid: int) -> tuple[str, list[str]] | None:
    """(name, argv) of a process; None when gone, or a zombie (its argv is empty then)."""
    try:
        name = (PROC / str(pid) / "comm").read_text().strip()
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in argv if a]
    return (name, args) if args else None


def role_of(name: str, argv: list[str]) -> str:
    if name == "java":
        return JVM
    return EXECUTOR_PYTHON if argv and argv[-1] == "pyspark.worker" else DRIVER_PYTHON


def spark_jvm() -> int:
    """The local Spark JVM: the java process this Python process started through Py4J."""
    me = os.getpid()
    for stat in _all_stats():
        name, argv = command_of(stat.pid) or ("", [])
        if stat.ppid == me and name == "java" and any("spark" in a for a in argv):
            return stat.pid  # (not a local server that is a JVM too, as kinesis-local is)
    raise RuntimeError("no Spark JVM among this process's children: start the SparkSession first")


def _all_stats() -> list[Stat]:
    out = []
    for entry in os.listdir(PROC):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat is not None:
                out.append(stat)
    return out


def machine_busy() -> float:
    """CPU seconds every core of the machine spent busy since boot (/proc/stat's first line: all but
    idle and iowait)."""
    values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle, iowait = values[3], values[4] if len(values) > 4 else 0
    busy = sum(values[:8]) - idle - iowait  # user nice system idle iowait irq softirq steal
    return busy / TICK


@dataclass
class Usage:
    """CPU seconds per role between start and stop, with the processes that came and went, and the
    cross-check: the machine's busy seconds and the named servers' seconds over the same time."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ROLES, 0.0))
    started: int = 0
    ended: int = 0
    zombies: int = 0  # processes read as zombies (their time counted from /proc)
    adopted: int = 0  # orphans of the tree re-parented to the meter's process and counted there
    credited: int = 0  # processes gone unreaped-by-an-ancestor, counted from their last sample
    credited_seconds: float = 0.0  # what they were credited with (inside the measurement)
    left: list[str] = field(default_factory=list)  # processes alive outside the tree at the end
    left_seconds: float = 0.0  # their time at the start reading (the measurement is low by about this)
    busy: float = 0.0
    servers: float = 0.0
    meter: float = 0.0  # the meter's sampler thread's CPU, taken out of the driving process's: in `busy`

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    @property
    def unexplained(self) -> float:
        """Busy time neither the tree, the servers nor the meter itself account for (other processes,
        the kernel; or time the meter lost, which makes it large). Negative: time counted twice. (The
        meter's own sampling, about 0.09 CPU-s per wall second, once sat here and flagged most
        measurements, so a flag could not tell a lost process from the meter.)"""
        return self.busy - self.servers - self.total - self.meter

    def flagged(self) -> bool:
        return bool(self.left) or abs(self.unexplained) > UNEXPLAINED_LIMIT * max(self.busy, 1e-9)


class ProcessMeter:
    """`with ProcessMeter() as meter: ...` then `meter.usage`: the CPU the Spark processes spent inside.
    `root`: the tree's root pid (default: the local Spark JVM this process started); `servers`: pids
    whose CPU (with their descendants) the cross-check subtracts from the machine's busy time."""

    def __init__(self, root: int | None = None, servers: tuple[int, ...] = ()) -> None:
        self.me = os.getpid()
        self.root = root if root is not None else spark_jvm()
        self.servers = servers
        self.subreaper = False  # (set while measuring)
        self.roles: dict[int, str] = {}  # pid -> role, kept from any reading that could see it
        self.commands: dict[int, str] = {}  # pid -> its command line, shortened (for `Usage.left`)
        self.ignoring: dict[int, bool] = {}  # pid -> whether it ignores SIGCHLD (see `_gone`)
        self.reaped_here: dict[int, float] = {}  # adopted orphans this meter reaped: pid -> seconds
        self._spent_here = dict.fromkeys(ROLES, 0.0)  # their time, by role (it grows only)
        self._base: dict[str, float] = {}
        self._base_read: dict[int, Stat] = {}
        self._base_busy = self._base_servers = 0.0
        self._last: dict[int, Stat] = {}  # pid -> its last reading by the sampler (or a reading)
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._lock = threading.Lock()  # the sampler and the readings both learn roles
        self._sampler_cpu = 0.0
        self.usage = Usage()

    def _reaped_role(self, pid: int) -> str:
        """Whose time a process's reaped children spent. A JVM's are the Python processes PySpark
        starts from it and waits for (the query's planner, the Data Source API's workers; the executor's
        daemon lives as long as the JVM), whether the JVM is the tree's root or a job's child (that one
        once had them counted as the JVM's)."""
        if self.roles.get(pid) == JVM:
            return DRIVER_PYTHON
        return self.roles.get(pid, DRIVER_PYTHON)  # the daemon's reaped children are its workers

    def _learn_roles(self, order: list[int], stats: dict[int, Stat]) -> None:
        """Every live process's role from its command line; then a zombie first seen now gets the
        role of the time its parent will reap (its parent's role is known by then)."""
        for pid in order:
            command = command_of(pid) if stats[pid].state != "Z" else None
            if command is not None:
                self.roles[pid] = role_of(*command)
                self.commands[pid] = " ".join(command[1])[:120]
            parent = stats[pid].ppid
            if parent not in self.ignoring:  # read once, when its first child is seen: a daemon sets
                self.ignoring[parent] = ignores_sigchld(parent)  # SIGCHLD's disposition before it forks
        for pid in reversed(order):  # (parents first)
            if pid not in self.roles:
                self.roles[pid] = self._reaped_role(stats[pid].ppid)

    @staticmethod
    def _post_order(root: int, stats: dict[int, Stat]) -> list[int]:
        """The tree under `root`, every child before its parent."""
        children: dict[int, list[int]] = {}
        for stat in stats.values():
            children.setdefault(stat.ppid, []).append(stat.pid)
        order: list[int] = []
        stack: list[tuple[int, bool]] = [(root, False)] if root in stats else []  # (gone: reaped)
        for _step in range(4 * len(stats) + 4):  # bounded: each pid is pushed twice at most
            if not stack:
                break
            pid, expanded = stack.pop()
            if expanded:
                order.append(pid)
            else:
                stack.append((pid, True))
                stack.extend((child, False) for child in children.get(pid, []))
        return order

    def _tree_seconds(self, root: int, adopt: bool = False) -> tuple[dict[str, float], dict[int, Stat], int]:
        """CPU seconds by role of the tree under `root` (with `adopt`: and of the orphans of that tree
        re-parented to this process), the processes read, and how many were zombies."""
        stats = {s.pid: s for s in _all_stats()}
        seconds = dict.fromkeys(ROLES, 0.0)
        read: dict[int, Stat] = {}
        zombies = 0
        roots = [root]
        if adopt:
            with self._lock:  # (the sampler's too: a process born after the start is known from it)
                known = SEEN | self._last.keys()
            roots += [p for p, s in stats.items() if s.ppid == self.me and p in known and p != root]
        order = [pid for top in roots for pid in self._post_order(top, stats)]
        with self._lock:
            self._learn_roles(order, stats)
        for pid in order:
            stat = read_stat(pid)  # again, now: its children have just been read
            if stat is None:
                continue  # reaped since the listing: in its parent's children times, read after it
            role = self.roles[pid]
            seconds[role] += stat.own
            read[pid] = stat
            zombies += stat.state == "Z"
            seconds[self._reaped_role(pid)] += stat.reaped
            for child in (c for c, s in stats.items() if s.ppid == pid and c in read):
                if read_stat(child) is None:  # reaped after it was read: the parent's reading has it
                    seconds[self.roles[child]] -= read.pop(child).own
        return seconds, read, zombies

    def _servers_seconds(self) -> float:
        total = 0.0
        for server in self.servers:
            seconds, _read, _z = self._tree_seconds(server)
            total += sum(seconds.values())
        return total

    def _reap_adopted(self, read: dict[int, Stat]) -> None:
        """Reap the adopted orphans read as zombies (their final times are in this reading); from now
        on their time is in `_spent_here`, which later readings add. A process whose first thread
        ended before the others reads as a zombie while they still run (a JVM ends so): it cannot be
        waited for yet, stays in the tree and is read again (once taken as reaped, its time counted
        again in the next measurement, 32 CPU-s in a boto3 script's)."""
        for pid, stat in read.items():
            if stat.state == "Z" and stat.ppid == self.me and pid != self.root:
                try:
                    reaped, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    continue
                if reaped == 0:  # (its leader thread ended, others not yet: /proc shows Z, not waitable)
                    continue
                self.reaped_here[pid] = stat.own + stat.reaped
                self._spent_here[self.roles[pid]] += stat.own
                self._spent_here[self._reaped_role(pid)] += stat.reaped

    def _reading(self) -> tuple[dict[str, float], dict[int, Stat], int]:
        seconds, read, zombies = self._tree_seconds(self.root, adopt=True)
        for role, spent in self._spent_here.items():
            seconds[role] += spent  # (before this reading's reaping: a zombie read now is in `seconds`)
        with self._lock:
            SEEN.update(read)
        self._reap_adopted(read)
        if self.me != self.root:  # the Python process driving the query (its children: the root)
            stat = read_stat(self.me)
            if stat is not None:
                seconds[DRIVER_PYTHON] += stat.own
        return seconds, read, zombies

    def _sample(self) -> None:
        """Read the tree every SAMPLE_EVERY seconds until stopped: each process's last times."""
        began = time.thread_time()
        for _tick in range(10_000_000):  # bounded: stopped by __exit__ long before
            if self._stop.wait(SAMPLE_EVERY):
                break
            stats = {s.pid: s for s in _all_stats()}
            order = self._post_order(self.root, stats)
            with self._lock:
                self._learn_roles(order, stats)
                for pid in order:
                    self._last[pid] = stats[pid]
                SEEN.update(order)
        self._sampler_cpu = time.thread_time() - began  # (in this process's own time: taken out)

    def _gone(self, end: dict[int, Stat]) -> tuple[list[int], dict[int, float]]:
        """Processes seen during the measurement but missing from the end reading: those alive outside
        the tree (orphans not adopted), and, by pid, the seconds to credit to those whose parent ignores
        SIGCHLD (their time reached no one's children times: their last sample is all there is). A
        parent that waits for its children has the time of those that ended in its own reading, or in
        its parent's once it ended and was waited for."""
        gone = [pid for pid in self._last if pid not in end and pid not in self.reaped_here]
        alive = [pid for pid in gone if read_stat(pid) is not None]
        credit = {
            pid: self._last[pid].own + self._last[pid].reaped
            for pid in gone
            if pid not in alive and self.ignoring.get(self._last[pid].ppid, False)
        }
        return alive, credit

    def __enter__(self) -> ProcessMeter:
        self.subreaper = set_subreaper(True)
        self._base_busy, self._base_servers = machine_busy(), self._servers_seconds()
        self._base, self._base_read, _zombies = self._reading()
        self._last = dict(self._base_read)
        self._sampler = threading.Thread(target=self._sample, name="process-meter", daemon=True)
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=10)
        seconds, read, zombies = self._reading()
        adopted = {p for p, s in read.items() if s.ppid == self.me and p != self.root}
        usage = Usage(
            started=len(read.keys() - self._base_read.keys()),
            ended=len(self._base_read.keys() - read.keys()),
            zombies=zombies,
            adopted=len(adopted | self.reaped_here.keys()),
        )
        seconds[DRIVER_PYTHON] -= self._sampler_cpu if self.me != self.root else 0.0
        alive, credit = self._gone(read)
        for pid, spent in credit.items():
            seconds[self.roles.get(pid, DRIVER_PYTHON)] += spent
            usage.credited += 1
            usage.credited_seconds += spent - self._start_seconds(pid)
        for name in ROLES:
            usage.seconds[name] = seconds[name] - self._base[name]
        for pid in alive:
            spent = self._start_seconds(pid)
            usage.left.append(
                f"{pid} {self.roles.get(pid, '?')} {spent:.2f} s: {self.commands.get(pid, '?')}"
            )
            usage.left_seconds += spent
        usage.servers = self._servers_seconds() - self._base_servers
        if self.me != self.root:  # (the readings' own CPU is in this process's time, counted above)
            usage.meter = self._sampler_cpu
        usage.busy = machine_busy() - self._base_busy
        self.usage = usage
        if self.subreaper:
            set_subreaper(False)  # (orphans after the measurement go to init again)

    def _start_seconds(self, pid: int) -> float:
        """What the start reading counted of a process (0 if it started later)."""
        stat = self._base_read.get(pid)
        return stat.own + stat.reaped if stat is not None else 0.0
