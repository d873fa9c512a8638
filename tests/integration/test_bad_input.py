"""Bad input fails at query start (or at .load()) with one clear message naming the option or
resource, and no secret ever appears in what the user or the checkpoint sees."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import client, new_stream, put
from tests.integration.streaming_util import Collector, run_available_now

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]
SECRET = "wJalrXUtnFEMI-do-not-leak-K7MDENGbPxRfiCY"


def start_query(spark, options: dict, tmp_path: Path, timeout_s: float = 60) -> str:
    """Build, start and await a streaming query; return the error text the user would see."""
    try:
        r = spark.readStream.format("kinesis")
        for key, value in options.items():
            r = r.option(key, value)
        query = r.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        query.awaitTermination(timeout_s)
        error = query.exception()
        query.stop()
    except Exception as exc:  # raised by .load() or .start()
        return str(exc)
    assert error is not None, f"the query with {sorted(options)} did not fail"
    return str(error)


def base(endpoint: str, stream: str, tmp_path: Path) -> dict:
    return {
        "streamName": stream,
        "region": "us-east-1",
        "endpointUrl": endpoint,
        "metadataPath": str(tmp_path / "m"),
    }


@pytest.fixture(scope="module")
def stream(kinesis_local):
    return new_stream(client(kinesis_local.endpoint), shards=1)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"streamName": None}, "'streamName': missing"),
        ({"startPosition": "LATEST"}, "Did you mean 'startingPosition'?"),
        ({"startingPosition": "BEGINNING"}, "'startingPosition': unknown position 'BEGINNING'"),
        (
            {"startingPosition": "AT_TIMESTAMP:yesterday"},
            "'startingPosition': 'yesterday' is not an ISO-8601",
        ),
        ({"maxRecordsPerBatch": "-5"}, "'maxRecordsPerBatch': -5 is below the minimum 1"),
        ({"maxBytesPerBatch": "lots"}, "'maxBytesPerBatch': 'lots' is not a whole number"),
        ({"metadataPath": None}, "'metadataPath': missing"),
        ({"endingPosition": "LATEST"}, "'endingPosition': applies to batch reads only"),
        ({"endpointUrl": "127.0.0.1:4568"}, "'endpointUrl': '127.0.0.1:4568' is not an http(s) URL"),
        ({"awsSecretKey": SECRET}, "static credentials need both awsAccessKeyId and awsSecretKey"),
    ],
)
def test_invalid_options_name_the_option(spark, kinesis_local, stream, tmp_path, change, expected):
    # Every case carries a secret (local Kinesis takes any key), so that the check below can fail.
    options = base(kinesis_local.endpoint, stream, tmp_path) | {
        "awsAccessKeyId": "AKIDEXAMPLE",
        "awsSecretKey": SECRET,
    }
    if "awsSecretKey" in change:
        options.pop("awsAccessKeyId")
    for key, value in change.items():
        if value is None:
            options.pop(key)
        else:
            options[key] = value
    message = start_query(spark, options, tmp_path)
    assert expected in message
    assert SECRET not in message


def test_missing_stream(spark, kinesis_local, tmp_path):
    message = start_query(spark, base(kinesis_local.endpoint, "no-such-stream", tmp_path), tmp_path)
    assert "stream 'no-such-stream' in region 'us-east-1'" in message and "does not exist" in message


def test_unreachable_endpoint(spark, tmp_path):
    from pyspark_kinesis.cli.local_kinesis import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    message = start_query(spark, base(endpoint, "orders", tmp_path), tmp_path)
    assert f"Cannot reach Kinesis for stream 'orders' in region 'us-east-1' at endpoint {endpoint}" in message


class _Refuse(BaseHTTPRequestHandler):
    """Answers like Kinesis does to a key it does not know."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {
                "__type": "UnrecognizedClientException",
                "message": "The security token included in the request is invalid.",
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_refused_credentials_are_reported_without_the_secret(spark, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        options = base(f"http://127.0.0.1:{server.server_port}", "orders", tmp_path)
        options.update(awsAccessKeyId="AKIDEXAMPLE", awsSecretKey=SECRET, sessionToken=SECRET + "-token")
        message = start_query(spark, options, tmp_path)
    finally:
        server.shutdown()
    assert "AWS refused the credentials" in message and "UnrecognizedClientException" in message
    assert SECRET not in message


def test_metadata_path_that_cannot_be_written(spark, kinesis_local, stream, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    options = base(kinesis_local.endpoint, stream, tmp_path)
    options["metadataPath"] = str(blocker / "meta")
    message = start_query(spark, options, tmp_path)
    assert "'metadataPath': cannot write batch-end records there" in message


def _run_once(spark, options: dict, checkpoint: Path) -> None:
    r = spark.readStream.format("kinesis")
    for key, value in options.items():
        r = r.option(key, value)
    run_available_now(spark, r.load(), str(checkpoint), Collector())


def test_checkpoint_whose_side_records_are_missing(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    name = new_stream(kin, shards=1)
    put(kin, name, 0, 10)
    options = base(kinesis_local.endpoint, name, tmp_path) | {"startingPosition": "TRIM_HORIZON"}
    _run_once(spark, options, tmp_path / "cp")
    shutil.rmtree(tmp_path / "m")
    message = start_query(spark, options, tmp_path)
    assert "metadataPath" in message and "holds no records for this checkpoint" in message


def test_checkpoint_of_another_stream(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    first, second = new_stream(kin, shards=1), new_stream(kin, shards=1)
    options = base(kinesis_local.endpoint, first, tmp_path) | {"startingPosition": "TRIM_HORIZON"}
    _run_once(spark, options, tmp_path / "cp")
    message = start_query(spark, options | {"streamName": second}, tmp_path)
    assert (
        "checkpoint was written for Kinesis stream(s) arn:" in message and f":stream/{first}, but" in message
    )


def test_secrets_stay_out_of_checkpoint_records_and_progress(spark, kinesis_local, tmp_path):
    kin = client(kinesis_local.endpoint)
    name = new_stream(kin, shards=1)
    put(kin, name, 0, 10)
    options = base(kinesis_local.endpoint, name, tmp_path) | {
        "startingPosition": "TRIM_HORIZON",
        "awsAccessKeyId": "000000000000",
        "awsSecretKey": SECRET,
    }
    r = spark.readStream.format("kinesis")
    for key, value in options.items():
        r = r.option(key, value)
    query = (
        r.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    progress = "\n".join(p.json for p in query.recentProgress)
    assert query.exception() is None
    assert sum(p["numInputRows"] for p in query.recentProgress) == 10
    assert SECRET not in progress
    for path in list((tmp_path / "cp").rglob("*")) + list((tmp_path / "m").rglob("*")):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"secret found in {path}"


def load_error(spark, options: dict) -> str:
    """The error `.load()` raises (no query is started), or a failure when it raises none."""
    r = spark.readStream.format("kinesis").options(**options)
    try:
        r.load()
    except Exception as exc:
        return str(exc)
    raise AssertionError(
        f"`.load()` with {sorted(options)} raised nothing; the error would come at query start"
    )


@pytest.mark.parametrize(
    "case", ["missing stream", "dead port", "metadataPath a file", "metadataPath under a file"]
)
def test_what_load_can_check_fails_at_load_with_the_connectors_message_last(
    spark, kinesis_local, stream, tmp_path, case
):
    """A missing stream, a wrong endpoint and a metadataPath that cannot hold records fail at `.load()`
    (PySpark reports query-start errors in a trace of over a hundred lines that ends with its own
    UnboundLocalError); the trace is short and its last line is the connector's message."""
    from pyspark_kinesis.cli.local_kinesis import free_port

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    options = base(kinesis_local.endpoint, stream, tmp_path)
    expected = {
        "missing stream": "stream 'no-such-stream' in region 'us-east-1'",
        "dead port": "Cannot reach Kinesis for stream",
        "metadataPath a file": "'metadataPath': cannot write batch-end records there",
        "metadataPath under a file": "'metadataPath': cannot write batch-end records there",
    }[case]
    if case == "missing stream":
        options["streamName"] = "no-such-stream"
    elif case == "dead port":
        options["endpointUrl"] = f"http://127.0.0.1:{free_port()}"
    elif case == "metadataPath a file":
        options["metadataPath"] = str(blocker)
    else:
        options["metadataPath"] = str(blocker / "meta")
    message = load_error(spark, options)
    lines = [line for line in message.splitlines() if line.strip()]
    last = lines[-1] if not lines[-1].lstrip().startswith("SQLSTATE") else lines[-2]
    assert expected in last, message
    assert len(lines) < 30, f"{len(lines)} lines:\n{message}"


# What each case of a newcomer's bad input must end with (bad_input_app.py runs them as a user's script).
FIRST_HOUR = {
    "misspelled option": "Did you mean 'startingPosition'?",
    "missing stream": "stream 'no-such-stream' in region 'us-east-1'",
    "wrong port": "Cannot reach Kinesis for stream",
    "missing metadataPath": "'metadataPath': missing",
    "bad startingPosition": "'startingPosition': unknown position 'BEGINNING'",
    "no credentials": "No AWS credentials found",
    "sink: missing stream": "stream 'no-such-stream' in region 'us-east-1'",
    "sink: misspelled option": "Did you mean 'aggregate'?",
    "sink: no data column": "the DataFrame has no 'data' column",
}
MAX_TRACE_LINES = 20  # (less the user's own frames and, for a streaming query, Spark's description of it)


def test_a_newcomers_bad_input_ends_a_short_trace_with_the_connectors_message(
    kinesis_local, stream, tmp_path
):
    """Each case's trace as Python prints it for the user's script: at most ~20 lines besides the
    script's own frames, the connector's message last (a streaming query's error is followed by Spark's
    description of the query, which PySpark prints and we cannot remove), our frames at most one per
    trace Spark quotes, and no PySpark UnboundLocalError after it."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    app = Path(__file__).with_name("bad_input_app.py")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.bad_input_app",
            kinesis_local.endpoint,
            stream,
            str(tmp_path),
        ],
        cwd=app.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    traces = {d["case"]: d["trace"] for d in map(json.loads, done.stdout.splitlines())}
    assert set(traces) == set(FIRST_HOUR), done.stderr[-3000:]
    for case, expected in FIRST_HOUR.items():
        trace = traces[case]
        ours = trace.split("\n=== Streaming Query ===")[0]
        lines = [line for line in ours.splitlines() if line.split("SQLSTATE: ")[0].strip()]
        script = _script_frame_lines(lines, app.name)
        shown = [line for index, line in enumerate(lines) if index not in script]
        last = shown[-1].split(" SQLSTATE: ")[0]
        assert expected in last, f"{case}: the last line is not the message:\n{trace}"
        assert len(shown) <= MAX_TRACE_LINES, f"{case}: {len(shown)} lines:\n{trace}"
        assert "UnboundLocalError" not in trace, f"{case}:\n{trace}"
        ours_frames = [
            line for line in shown if "pyspark_kinesis" in line and line.lstrip().startswith("File ")
        ]
        assert len(ours_frames) <= 2, f"{case}: the connector's frames are shown:\n{trace}"


def _script_frame_lines(lines: list[str], script: str) -> set[int]:
    """The indexes of the lines that show the user's script's own frames (its file line and the source
    lines under it), which depend on the script, not on us."""
    out: set[int] = set()
    inside = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith("File "):
            inside = script in line
        elif not line.startswith("  "):
            inside = False
        if inside:
            out.add(index)
    return out
