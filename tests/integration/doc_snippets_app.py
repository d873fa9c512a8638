"""Runs the README's and docs/' Python blocks (tests/support/snippets.py) as a user would, against a
kinesis-local of its own: paths under a work folder, the README's endpoint made the server's. Every AWS
endpoint is the loopback (AWS_ENDPOINT_URL: a dead port; Kinesis: the server; S3, CloudWatch and Glue: moto's
server, with the docs' bucket), so a block that would reach further fails instead. Prints one JSON line per block: {"file", "line", "outcome"}.

Usage: python -m tests.integration.doc_snippets_app <workdir>
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from tests.localsts import LocalSts
from tests.support.snippets import LEFT_OUT, SETUPS, snippets


def localized(code: str, work: str, endpoint: str, n: int, seqs: dict[str, str]) -> str:
    """The block with its paths under the work folder, the README's endpoint the server's, each
    elided sequence number ("4960...") a real one of the shard its line names (`seqs`), and the docs'
    other accounts the local one (the server keeps an account per access key id, and moto's STS hands
    an assumed role the default one's)."""
    for account in ("111111111111", "210987654321", "222222222222"):
        code = code.replace(account, "000000000000")
    for old, new in (
        ('"/durable/dir"', f'"{work}/meta-{n}"'),
        ('"/out"', f'"{work}/out-{n}"'),
        ('"/chk', f'"{work}/chk-{n}'),
        ("http://127.0.0.1:4567", endpoint),
        ('"/var/lib/node_exporter/', f'"{work}/node_exporter/'),
        ('open("payment.avsc")', f'open("{work}/payment.avsc")'),
    ):
        code = code.replace(old, new)
    lines = code.split("\n")
    for index, line in enumerate(lines):
        shard = next((sid for sid in seqs if f'"{sid}"' in line), None)
        if shard is not None and "4960..." in line:
            lines[index] = line.replace("4960...", seqs[shard])
    return "\n".join(lines)


def settle(spark) -> str | None:
    """Each query a block started: its first batches run (60 s at most), then it stops. Its error, if any."""
    error = None
    for query in spark.streams.active:
        for _wait in range(600):
            if query.exception() is not None or (query.lastProgress and query.lastProgress["batchId"] >= 1):
                break
            time.sleep(0.1)
        if query.exception() is not None:
            error = str(query.exception())
        query.stop()
    return error


def main() -> None:
    work = sys.argv[1]
    from pyspark_kinesis.cli.local_kinesis import LocalKinesis

    with LocalKinesis("kinesis-local") as server, LocalSts() as s3:
        os.environ |= {
            "AWS_ACCESS_KEY_ID": "000000000000",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ENDPOINT_URL_KINESIS": server.endpoint,
            "AWS_ENDPOINT_URL_S3": s3.endpoint,  # (metadataPath on S3: moto's server, the docs' bucket made)
            "AWS_ENDPOINT_URL_CLOUDWATCH": s3.endpoint,  # (the lag listener's metrics: moto's server too)
            "AWS_ENDPOINT_URL_GLUE": s3.endpoint,  # (the Glue Schema Registry's snippets: moto's too)
            "AWS_ENDPOINT_URL_STS": s3.endpoint,  # (other accounts' streams, through an assumed role)
            "AWS_ENDPOINT_URL_DYNAMODB": s3.endpoint,  # (a table's stream: moto's DynamoDB Streams)
            "AWS_ENDPOINT_URL_DYNAMODB_STREAMS": s3.endpoint,
            "PYSPARK_PYTHON": sys.executable,
        }
        import boto3
        from benchmarks.local_setup import spark_session

        import pyspark_kinesis

        local_client = boto3.client("kinesis")
        boto3.client("s3").create_bucket(Bucket="my-bucket")
        for name, shards in (("orders", 3), ("orders-out", 2), ("payments", 1)):
            local_client.create_stream(StreamName=name, ShardCount=shards)
        for name in ("orders", "orders-out", "payments"):
            local_client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2})
        ireland = boto3.client("kinesis", region_name="eu-west-1")  # ("orders" of another account, region)
        ireland.create_stream(StreamName="orders", ShardCount=1)
        ireland.get_waiter("stream_exists").wait(StreamName="orders", WaiterConfig={"Delay": 0.2})
        ireland.put_record(StreamName="orders", Data=b"{}", PartitionKey="eu")
        put = local_client.put_records(
            StreamName="orders", Records=[{"Data": b"{}", "PartitionKey": f"k{n}"} for n in range(20)]
        )
        seqs: dict[str, str] = {}  # each shard's last record (the docs' elided "4960..." sequence numbers)
        for record in put["Records"]:
            seqs[record["ShardId"]] = record["SequenceNumber"]
        spark = spark_session("local[2]")
        fmt = pyspark_kinesis.register(spark)  # (registered once per session: this returns its name)

        def started_query():
            query = (
                spark.readStream.format(fmt)
                .options(streamName="orders", startingPosition="TRIM_HORIZON", metadataPath=f"{work}/meta-q")
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", f"{work}/chk-q")
                .start()
            )
            query.processAllAvailable()
            return query

        for n, snippet in enumerate(snippets()):
            if snippet.key in LEFT_OUT:
                outcome = "left out: " + LEFT_OUT[snippet.key]
            elif snippet.key not in SETUPS:
                outcome = "unknown: give it a setup or a reason in tests/support/snippets.py"
            else:
                namespace = {
                    "spark": spark,
                    "fmt": fmt,
                    "json": json,
                    "pyspark_kinesis": pyspark_kinesis,
                    "local_client": local_client,
                    "started_query": started_query,
                    "os": os,
                    "work": work,
                }
                try:
                    exec(SETUPS[snippet.key], namespace)
                    exec(localized(snippet.code, work, server.endpoint, n, seqs), namespace)
                    error = settle(spark)
                    outcome = "ran" if error is None else "failed: " + error
                except Exception:
                    settle(spark)
                    outcome = "failed: " + traceback.format_exc()
            print(json.dumps({"file": snippet.file, "line": snippet.line, "outcome": outcome}), flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
