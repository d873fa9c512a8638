"""What every benchmark needs before it starts: loopback-only AWS settings and a local SparkSession."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def environment() -> None:
    """Dummy credentials (the local servers want signed calls), no metadata probe, Spark on loopback."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "000000000000")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def trusted_certificate(folder: str) -> tuple[str, str]:
    """A key and a self-signed certificate for 127.0.0.1 under `folder`, trusted by every AWS client of
    this process and of the Spark processes it starts from now on (AWS_CA_BUNDLE, which botocore reads):
    a local server then serves HTTPS as Kinesis does, and both sides pay TLS as they would there."""
    key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *(
                "-keyout",
                key,
                "-out",
                cert,
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    os.environ["AWS_CA_BUNDLE"] = cert
    return key, cert


def spark_session(master: str = "local[2]") -> Any:
    """A SparkSession on loopback with the kinesis format registered."""
    from pyspark.sql import SparkSession

    import pyspark_kinesis

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_kinesis.register(spark)
    return spark


def create_stream(client: Any, shards: int) -> str:
    """A fresh stream of `shards` shards, ACTIVE."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=name, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    return name


def put_all(
    client: Any, stream: str, payloads: list[bytes], concurrency: int, keys_from: int | None = None
) -> None:
    """PutRecords of 500 records from `concurrency` threads, failed records sent again: the plain boto3
    writer (the sink benchmark's baseline, and how the read benchmarks fill their streams). Partition
    keys are the records' numbers counted from `keys_from`, or their index in their call by default."""
    calls = [(start, payloads[start : start + 500]) for start in range(0, len(payloads), 500)]

    def send(call: tuple[int, list[bytes]]) -> None:
        start, chunk = call
        first = 0 if keys_from is None else keys_from + start
        records = [{"Data": d, "PartitionKey": str(first + i)} for i, d in enumerate(chunk)]
        for _attempt in range(100):
            response = client.put_records(StreamName=stream, Records=records)
            if not response.get("FailedRecordCount"):
                return
            records = [r for r, out in zip(records, response["Records"], strict=True) if "ErrorCode" in out]
        raise RuntimeError("records kept failing")

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(send, calls))
