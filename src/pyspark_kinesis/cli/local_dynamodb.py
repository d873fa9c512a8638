"""A local DynamoDB with streams for development: moto's server (`pip install 'moto[server]'`) on
127.0.0.1, started as `pyspark-kinesis local start --kind dynamodb`.

moto serves DynamoDB, DynamoDB Streams and Kinesis on one port; its stream has one shard per table that
never closes (enough for a table's changes, not for the service's shard rollovers, which the test suite
simulates). Nobody here wrote it, which is why the source's tests read a table's changes through it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from types import TracebackType

from ..aws.admin import answers
from .local_kinesis import free_port


class LocalDynamoDB:
    """moto's server process. Use as a context manager, or call start() and stop()."""

    kind = "dynamodb"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="moto-dynamodb-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        return self._log.name

    def start(self, timeout_s: float = 60.0) -> LocalDynamoDB:
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise RuntimeError(
                "A local DynamoDB is moto's server: pip install 'moto[server]' (it is not a dependency of "
                "the connector), then run this again."
            )
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"moto's server exited with code {self.process.returncode}; see {self.log_path}"
                )
            if answers(self.endpoint):  # (moto serves Kinesis on the same port)
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"moto's server did not answer on {self.endpoint} within {timeout_s:.0f} s; see {self.log_path}"
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> LocalDynamoDB:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def create_table_hint(endpoint: str) -> str:
    """How to make a table with a stream there, for `local start` to print."""
    return (
        f"  python -c \"import boto3; boto3.client('dynamodb', endpoint_url='{endpoint}').create_table("
        "TableName='orders', KeySchema=[{'AttributeName': 'id', 'KeyType': 'HASH'}], "
        "AttributeDefinitions=[{'AttributeName': 'id', 'AttributeType': 'S'}], BillingMode='PAY_PER_REQUEST', "
        "StreamSpecification={'StreamEnabled': True, 'StreamViewType': 'NEW_AND_OLD_IMAGES'})\"\n"
        f'  spark.readStream.format(fmt).option("service", "dynamodb").option("streamName", "orders")'
        f'.option("endpointUrl", "{endpoint}").option("region", "us-east-1")'
    )
