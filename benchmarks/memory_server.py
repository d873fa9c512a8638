"""A benchmark-only Kinesis endpoint that serves GetRecords from memory, in its own process.

Why: on the local emulators the server, not the reader, sets the pace (kinesalite serves ~25-30k
records/s of 1 KB on this machine and shares its cores with Spark), so an end-to-end figure there
says little about what the connector itself can do. This server answers the calls a reader makes
(DescribeStreamSummary, ListShards, GetShardIterator, GetRecords) for one stream whose records are
made once at start, each already encoded as its JSON fragment of a GetRecords body in the real wire
format (base64 payload, 56-digit sequence number, epoch-seconds arrival time). A GetRecords answer is
a slice of those bytes between a fixed head and tail: no per-record work per call, so its own cost
stays far below the reader's and the figures measured against it are the connector's ceiling.

It keeps Kinesis' per-call limits (10,000 records, 10 MB) and its caught-up signal (MillisBehindLatest
0 at the end of a shard); it has no read quota and no authentication. It accepts PutRecords (for the
sink's CPU benchmark, `bench.sh sink-cpu`): every record succeeds at once, placed in the shard its
hash key falls in, and is dropped (nothing written is read back). Never a test fixture
and never for production: only `bash scripts/bench.sh cpu --server memory` starts it, on 127.0.0.1.

Run: python -m benchmarks.memory_server --shards 4 --records 100000 --size 1000 [--tls KEY CERT]
It prints `PORT <n>` once it listens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pybase64

STREAM = "bench-memory"
MAX_RECORDS = 10_000
MAX_BYTES = 10 * 1024 * 1024
ARRIVAL = 1_763_900_000.0  # a fixed arrival time (2025-11-23): records are made once, before any read


def sequence_number(shard: int, position: int) -> str:
    """56 digits like Kinesis' own, increasing with the position; the shard and position read back."""
    return f"49{shard:06d}{position:048d}"


def position_of(sequence: str) -> tuple[int, int]:
    return int(sequence[2:8]), int(sequence[8:])


