"""A fault-injecting HTTP proxy in front of a local Kinesis, for tests on loopback.

It forwards every call unchanged, except PutRecords: a chosen fraction of the records in each call is
*not* forwarded, and the response reports them as failed with ProvisionedThroughputExceededException,
merged in request order with the real results of the forwarded ones. So the server holds exactly the
records the client was told succeeded, as with real throttling. Counts of injected faults are kept.
(The local servers check that requests are signed, not the signature itself, so the rewritten body
is accepted.)
"""

from __future__ import annotations

import http.client
import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class FaultProxy:
    def __init__(self, target: str, reject_fraction: float = 0.0, seed: int = 0) -> None:
        parsed = urlparse(target)
        self.target_host, self.target_port = parsed.hostname, parsed.port
        self.reject_fraction = reject_fraction
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.rejected = 0
        self.forwarded_records = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                target = self.headers.get("X-Amz-Target", "")
                if target.endswith(".PutRecords") and proxy.reject_fraction > 0:
                    status, headers, payload = proxy.put_records(self.headers, body)
                else:
                    status, headers, payload = proxy.forward(self.headers, body)
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "date",
                        "server",
                    ):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def forward(self, headers, body: bytes):
        connection = http.client.HTTPConnection(self.target_host, self.target_port, timeout=60)
        try:
            send = {
                k: v for k, v in headers.items() if k.lower() not in ("host", "content-length", "connection")
            }
            send["Content-Length"] = str(len(body))
            connection.request("POST", "/", body=body, headers=send)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def put_records(self, headers, body: bytes):
        request = json.loads(body)
        records = request["Records"]
        with self.lock:
            reject = [self.rng.random() < self.reject_fraction for _ in records]
        kept = [r for r, out in zip(records, reject, strict=True) if not out]
        results = []
        if kept:
            status, response_headers, payload = self.forward(
                headers, json.dumps(dict(request, Records=kept)).encode()
            )
            if status != 200:
                return status, response_headers, payload
            results = json.loads(payload)["Records"]
        else:
            response_headers = [("Content-Type", "application/x-amz-json-1.1")]
        merged, taken = [], iter(results)
        for out in reject:
            merged.append(
                {
                    "ErrorCode": "ProvisionedThroughputExceededException",
                    "ErrorMessage": "Rate exceeded (injected)",
                }
                if out
                else next(taken)
            )
        failed = sum(1 for r in merged if "ErrorCode" in r)
        with self.lock:
            self.rejected += sum(reject)
            self.forwarded_records += len(kept)
        payload = json.dumps({"FailedRecordCount": failed, "Records": merged}).encode()
        return 200, [("Content-Type", "application/x-amz-json-1.1")], payload

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
