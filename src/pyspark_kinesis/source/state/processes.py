"""Which process wrote a live record, and whether it still runs.

A query's driver renews a live record under metadataPath (`liveness.LiveRecords.beat`) so that a
second query refuses to share it. A driver killed and restarted on the same host would otherwise be
refused by its own dead predecessor's fresh record for up to `LIVE_FOR_S`: the record names its
process, and a process gone from this host holds nothing.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any


def this_process() -> dict[str, Any]:
    """What names this process in a live record: host, process id and (Linux) its start time."""
    pid = os.getpid()
    stat = _stat(pid)
    return {"host": socket.gethostname(), "pid": pid, "started": None if stat is None else stat[1]}


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time in clock ticks since boot (Linux): the start time tells a
    reused process id apart, the state a killed process not reaped yet ("Z")."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def process_gone(info: Mapping[str, Any]) -> bool:
    """Whether the process a live record names is known not to run: on this host, and its id is free,
    held by a process started at another time, or a killed process not reaped yet."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    pid = int(info["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it runs
    stat = _stat(pid)
    if stat is None:
        return False
    started = info.get("started")
    return stat[0] == "Z" or (started is not None and stat[1] != started)
