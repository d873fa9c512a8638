"""Strangers flooding the fan-out agents' relay ports with silent and garbage connections.

Why: docs/operations.md's threat model says a peer that knows no query key holds at most a few
handshake slots per address, and that a read whose holder is its own executor's agent never touches
the port. This is the attacker that claim is tried against (issue #61.7): a process of its own (so
its threads take nothing from the driver's), which finds every listening relay port of this host's
agents (they open and close with use, so it looks again every second) and, from loopback addresses
other than the executors' own 127.0.0.1 (as strangers on other hosts would), keeps connections open
that say nothing and others that send random bytes, each opened again soon after the holder ends it.

    with RelayFlood() as flood:
        ...
    flood.counts  # {"connects": ..., "refused": ..., "closed_by_holder": ..., "ports": ...}
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import TracebackType
from typing import Any

import orjson
import psutil

AGENT_MODULE = "pyspark_kinesis.source.agent.process"
SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
# A connection the holder ended is opened again after this pause: the attacker shares the machine's
# cores with the query, and a loop without it (thousands of connects a second) measures that
# contention rather than the relay (a stranger on another host spends its own CPU).
PAUSE_S = 0.2


def relay_ports() -> set[tuple[str, int]]:
    """The TCP addresses this host's fan-out agents listen on (their relay listeners)."""
    found: set[tuple[str, int]] = set()
    for process in psutil.process_iter(["cmdline"]):
        if AGENT_MODULE not in (process.info.get("cmdline") or []):
            continue
        with contextlib.suppress(psutil.Error):
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr:
                    found.add((conn.laddr.ip, conn.laddr.port))
    return found


class RelayFlood:
    """A context manager: the attacker process runs from `__enter__` to `__exit__` (at most `max_s`);
    `counts` holds what it did once it has ended."""

    def __init__(self, silent: int = 50, garbage: int = 16, max_s: float = 600.0) -> None:
        self.silent, self.garbage, self.max_s = silent, garbage, max_s
        self.counts: dict[str, Any] = {}
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RelayFlood:
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.relay_flood",
                str(self.silent),
                str(self.garbage),
                str(self.max_s),
            ],
            stdout=subprocess.PIPE,
        )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        out, _err = self._process.communicate(timeout=30)
        self.counts = orjson.loads(out) if out.strip() else {}


class _Attacker:
    def __init__(self, max_s: float) -> None:
        self.stop = threading.Event()
        self.deadline = time.monotonic() + max_s
        self.ports: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.counts = {"connects": 0, "refused": 0, "closed_by_holder": 0}
        self.attacked: set[tuple[str, int]] = set()

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def look(self) -> None:
        while self.running():  # bounded by `max_s`
            self.ports = sorted(relay_ports())
            self.stop.wait(1.0)

    def count(self, what: str, port: tuple[str, int] | None = None) -> None:
        with self.lock:
            self.counts[what] += 1
            if port is not None:
                self.attacked.add(port)

    def attack(self, source: str, index: int, garbage: bool) -> None:
        while self.running():  # bounded by `max_s`
            ports = self.ports
            if not ports:
                self.stop.wait(0.2)
                continue
            self.connection(source, ports[index % len(ports)], garbage)
            index += 1

    def connection(self, source: str, port: tuple[str, int], garbage: bool) -> None:
        """One connection held until the holder ends it (at most 10 s), random bytes written on it
        every 0.2 s when `garbage`."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((source, 0))
            sock.settimeout(2.0)
            sock.connect(port)
        except OSError:
            self.count("refused")
            sock.close()
            self.stop.wait(0.05)
            return
        self.count("connects", port)
        until = time.monotonic() + 10.0
        try:
            sock.settimeout(0.2)
            while self.running() and time.monotonic() < until:
                if garbage:
                    sock.sendall(os.urandom(64))
                try:
                    if sock.recv(4096) == b"":
                        self.count("closed_by_holder")
                        self.stop.wait(PAUSE_S)
                        return
                except TimeoutError:
                    continue
        except OSError:
            self.count("closed_by_holder")
            self.stop.wait(PAUSE_S)
        finally:
            sock.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("silent", type=int)
    parser.add_argument("garbage", type=int)
    parser.add_argument("max_s", type=float)
    args = parser.parse_args(argv)
    attacker = _Attacker(args.max_s)
    signal.signal(signal.SIGTERM, lambda *_: attacker.stop.set())
    threads = [threading.Thread(target=attacker.look, daemon=True)]
    for source in SOURCES:
        for n in range(args.silent + args.garbage):
            threads.append(
                threading.Thread(target=attacker.attack, args=(source, n, n >= args.silent), daemon=True)
            )
    for thread in threads:
        thread.start()
    while attacker.running():  # bounded by `max_s`
        attacker.stop.wait(0.5)
    for thread in threads:
        thread.join(15)
    counts = dict(attacker.counts, ports=[f"{h}:{p}" for h, p in sorted(attacker.attacked)])
    sys.stdout.buffer.write(orjson.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
