"""The fan-out agent's life, without a Kinesis subscription: a worker finds or starts it
(src/pyspark_kinesis/source/agent/link.py: the private socket directory, the start under a lock with
the worker's import path, detached, the errors a user reads when it cannot start), and it ends
(process.py: when its owner is gone or nothing used it, leaving no socket, lock or empty log). What
it serves is tested in test_fanout_hub.py and, started for real, by the integration tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.source.agent import link
from tests.unit.source.driver.test_restart_paths import dead_pid


@pytest.fixture
def temp(monkeypatch):
    """A short temporary directory (a Unix socket path holds ~100 bytes) as the process's tempdir."""
    base = Path(tempfile.mkdtemp(prefix="lk", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_the_socket_directory_is_private_to_the_user(temp):
    path = link.agent_dir()
    assert path == temp / f"pyspark-kinesis-{os.getuid()}"
    assert path.stat().st_mode & 0o777 == 0o700
    assert link.agent_dir() == path  # (found the second time)
    assert link.socket_path(42) == path / "fanout-42.sock"


def test_a_socket_directory_others_may_enter_is_refused(temp):
    path = temp / f"pyspark-kinesis-{os.getuid()}"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    with pytest.raises(StreamAccessError) as refused:
        link.agent_dir()
    assert str(refused.value) == (
        f"{path} (the enhanced fan-out agent's socket directory) is not private to this user: remove it, "
        "or make it mode 0700 and owned by the user running Spark's executors."
    )
    path.chmod(0o701)  # (any bit for group or others)
    with pytest.raises(StreamAccessError):
        link.agent_dir()


def test_a_long_temporary_directory_gives_way_to_tmp(monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", "/tmp/" + "x" * 56)  # 61 characters
    assert link.agent_dir().parent == Path("/tmp")
    kept = Path(tempfile.mkdtemp(prefix="lk", dir="/tmp"))
    at_most = kept / ("y" * (60 - len(str(kept)) - 1))  # 60 characters: still short enough
    at_most.mkdir()
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(at_most))
        assert len(str(at_most)) == 60 and link.agent_dir().parent == at_most
    finally:
        shutil.rmtree(kept, ignore_errors=True)


class Process:
    """subprocess.Popen's stand-in: the command, how it was started, and an exit code for `poll`."""

    made: ClassVar[list[Process]] = []

    def __init__(self, args: list[str], **how: Any) -> None:
        self.args, self.how, self.code = args, how, None
        self.waited = threading.Event()
        Process.made.append(self)

    def poll(self) -> int | None:
        return self.code

    def wait(self) -> int | None:
        self.waiter = (threading.current_thread().name, threading.current_thread().daemon)
        self.waited.set()
        return self.code


def test_the_agent_starts_detached_with_the_workers_import_path(temp, monkeypatch):
    Process.made.clear()
    monkeypatch.setattr(subprocess, "Popen", Process)
    path = link.socket_path(7)
    path.write_text("")  # a socket left by a killed agent
    process = link._start(path, 7)
    assert not path.exists()
    assert process.args == [sys.executable, "-m", "pyspark_kinesis.source.agent.process", str(path), "7"]
    assert process.how["env"]["PYTHONPATH"] == os.pathsep.join(p for p in sys.path if p)
    assert {k: v for k, v in process.how["env"].items() if k != "PYTHONPATH"} == {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH"
    }  # the worker's environment otherwise (credentials' variables, SPARK_LOCAL_IP...)
    assert process.how["stdin"] == process.how["stdout"] == subprocess.DEVNULL
    assert process.how["stderr"].name == str(path.with_suffix(".log"))
    assert process.how["start_new_session"] is True and process.how["close_fds"] is True
    assert process.waited.wait(5)  # a thread waits for it: no zombie left behind
    assert process.waiter == ("efo-agent-reaper", True)  # named, and not keeping the worker alive
    assert link._start(path, 7) is Process.made[-1]  # (no socket left: nothing to remove)


def test_an_agent_that_exits_before_listening_is_an_error_naming_its_log(temp, monkeypatch):
    started: list[Process] = []

    def start(path: Path, owner: int) -> Process:
        started.append(Process([]))
        started[-1].code = 3  # (exited)
        return started[-1]

    monkeypatch.setattr(link, "_start", start)
    path = link.socket_path(8)
    with pytest.raises(StreamAccessError) as failed:
        link.connect_agent(8)
    assert str(failed.value) == (
        f"the enhanced fan-out agent did not start (exit code 3); its log is {path.with_suffix('.log')}."
    )
    assert len(started) == 1


def test_an_agent_that_never_listens_is_given_up_after_the_start_timeout(temp, monkeypatch):
    monkeypatch.setattr(link, "_start", lambda path, owner: Process([]))
    monkeypatch.setattr(link, "START_TIMEOUT_S", 0.2)
    with pytest.raises(StreamAccessError, match=r"did not start \(exit code None\)"):
        link.connect_agent(9)


def test_a_listening_agent_is_joined_and_none_is_started(temp, monkeypatch):
    monkeypatch.setattr(link, "_start", lambda path, owner: pytest.fail("an agent listens already"))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(link.socket_path(os.getppid())))
    server.listen(1)
    try:
        sock = link.connect_agent()  # (the default owner: the process that forked this one)
        sock.close()
        assert not link.socket_path(os.getppid()).with_suffix(".lock").exists()  # no lock taken
        sock = link._start_and_connect(link.socket_path(os.getppid()), os.getppid())
        sock.close()
    finally:
        server.close()


def test_an_agent_that_starts_listening_is_joined(temp, monkeypatch):
    servers: list[socket.socket] = []

    owners: list[int] = []

    def start(path: Path, owner: int) -> Process:
        owners.append(owner)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(1)
        servers.append(server)
        return Process([])

    monkeypatch.setattr(link, "_start", start)
    sock = link.connect_agent(10)
    sock.close()
    assert len(servers) == 1 and owners == [10]
    assert link.socket_path(10).with_suffix(".lock").exists()  # started under the path's lock
    servers[0].close()


def test_a_directory_that_cannot_be_made_is_an_error_saying_what_the_agent_needs(monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", "/proc/no-such-dir")
    with pytest.raises(StreamAccessError) as failed:
        link.connect_agent(11)
    assert str(failed.value).startswith("cannot start the enhanced fan-out agent (FileNotFoundError: ")
    assert str(failed.value).endswith(
        "). It needs a writable temporary directory and permission to start a process on the executor."
    )


# -- the agent's end ------------------------------------------------------------------------------
@pytest.mark.parametrize("log_text", ["", "a warning\n"])
def test_an_agent_whose_owner_is_gone_ends_and_leaves_nothing_but_a_log_worth_reading(temp, log_text):
    from pyspark_kinesis.source.agent import process

    path = link.socket_path(12)
    path.with_suffix(".lock").write_text("")
    path.with_suffix(".log").write_text(log_text)
    serving = threading.Thread(target=process.serve, args=(str(path), dead_pid(), lambda spec: None))
    serving.start()
    serving.join(10)
    assert not serving.is_alive()
    assert not path.exists() and not path.with_suffix(".lock").exists()
    assert path.with_suffix(".log").exists() == bool(log_text)


def test_an_agent_with_a_living_owner_keeps_its_lock_and_log(temp, monkeypatch):
    from pyspark_kinesis.source.agent import process

    monkeypatch.setattr(process, "IDLE_EXIT_S", 0.0)  # (ends at once for want of reads)
    path = link.socket_path(13)
    path.with_suffix(".lock").write_text("")
    path.with_suffix(".log").write_text("")
    serving = threading.Thread(target=process.serve, args=(str(path), os.getpid(), lambda spec: None))
    serving.start()
    serving.join(10)
    assert not serving.is_alive() and not path.exists()
    assert path.with_suffix(".lock").exists() and path.with_suffix(".log").exists()


def test_a_second_agent_on_a_taken_path_leaves_the_first_serving(temp):
    from pyspark_kinesis.source.agent import process

    path = link.socket_path(14)
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.bind(str(path))
    first.listen(1)
    try:
        process.serve(str(path), os.getpid(), lambda spec: None)  # returns: another one serves
        assert path.exists()
    finally:
        first.close()


def test_main_serves_the_path_for_the_owner_given(monkeypatch):
    from pyspark_kinesis.source.agent import process

    served: list[tuple[str, int]] = []
    monkeypatch.setattr(process, "serve", lambda path, owner: served.append((path, owner)))
    assert process.main(["/tmp/x.sock", "77"]) == 0 and served == [("/tmp/x.sock", 77)]


def test_a_starting_agent_is_looked_for_in_short_steps(temp, monkeypatch):
    """A worker waits for the agent it started by trying its socket every 50 ms, not in long sleeps
    that would delay the first read of every executor."""

    class Clock:
        now, sleeps = 0.0, []

        def monotonic(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            self.now += seconds

    clock = Clock()
    monkeypatch.setattr(link, "time", clock)
    monkeypatch.setattr(link, "START_TIMEOUT_S", 0.5)
    monkeypatch.setattr(link, "_start", lambda path, owner: Process([]))
    with pytest.raises(StreamAccessError, match="did not start"):
        link.connect_agent(12)
    assert len(clock.sleeps) >= 9 and set(clock.sleeps) == {0.05}
