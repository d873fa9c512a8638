"""A local STS (moto's server) on 127.0.0.1, for reading streams through an assumed role.

moto's STS hands out temporary credentials for any role; started with `refuse=True` it checks the
caller's keys against its own (empty) IAM, so every AssumeRole is refused as real STS refuses an
unknown or unauthorised caller.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
from botocore.config import Config

from pyspark_kinesis.cli.local_kinesis import free_port


class LocalSts:
    def __init__(self, refuse: bool = False) -> None:
        self.port = free_port()
        self.refuse = refuse
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="moto-sts-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def assume_role_calls(self) -> int:
        """AssumeRole requests the server answered, from its access log."""
        return Path(self._log.name).read_text(errors="replace").count('"POST / HTTP/1.1" 200')

    def __enter__(self) -> LocalSts:
        env = dict(os.environ)
        if self.refuse:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        server = Path(sys.executable).parent / "moto_server"
        self.process = subprocess.Popen(
            [str(server), "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        sts = boto3.client(
            "sts",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=5),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited; see {self._log.name}")
            try:
                sts.get_caller_identity()
                return self
            except Exception as exc:
                if "InvalidClientTokenId" in str(exc):  # the refusing server is up
                    return self
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"moto_server did not answer within 60 s; see {self._log.name}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
