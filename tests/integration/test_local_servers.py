"""The local Kinesis servers the tests and the demo run: a request its client aborts mid-body (an
executor killed while it sent a call) ends that request, not the server (kinesalite threw it uncaught)."""

from __future__ import annotations

import socket
import time

import pytest

from pyspark_kinesis.cli.local_kinesis import LocalKinesis
from tests.helpers import client

pytestmark = pytest.mark.kinesis


def test_kinesalite_survives_a_request_aborted_mid_body():
    with LocalKinesis("kinesalite") as server:
        host, port = server.endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.1\r\n"
                b'X-Amz-Target: Kinesis_20131202.ListStreams\r\nContent-Length: 1000\r\n\r\n{"Lim'
            )
            time.sleep(0.2)
        time.sleep(0.5)
        assert server.process is not None and server.process.poll() is None, "kinesalite exited"
        assert "StreamNames" in client(server.endpoint).list_streams()


@pytest.mark.parametrize("kind", ["kinesis-local", "kinesalite"])
def test_every_port_a_local_server_opens_is_on_loopback(kind):
    """Any credentials work on the local servers: they must not be reachable from the network
    (kinesis-local binds every interface by itself)."""
    import psutil

    with LocalKinesis(kind) as server:
        assert server.process is not None
        owned = [server.process, *psutil.Process(server.process.pid).children(recursive=True)]
        listening = [
            c.laddr
            for p in owned
            for c in psutil.Process(p.pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
        assert "StreamNames" in client(server.endpoint).list_streams()


def test_kinesalite_serves_https_with_a_certificate_the_clients_trust(tmp_path, monkeypatch):
    """The benchmarks' TLS figures (`bench.sh read --tls`): the server really speaks TLS, with the
    certificate `trusted_certificate` makes and every AWS client of the process trusts."""
    import boto3
    import botocore.exceptions
    from benchmarks.local_setup import trusted_certificate

    with pytest.raises(ValueError, match="use kinesalite"):
        LocalKinesis("kinesis-local", tls=("key.pem", "cert.pem"))
    monkeypatch.setenv("AWS_CA_BUNDLE", "")  # (trusted_certificate sets it; monkeypatch restores it)
    tls = trusted_certificate(str(tmp_path))
    with LocalKinesis("kinesalite", tls=tls) as server:
        assert server.endpoint.startswith("https://127.0.0.1:")
        assert "StreamNames" in client(server.endpoint).list_streams()
        monkeypatch.delenv("AWS_CA_BUNDLE")
        untrusting = boto3.client(
            "kinesis",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="y",
        )
        with pytest.raises(botocore.exceptions.SSLError):
            untrusting.list_streams()
