"""A Spark standalone cluster on loopback, from pyspark's own jars: one master, workers on 127.0.0.2, ...

Why not `local[...]` or `local-cluster[...]`: Spark starts speculative execution only in cluster modes,
and never runs a speculative copy of a task on a host where an attempt of it already runs. Workers
bound to distinct loopback addresses (all of 127.0.0.0/8 is local on Linux) are distinct hosts to
the scheduler, so speculation, executor loss and worker loss happen as on a real cluster, without
leaving the machine. Each process runs in its own session: `stop` and `kill_worker` end exactly the
processes this object started (a worker's executors with it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from pyspark_kinesis.cli.local_kinesis import free_port


def spark_home() -> str:
    """The pip-installed pyspark directory: it holds bin/spark-class and the jars."""
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


class StandaloneCluster:
    """A master on 127.0.0.1 and `workers` workers on 127.0.0.2, 127.0.0.3, ...; use as a context manager."""

    def __init__(self, workers: int = 2, cores: int = 2, memory: str = "1g") -> None:
        if not 1 <= workers <= 200:
            raise ValueError("workers must be between 1 and 200")
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = free_port()
        self.work = Path(tempfile.mkdtemp(prefix="spark-standalone-"))
        self.master: subprocess.Popen[bytes] | None = None
        self.worker_processes: list[subprocess.Popen[bytes] | None] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def hosts(self) -> list[str]:
        return [f"127.0.0.{2 + i}" for i in range(self.workers)]

    def _spawn(self, name: str, host: str, cls: str, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": spark_home(),
                "SPARK_LOCAL_IP": host,
                "SPARK_WORKER_DIR": str(self.work / f"{name}-dir"),
                "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            }
        )
        command = [str(Path(spark_home()) / "bin" / "spark-class"), cls, "--host", host, *args]
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (the process writes it until it ends)
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout_s: float = 90) -> StandaloneCluster:
        self.master = self._spawn(
            "master",
            "127.0.0.1",
            "org.apache.spark.deploy.master.Master",
            "--port",
            str(self.port),
            "--webui-port",
            str(free_port()),
        )
        for index, host in enumerate(self.hosts()):
            self.worker_processes.append(
                self._spawn(
                    f"worker-{index}",
                    host,
                    "org.apache.spark.deploy.worker.Worker",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    "0",
                    self.url,
                )
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            registered = sum(
                "Successfully registered with master" in self.log(f"worker-{i}") for i in range(self.workers)
            )
            if registered == self.workers:
                return self
            if self.master.poll() is not None:
                break
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the standalone cluster did not start within {timeout_s:.0f} s; see {self.work}")

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and its executors (a machine lost)."""
        process = self.worker_processes[index]
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        self.worker_processes[index] = None

    def stop(self) -> None:
        for index in range(len(self.worker_processes)):
            self.kill_worker(index)
        if self.master is not None and self.master.poll() is None:
            os.killpg(self.master.pid, signal.SIGKILL)
            self.master.wait(timeout=30)
        self.master = None

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