class Shard:
    """One shard's records as one bytes object of JSON fragments, each followed by a comma, and where
    each fragment starts: an answer from position a to b is `blob[starts[a]:starts[b] - 1]`."""

    def __init__(self, index: int, records: int, size: int, payloads: list[str]) -> None:
        parts = []
        starts = [0]
        for position in range(records):
            fragment = (
                f'{{"SequenceNumber":"{sequence_number(index, position)}",'
                f'"ApproximateArrivalTimestamp":{ARRIVAL + position / 1000:.3f},'
                f'"Data":"{payloads[position % len(payloads)]}","PartitionKey":"{position}"}},'
            ).encode()
            parts.append(fragment)
            starts.append(starts[-1] + len(fragment))
        self.blob = memoryview(b"".join(parts))
        self.starts = starts
        self.records = records
        self.per_call = max(1, min(MAX_RECORDS, MAX_BYTES // max(1, size)))

    def answer(self, position: int, limit: int) -> tuple[memoryview, int]:
        """The records' bytes from `position` and the position after them."""
        end = min(self.records, position + min(limit, self.per_call))
        if end <= position:
            return memoryview(b""), position
        return self.blob[self.starts[position] : self.starts[end] - 1], end


class Stream:
    def __init__(self, shards: int, records: int, size: int) -> None:
        # A few distinct random payloads, rotated: decoding costs the same for any bytes.
        payloads = [pybase64.b64encode(os.urandom(size)).decode() for _ in range(16)]
        self.shards = [Shard(i, records, size, payloads) for i in range(shards)]

    def list_shards(self) -> dict[str, object]:
        width = 2**128 // len(self.shards)
        shards = []
        for i in range(len(self.shards)):
            end = 2**128 - 1 if i == len(self.shards) - 1 else (i + 1) * width - 1
            shards.append(
                {
                    "ShardId": f"shardId-{i:012d}",
                    "HashKeyRange": {"StartingHashKey": str(i * width), "EndingHashKey": str(end)},
                    "SequenceNumberRange": {"StartingSequenceNumber": sequence_number(i, 0)},
                }
            )
        return {"Shards": shards}

    def summary(self) -> dict[str, object]:
        return {
            "StreamDescriptionSummary": {
                "StreamName": STREAM,
                "StreamARN": f"arn:aws:kinesis:us-east-1:000000000000:stream/{STREAM}",
                "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": "PROVISIONED"},
                "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": ARRIVAL - 3600,
                "EnhancedMonitoring": [],
                "EncryptionType": "NONE",
                "OpenShardCount": len(self.shards),
                "ConsumerCount": 0,
            }
        }

    def iterator(self, request: dict[str, str]) -> dict[str, object]:
        shard = int(request["ShardId"].rsplit("-", 1)[-1])
        kind = request["ShardIteratorType"]
        if kind in ("TRIM_HORIZON", "AT_TIMESTAMP"):
            position = 0
        elif kind == "LATEST":
            position = self.shards[shard].records
        else:
            position = position_of(request["StartingSequenceNumber"])[1]
            position += 1 if kind == "AFTER_SEQUENCE_NUMBER" else 0
        return {"ShardIterator": f"{shard}:{position}"}

    def put(self, request: dict[str, object]) -> dict[str, object]:
        """Every record accepted, in the shard of its hash key (explicit, or the partition key's MD5)."""
        width = 2**128 // len(self.shards)
        answers = []
        for record in request["Records"]:  # type: ignore[attr-defined]
            key = record.get("ExplicitHashKey")
            hashed = (
                int(key) if key else int.from_bytes(hashlib.md5(record["PartitionKey"].encode()).digest())
            )
            shard = min(hashed // width, len(self.shards) - 1)
            answers.append({"SequenceNumber": sequence_number(shard, 0), "ShardId": f"shardId-{shard:012d}"})
        return {"FailedRecordCount": 0, "Records": answers, "EncryptionType": "NONE"}

    def records(self, request: dict[str, object]) -> list[bytes | memoryview]:
        index, _, at = str(request["ShardIterator"]).partition(":")
        shard = self.shards[int(index)]
        body, end = shard.answer(int(at), int(request.get("Limit") or MAX_RECORDS))  # type: ignore[call-overload]
        behind = 0 if end >= shard.records else 1000
        tail = f'],"NextShardIterator":"{index}:{end}","MillisBehindLatest":{behind}}}'.encode()
        return [b'{"Records":[', body, tail]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects
    disable_nagle_algorithm = True  # else headers and body in two writes wait for a delayed ACK (40 ms)
    stream: Stream

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
        if operation == "GetRecords":
            parts = self.stream.records(request)
        elif operation == "GetShardIterator":
            parts = [json.dumps(self.stream.iterator(request)).encode()]
        elif operation == "ListShards":
            parts = [json.dumps(self.stream.list_shards()).encode()]
        elif operation == "DescribeStreamSummary":
            parts = [json.dumps(self.stream.summary()).encode()]
        elif operation == "PutRecords":
            parts = [json.dumps(self.stream.put(request)).encode()]
        else:
            self._send(
                400, [json.dumps({"__type": "UnknownOperationException", "message": operation}).encode()]
            )
            return
        self._send(200, parts)

    def _send(self, status: int, parts: list[bytes | memoryview]) -> None:
        head = (
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Bad Request'}\r\n"
            "Content-Type: application/x-amz-json-1.1\r\n"
            f"Content-Length: {sum(len(p) for p in parts)}\r\n\r\n"
        ).encode()
        # One gathered send of the head and the body's slices: no copy of the records, one packet train.
        pending = [memoryview(head), *(memoryview(p) for p in parts)]
        if isinstance(self.connection, ssl.SSLSocket):  # (TLS has no gathered send: one write per part)
            for part in pending:
                self.connection.sendall(part)
            return
        while pending:
            sent = self.connection.sendmsg(pending)
            while pending and sent >= len(pending[0]):
                sent -= len(pending[0])
                pending.pop(0)
            if pending and sent:
                pending[0] = pending[0][sent:]

    def log_message(self, format: str, *args: object) -> None:
        """Silent: a log line per call would cost more than the answer."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--records", type=int, required=True, help="records per shard")
    parser.add_argument("--size", type=int, required=True, help="payload bytes per record")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--tls", nargs=2, metavar=("KEY", "CERT"), help="serve HTTPS with this key and certificate"
    )
    args = parser.parse_args(argv)
    Handler.stream = Stream(args.shards, args.records, args.size)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    if args.tls:  # (OpenSSL does the encryption: the server's own cost stays far below a reader's)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile=args.tls[1], keyfile=args.tls[0])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
