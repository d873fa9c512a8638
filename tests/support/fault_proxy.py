"""A counting, fault-injecting HTTP proxy in front of a local Kinesis, for tests and benchmarks on
loopback.

Every call is counted by (agent, operation), the agent being the connector part named in the
User-Agent (`pyspark-kinesis/planner`, `/reader`, `/sink`; "other" for anything else), with the
monotonic time it arrived: that is how the tests and `bench-api` show that the driver never calls
GetRecords and how often idle shards are polled.

GetRecords faults, each at its own rate (`read_faults`): "throttle" (400 ProvisionedThroughputExceeded),
"internal" (500 InternalFailure), "unavailable" (503), "expired" (400 ExpiredIteratorException), and
"reset" (the real response is cut off mid-body and the connection closed). ListShards and
GetShardIterator faults (`call_faults`): "limit" (400 LimitExceededException), "internal",
"unavailable". Any call may be held back before it is answered (`delay`), and while the server is
down (restarted by a chaos run) every call is answered 503. Throttling, 5xx and resets are
botocore's and the fetch loop's to retry; an expired iterator is the connector's to re-obtain.

GetRecords answers can also be rewritten, to show the connector what the local servers cannot produce:
`trim(shard, seq)` drops a shard's records below a sequence number (data aged out past retention: the
servers keep 24 h at least) from GetRecords answers and SubscribeToShard events, and answers a
GetShardIterator or SubscribeToShard at a sequence number below it either as Kinesis may: with an
iterator that silently starts at the oldest record left (`aged.mode` "silent", the default), or
with an InvalidArgumentException ("error"; see `aged_out`); `fail_next[(agent, operation)] = n` refuses the next n
calls of an operation from one connector part with LimitExceededException (DescribeStreamSummary's
20 calls per second per account, say); `max_limit` caps the records per response and marks a full one as behind
the tip (a backlog larger than one response; the local servers answer MillisBehindLatest 0 anyway), and `strip_partition_keys` removes PartitionKey (records put with the service's AUTO record
distribution), and the shards in `gone` answer ResourceNotFoundException (expired past retention). Which shard a response belongs to is learned from the GetShardIterator call its iterator
chain started with.

SubscribeToShard (enhanced fan-out) is relayed as a stream, with the `initial-response` event kinesis-local
leaves out added in front (`event_stream`); each call is recorded with its time, calling process,
consumer and shard (`subscriptions`), and may be refused (`subscribe_faults`: "in_use"
ResourceInUseException, "limit", "internal").

It forwards every other call unchanged, except PutRecords: a chosen fraction of the records in each call is
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
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import urlparse

from tests.support.aged_out import AgedOut

_AGENT = re.compile(r"pyspark-kinesis/(\w+)")
_PID = re.compile(r"pid/(\d+)")
_CALLER = re.compile(r"pyspark-kinesis/(\S+) pid/(\d+)")


def caller_of(user_agent: str) -> str:
    """`role pid` from a connector client's User-Agent (see `aws.client`), or ""."""
    found = _CALLER.search(user_agent)
    return f"{found.group(1)} {found.group(2)}" if found else ""


SERVER_DOWN = json.dumps({"__type": "ServiceUnavailable", "message": "server down"}).encode()


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/x-amz-json-1.1")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


def send_fault(handler: BaseHTTPRequestHandler, fault: str) -> None:
    """An injected error answer, as Kinesis words it."""
    code, kind, message = FaultProxy.READ_FAULTS[fault]
    send_json(handler, code, json.dumps({"__type": kind, "message": message}).encode())


