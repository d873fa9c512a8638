"""Who may talk to the fan-out agent (src/pyspark_kinesis/source/agent/process.py): its Unix socket is
the user's only (mode 0600, whatever the process's umask), and a peer running as another user is
refused by its credentials even where the socket's mode would let it in. The other user is a forked
child that drops to `nobody`, so that test needs root (CI runs as root); it says so when skipped."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pyspark_kinesis.source.agent import process

NOBODY = 65534


@pytest.fixture
def short_dir():
    """A short directory (a Unix socket path holds ~100 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="ap", dir="/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_peer_of_this_process_is_the_same_user():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert process._same_user(ours)


@pytest.mark.skipif(os.geteuid() != 0, reason="a peer of another user needs root to fork as nobody")
def test_a_peer_running_as_another_user_is_not_the_same_user(short_dir):
    short_dir.chmod(0o777)
    path = str(short_dir / "peer.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        os.chmod(path, 0o777)  # (the mode would let anyone in: only the credentials can tell)
        server.listen(1)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child process
            try:
                os.setuid(NOBODY)
                with socket.socket(socket.AF_UNIX) as peer:
                    peer.connect(path)
                    peer.recv(1)
            finally:
                os._exit(0)
        try:
            conn, _ = server.accept()
            with conn:
                assert not process._same_user(conn)
        finally:
            os.waitpid(child, 0)


def test_the_agents_socket_is_the_users_only_whatever_the_umask(short_dir, monkeypatch):
    path = str(short_dir / "agent.sock")
    owner_alive = threading.Event()
    owner_alive.set()
    monkeypatch.setattr(process, "_owner_alive", lambda _owner: owner_alive.is_set())
    previous = os.umask(0o002)  # (a permissive umask, as a shared host may set)
    try:
        agent = threading.Thread(target=process.serve, args=(path, os.getpid(), lambda spec: None))
        agent.start()
        try:
            for _ in range(100):  # bounded: 10 s for the socket to appear
                if os.path.exists(path):
                    break
                time.sleep(0.1)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # (fixed when it was bound)
        finally:
            owner_alive.clear()  # (the owner is gone: the agent ends within its watch interval)
            agent.join(10)
        assert not agent.is_alive() and not os.path.exists(path)
    finally:
        os.umask(previous)
