"""Response bodies read in one call (aws/whole_body.py), against a real HTTP server on loopback and a
real botocore client: the records arrive as before, the connection goes back to the pool, a body cut
short of its Content-Length is botocore's retried ConnectionClosedError (it used to arrive truncated),
and streamed requests (SubscribeToShard) are left to botocore."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError, HTTPClientError, ReadTimeoutError, SSLError
from urllib3.exceptions import ProtocolError
from urllib3.exceptions import ReadTimeoutError as URLLib3ReadTimeoutError
from urllib3.exceptions import SSLError as URLLib3SSLError

from pyspark_kinesis.aws import client
from pyspark_kinesis.aws.whole_body import WholeBodySession, read_bodies_whole, read_body
from pyspark_kinesis.config.aws_settings import AwsSettings

PAYLOAD = bytes(range(256)) * 4  # 1 KB


def records_body(count: int) -> bytes:
    data = base64.b64encode(PAYLOAD).decode()
    records = [
        {
            "SequenceNumber": str(49_000_000 + i),
            "PartitionKey": f"k{i % 7}",
            "Data": data,
            "ApproximateArrivalTimestamp": 1_700_000_000.5,
        }
        for i in range(count)
    ]
    return json.dumps({"Records": records, "NextShardIterator": "next", "MillisBehindLatest": 0}).encode()


class Server:
    """Answers every POST with `body`, cut to `cut` bytes (Content-Length still the whole) when set;
    counts requests and the connections they came on."""

    def __init__(self, body: bytes, cut: int | None = None) -> None:
        self.body, self.cut = body, cut
        self.requests = 0
        self.connections: set[int] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests += 1
                server.connections.add(id(self.connection))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body if server.cut is None else server.body[: server.cut])
                self.wfile.flush()
                if server.cut is not None:
                    self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"


@contextmanager
def serving(body: bytes, cut: int | None = None) -> Iterator[Server]:
    server = Server(body, cut)
    thread = threading.Thread(target=server.http.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.http.shutdown()
        server.http.server_close()
        thread.join(10)


def kinesis(endpoint: str, attempts: int, agent: str) -> Any:
    settings = AwsSettings(region="us-east-1", endpoint_url=endpoint, access_key_id="a", secret_key="b")
    return client.kinesis_client(settings, max_attempts=attempts, agent=agent)


def test_a_large_response_arrives_whole_and_its_connection_is_reused() -> None:
    with serving(records_body(3000)) as server:  # about 4 MB of body
        made = kinesis(server.endpoint, 2, "whole-body-a")
        for _call in range(3):
            response = made.get_records(ShardIterator="it", Limit=10_000)
            records = response["Records"]
            assert len(records) == 3000
            assert records.data[0].as_py() == PAYLOAD and records.data[2999].as_py() == PAYLOAD
            assert response["NextShardIterator"] == "next"
        assert server.requests == 3
        assert len(server.connections) == 1  # each body read to its end released the connection


def test_a_body_cut_short_is_a_closed_connection_botocore_retries() -> None:
    body = records_body(50)
    with serving(body, cut=len(body) // 2) as server:
        made = kinesis(server.endpoint, 3, "whole-body-b")
        with pytest.raises(ConnectionClosedError):
            made.get_records(ShardIterator="it", Limit=10_000)
        assert server.requests == 3  # botocore's retry mode made every attempt


def test_the_connectors_clients_read_bodies_whole() -> None:
    made = kinesis("http://127.0.0.1:9", 2, "whole-body-c")
    assert isinstance(made._endpoint.http_session, WholeBodySession)
    bare = kinesis("http://127.0.0.1:9", 2, "whole-body-d")
    bare._endpoint.http_session = bare._endpoint.http_session._inner
    assert read_bodies_whole(bare) is True  # (a client botocore shaped as expected: wrapped, and said so)
    assert isinstance(bare._endpoint.http_session, WholeBodySession)
    glue = client.glue_client(
        AwsSettings(region="us-east-1", endpoint_url="http://127.0.0.1:9", access_key_id="a", secret_key="b"),
        "http://127.0.0.1:9",
    )
    assert isinstance(glue._endpoint.http_session, WholeBodySession)


def test_a_client_of_another_shape_is_left_alone() -> None:
    class Endpoint:
        http_session = object()

    class Client:
        _endpoint = Endpoint()

    odd = Client()
    assert read_bodies_whole(odd) is False
    assert odd._endpoint.http_session is Endpoint.http_session
    assert read_bodies_whole(object()) is False


class Request:
    url = "http://127.0.0.1:9/"

    def __init__(self, stream_output: bool) -> None:
        self.stream_output = stream_output


class Inner:
    """A scripted botocore session: records the stream_output each request was sent with."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[bool] = []
        self.fail = fail
        self.closed = False

    def send(self, request: Request) -> Any:
        self.sent.append(request.stream_output)
        if self.fail:
            raise ConnectionClosedError(endpoint_url=request.url)
        return Streamed()

    def close(self) -> None:
        self.closed = True


class Streamed:
    url = "http://127.0.0.1:9/"
    status_code = 200

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.raw = Raw(b"body")


class Raw:
    def __init__(self, body: bytes | None = None, error: Exception | None = None) -> None:
        self.body, self.error = body, error

    def read(self) -> bytes | None:
        if self.error is not None:
            raise self.error
        return self.body


def test_a_streamed_request_is_botocores_and_others_are_read_here() -> None:
    inner = Inner()
    session = WholeBodySession(inner)  # type: ignore[arg-type]
    streamed = Request(stream_output=True)
    response = session.send(streamed)
    assert isinstance(response, Streamed) and streamed.stream_output is True
    plain = Request(stream_output=False)
    read = session.send(plain)
    assert read.content == b"body" and read.status_code == 200
    assert read.url == Streamed.url and isinstance(read.raw, Raw)  # (the rest is botocore's response's)
    assert inner.sent == [True, True]  # botocore was told to leave the body unread
    assert plain.stream_output is False  # and the request is as it was, for botocore's retries
    session.close()
    assert inner.closed  # everything else is the wrapped session's


def test_the_request_is_restored_when_sending_fails() -> None:
    session = WholeBodySession(Inner(fail=True))  # type: ignore[arg-type]
    request = Request(stream_output=False)
    with pytest.raises(ConnectionClosedError):
        session.send(request)
    assert request.stream_output is False


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (URLLib3ReadTimeoutError(None, "/", "read timed out"), ReadTimeoutError),
        (URLLib3SSLError("bad record mac"), SSLError),
        (ProtocolError("Connection broken: IncompleteRead"), ConnectionClosedError),
        (OSError("reset"), HTTPClientError),
    ],
)
def test_a_failed_read_is_botocores_error_for_it(error: Exception, expected: type[Exception]) -> None:
    """What botocore's session would have raised, with what it carries: the cause, the endpoint (its
    retry and error messages name it) and, for a closed connection, the request."""
    request = Request(stream_output=False)
    with pytest.raises(expected) as raised:
        read_body(Raw(error=error), request)
    assert raised.value.__cause__ is error
    carried = raised.value.kwargs  # type: ignore[attr-defined]
    assert carried["error"] is error
    if expected is not HTTPClientError:
        assert carried["endpoint_url"] == Request.url
    if expected is ConnectionClosedError:
        assert raised.value.request is request  # type: ignore[attr-defined]


def test_an_empty_body_reads_as_empty_bytes() -> None:
    assert read_body(Raw(None), Request(stream_output=False)) == b""