class FaultProxy:
    READ_FAULTS: ClassVar[dict[str, tuple[int, str, str]]] = {
        "throttle": (400, "ProvisionedThroughputExceededException", "Rate exceeded for shard (injected)"),
        "internal": (500, "InternalFailure", "Internal failure (injected)"),
        "unavailable": (503, "ServiceUnavailable", "Service unavailable (injected)"),
        "expired": (400, "ExpiredIteratorException", "Iterator expired (injected)"),
        "limit": (400, "LimitExceededException", "Rate exceeded for stream (injected)"),
        "in_use": (400, "ResourceInUseException", "Another active subscription exists (injected)"),
    }
    # Operations `call_faults` apply to (the driver's listing, the executors' iterators); a query's
    # start-up check (DescribeStreamSummary) and the sink's writes are left alone.
    CALL_FAULT_OPERATIONS = ("ListShards", "GetShardIterator")

    def __init__(
        self,
        target: str,
        reject_fraction: float = 0.0,
        seed: int = 0,
        read_faults: dict[str, float] | None = None,
        call_faults: dict[str, float] | None = None,
        delay: tuple[float, float] = (0.0, 0.0),
        subscribe_faults: dict[str, float] | None = None,
        strict: bool = False,
        time_scale: float = 1.0,
    ) -> None:
        """`read_faults` / `call_faults`: fault kind -> rate, for GetRecords / CALL_FAULT_OPERATIONS;
        `delay`: (rate, longest delay in seconds) of responses held back before they are sent;
        `subscribe_faults`: fault kind ("in_use", "limit", "internal") -> rate, for SubscribeToShard;
        `strict`: the service's quotas and rules enforced and their violations counted (`service_rules`;
        `time_scale` speeds up its clock, for iterator expiry)."""
        from tests.support.service_rules import ServiceRules

        parsed = urlparse(target)
        self.target_host, self.target_port = parsed.hostname, parsed.port
        self.reject_fraction = reject_fraction
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.rejected = 0
        self.forwarded_records = 0
        self.read_faults = read_faults or {}
        self.call_faults = call_faults or {}
        self.delay = delay
        self.subscribe_faults = subscribe_faults or {}
        # SubscribeToShard calls: (monotonic time, calling process id (0: unknown), consumer ARN, shard
        # id, "ok", the fault injected, or the exception the server refused it with)
        self.subscriptions: list[tuple[float, int, str, str, str]] = []
        self.injected: dict[str, int] = {}
        self.calls: Counter[tuple[str, str]] = Counter()  # (agent, operation) -> count
        self.call_times: list[tuple[float, str, str]] = []  # (monotonic time, agent, operation)
        self.aged = AgedOut(self.note)  # trimmed shard heads (see `aged_out`)
        self.fail_next: dict[tuple[str, str], int] = {}  # (agent, operation) -> calls still to refuse
        self.max_limit: int | None = None  # GetRecords Limit is capped to this
        self.strip_partition_keys = False
        # Every subscription ended by the proxy after this many events: ("end", n) cleanly, as Kinesis
        # ends each subscription after 5 minutes, or ("reset", n) in the middle of the next event, as
        # a broken connection does (the client sees a TCP reset).
        self.subscription_cut: tuple[str, int] | None = None
        # (see `pick_fault`; None: faults only as drawn)
        self.ensure_after: int | None = None
        self._family_calls: dict[str, int] = {}
        self._family_picked: dict[str, set[str]] = {}
        self.rules = ServiceRules(time_scale=time_scale) if strict else None
        self._shard_of: dict[str, str] = {}  # shard iterator -> shard id
        self.gone: set[str] = set()  # shard ids whose iterators and reads answer ResourceNotFound (expired)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                target = self.headers.get("X-Amz-Target", "")
                agent = proxy.count(self.headers.get("User-Agent", ""), target)
                operation = target.rsplit(".", 1)[-1]
                if proxy.refuse_next(agent, operation):
                    send_fault(self, "limit")
                    proxy.note(f"refused {operation}")
                    return
                refused = proxy.aged.refusal(operation, body)
                if refused is not None:
                    send_json(self, 400, refused)
                    return
                refused = proxy.strict_refusal(operation, body, caller_of(self.headers.get("User-Agent", "")))
                if refused is not None:
                    send_json(
                        self, refused[0], json.dumps({"__type": refused[1], "message": refused[2]}).encode()
                    )
                    return
                if operation == "SubscribeToShard":
                    proxy.subscribe(self, body)
                    return
                if operation == "GetRecords":
                    fault = proxy.pick_fault(proxy.read_faults, "read")
                elif operation in FaultProxy.CALL_FAULT_OPERATIONS:
                    fault = proxy.pick_fault(proxy.call_faults, "call")
                else:
                    fault = None
                proxy.maybe_delay()
                if fault == "reset":
                    status, headers, payload = proxy.forward(self.headers, body)
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-amz-json-1.1")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    proxy.note(fault)
                    return
                if fault is not None:
                    send_fault(self, fault)
                    proxy.note(fault)  # counted once delivered (a client gone meanwhile got none)
                    return
                if target.endswith(".PutRecords") and proxy.reject_fraction > 0:
                    status, headers, payload = proxy.put_records(self.headers, body)
                elif operation in ("GetShardIterator", "GetRecords"):
                    status, headers, payload = proxy.read_call(operation, self.headers, body)
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

    def count(self, user_agent: str, target: str) -> str:
        """Count a call; returns the calling connector part ("other" for anything else)."""
        match = _AGENT.search(user_agent)
        agent, operation = (match.group(1) if match else "other"), target.rsplit(".", 1)[-1]
        with self.lock:
            self.calls[(agent, operation)] += 1
            self.call_times.append((time.monotonic(), agent, operation))
        return agent

    def refuse_next(self, agent: str, operation: str) -> bool:
        """Whether this call is one of the next `fail_next` calls to refuse (counted once answered)."""
        with self.lock:
            left = self.fail_next.get((agent, operation), 0)
            if left <= 0:
                return False
            self.fail_next[(agent, operation)] = left - 1
        return True

    def note(self, kind: str) -> None:
        """Count one injected fault of `kind`."""
        with self.lock:
            self.injected[kind] = self.injected.get(kind, 0) + 1

    def maybe_delay(self) -> None:
        rate, longest = self.delay
        if rate <= 0:
            return
        with self.lock:
            hold = self.rng.uniform(0, longest) if self.rng.random() < rate else 0.0
        if hold:
            time.sleep(hold)
            self.note("delay")

    def pick_fault(self, faults: dict[str, float], family: str = "") -> str | None:
        """The fault this call gets, if any (drawn here, counted by `note` once delivered). With
        `ensure_after` set, a kind of `family` (calls that draw from the same rates) not drawn in its
        first `ensure_after` calls is given to the next call that draws none: a chaos run that plans a
        kind delivers it, however few calls a rare kind's rate meets (the draws stay as they were)."""
        if not faults:
            return None  # no draw: a proxy's fault sequence depends only on the calls that can fault
        with self.lock:
            draw = self.rng.random()
            calls = self._family_calls[family] = self._family_calls.get(family, 0) + 1
            picked = self._family_picked.setdefault(family, set())
            for kind, rate in faults.items():
                if draw < rate:
                    picked.add(kind)
                    return kind
                draw -= rate
            if self.ensure_after is not None and calls > self.ensure_after:
                for kind, rate in faults.items():
                    if rate > 0 and kind not in picked:
                        picked.add(kind)
                        return kind
        return None

    def note_down(self) -> None:
        self.note("server-down")

    def forward(self, headers, body: bytes):
        """The server's answer; 503 ServiceUnavailable while the server is down (being restarted), as
        a load balancer in front of Kinesis would answer."""
        connection = http.client.HTTPConnection(self.target_host, self.target_port, timeout=60)
        try:
            send = {
                k: v for k, v in headers.items() if k.lower() not in ("host", "content-length", "connection")
            }
            send["Content-Length"] = str(len(body))
            connection.request("POST", "/", body=body, headers=send)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        except OSError:
            self.note_down()
            return 503, [("Content-Type", "application/x-amz-json-1.1")], SERVER_DOWN
        finally:
            connection.close()

    def subscribe(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        """SubscribeToShard: counted, maybe refused (`subscribe_faults`), else relayed as a stream with
        the `initial-response` kinesis-local leaves out (see `event_stream`)."""
        from tests.support.event_stream import relay_subscription

        body = self.aged.moved("SubscribeToShard", body)
        request = json.loads(body)
        fault = self.pick_fault(self.subscribe_faults, "subscribe")
        pid = _PID.search(handler.headers.get("User-Agent", ""))
        with self.lock:
            entry = len(self.subscriptions)
            self.subscriptions.append(
                (
                    time.monotonic(),
                    int(pid.group(1)) if pid else 0,
                    request.get("ConsumerARN", ""),
                    request.get("ShardId", ""),
                    fault or "ok",
                )
            )
        if fault is not None:
            send_fault(handler, fault)
            self.note(f"subscribe {fault}")  # (apart from the same refusals of other calls)
            return

        def first(message: tuple[str, str]) -> None:
            if message[0] == "exception":  # refused by the server itself (e.g. ResourceInUse)
                with self.lock:
                    self.subscriptions[entry] = (*self.subscriptions[entry][:4], message[1])
            elif self.rules is not None:  # a subscription is open: the service's 5 seconds start
                self.rules.subscribe_succeeded(request.get("ConsumerARN", ""), request.get("ShardId", ""))

        shard = request.get("ShardId", "")
        reached = relay_subscription(
            handler,
            (str(self.target_host), int(self.target_port or 0)),
            body,
            first,
            lambda payload: self.aged.event(shard, payload),
            self.subscription_cut,
            self.note,
        )
        if not reached:  # the server is down (being restarted): 503, counted, as for other calls
            self.note_down()
            with self.lock:
                self.subscriptions[entry] = (*self.subscriptions[entry][:4], "server-down")
            send_json(handler, 503, SERVER_DOWN)

    def strict_refusal(self, operation: str, body: bytes, caller: str = "") -> tuple[int, str, str] | None:
        """In strict mode, how Kinesis would refuse this call (see `service_rules`), or None. `caller`:
        who calls, as its User-Agent says (role and pid), for the rules' details."""
        if self.rules is None:
            return None
        request = json.loads(body or b"{}")
        if operation == "SubscribeToShard":
            return self.rules.subscribe_refusal(
                request.get("ConsumerARN", ""), request.get("ShardId", ""), caller
            )
        if operation == "GetRecords":
            with self.lock:
                scope = self._shard_of.get(request.get("ShardIterator", ""), "")
        elif operation == "GetShardIterator":
            scope = request.get("ShardId", "")
        elif operation == "ListShards":
            scope = request.get("StreamARN") or request.get("StreamName") or "(by NextToken)"
        else:
            scope = ""
        return self.rules.refusal(operation, scope, request, caller)

    def trim(self, shard: str, below_seq: str) -> None:
        """From now on, records of `shard` below sequence number `below_seq` are gone (aged out)."""
        self.aged.trim(shard, below_seq)

    def read_call(self, operation: str, headers, body: bytes):
        """GetShardIterator / GetRecords, followed to their shard and rewritten as configured."""
        request = json.loads(body)
        with self.lock:
            shard = request.get("ShardId") or self._shard_of.get(request.get("ShardIterator", ""))
            expired = shard in self.gone
            if expired:
                self.injected["gone"] = self.injected.get("gone", 0) + 1
        if expired:
            message = (
                f"Shard {shard} in stream {request.get('StreamName', '?')} does not exist (expired, injected)"
            )
            payload = json.dumps({"__type": "ResourceNotFoundException", "message": message}).encode()
            return 400, [("Content-Type", "application/x-amz-json-1.1")], payload
        body = self.aged.moved(operation, body)
        if operation == "GetRecords" and self.max_limit is not None:
            request["Limit"] = min(int(request.get("Limit", 10_000)), self.max_limit)
            body = json.dumps(request).encode()
        status, response_headers, payload = self.forward(headers, body)
        if status != 200:
            return status, response_headers, payload
        answer = json.loads(payload)
        if self.rules is not None:
            read_shard = request.get("ShardId", "")
            if operation == "GetRecords":
                with self.lock:
                    read_shard = self._shard_of.get(request.get("ShardIterator", ""), "")
            size = sum(
                len(r.get("Data", "")) * 3 // 4 + len(r.get("PartitionKey", ""))
                for r in answer.get("Records", [])
            )
            self.rules.served(operation, read_shard, answer, size)
        with self.lock:
            if len(self._shard_of) > 100_000:
                self._shard_of.clear()
            if operation == "GetShardIterator":
                self._shard_of[answer["ShardIterator"]] = request["ShardId"]
                return status, response_headers, payload
            shard = self._shard_of.get(request["ShardIterator"])
            if shard is not None and answer.get("NextShardIterator"):
                self._shard_of[answer["NextShardIterator"]] = shard
            below = self.aged.below(shard or "")
        records = answer.get("Records", [])
        capped = self.max_limit is not None and len(records) >= self.max_limit
        if below is None and not self.strip_partition_keys and not capped:
            return status, response_headers, payload
        if capped:  # a page cut by the cap has more behind it: say so, as Kinesis does for a backlog
            answer["MillisBehindLatest"] = max(1000, int(answer.get("MillisBehindLatest") or 0))
        if below is not None:
            records = [r for r in records if int(r["SequenceNumber"]) >= below]
        if self.strip_partition_keys:
            records = [{k: v for k, v in r.items() if k != "PartitionKey"} for r in records]
        answer["Records"] = records
        return status, response_headers, json.dumps(answer, separators=(",", ":")).encode()

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
