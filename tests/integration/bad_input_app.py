"""The bad-input matrix of a newcomer's first hour, run as a user's script runs: each case's error as
Python prints an uncaught one (`traceback.format_exception`, what the interpreter's default hook
writes to stderr). Prints one JSON line per case: {"case", "trace"}.

Usage: python -m tests.integration.bad_input_app <endpoint> <stream> <workdir>
Credentials come from options only (the test runs it with no AWS_* variables and no AWS files), so
the "no credentials" case is real.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    endpoint, stream, work = sys.argv[1:4]
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from benchmarks.local_setup import spark_session  # (a session on loopback, the source registered)

    spark = spark_session("local[1]")
    keys = {"awsAccessKeyId": "000000000000", "awsSecretKey": "local"}
    good = {"streamName": stream, "region": "us-east-1", "endpointUrl": endpoint} | keys

    def read(options: dict[str, str], name: str) -> None:
        df = spark.readStream.format("kinesis").options(**options).load()
        query = df.writeStream.format("noop").option("checkpointLocation", f"{work}/cp-{name}").start()
        try:
            query.awaitTermination(90)
        finally:
            query.stop()

    def write(options: dict[str, str], frame: str = "data") -> None:
        df = spark.createDataFrame([("k", b"v")], "partitionKey string, data binary")
        if frame != "data":
            df = df.withColumnRenamed("data", frame)
        df.write.format("kinesis").mode("append").options(**options).save()

    meta = lambda name: {"metadataPath": f"{work}/meta-{name}"}  # noqa: E731
    cases = {
        "misspelled option": lambda: read(good | meta("a") | {"startingPositon": "LATEST"}, "a"),
        "missing stream": lambda: read(good | meta("b") | {"streamName": "no-such-stream"}, "b"),
        "wrong port": lambda: read(good | meta("c") | {"endpointUrl": "http://127.0.0.1:9"}, "c"),
        "missing metadataPath": lambda: read(good, "d"),
        "bad startingPosition": lambda: read(good | meta("e") | {"startingPosition": "BEGINNING"}, "e"),
        "no credentials": lambda: read({k: v for k, v in good.items() if k not in keys} | meta("f"), "f"),
        "sink: missing stream": lambda: write(good | {"streamName": "no-such-stream"}),
        "sink: misspelled option": lambda: write(good | {"agregate": "true"}),
        "sink: no data column": lambda: write(good, frame="payload"),
    }
    chosen = sys.argv[4:] or list(cases)
    for name in chosen:
        try:
            cases[name]()
            trace = "(no error)"
        except Exception as exc:
            trace = "".join(traceback.format_exception(exc))
        print(json.dumps({"case": name, "trace": trace}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
