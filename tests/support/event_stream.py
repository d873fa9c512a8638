"""Test-only: SubscribeToShard passed through the fault proxy as a stream, made readable for botocore.

kinesis-local (kinesis-mock 0.6) implements SubscribeToShard, but its event stream starts with the
first `SubscribeToShardEvent`, without the `initial-response` event that Kinesis sends first and that
botocore's parser requires ("First event was not of type initial-response"). So that the connector's
production path (botocore's `subscribe_to_shard`, unchanged) can be tested against it, the fault
proxy forwards a subscription's body as it arrives and, when its first message is not an
`initial-response`, sends one (an empty JSON object, as Kinesis does) before it. Messages are framed
as the AWS event-stream format says (prelude with lengths and CRC32, string headers, payload, message
CRC32); botocore's own decoder reads the first message to tell. Never used outside tests and
benchmarks on loopback.
"""

from __future__ import annotations

import binascii
import http.client
import socket
import struct
from collections.abc import Callable
from typing import Any

from botocore.eventstream import EventStreamBuffer

_STRING = 7  # header value type: string


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return bytes([len(key)]) + key + bytes([_STRING]) + struct.pack(">H", len(text)) + text


def _frame(headers: bytes, payload: bytes) -> bytes:
    """Prelude (lengths and its CRC32), headers, payload, message CRC32."""
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + payload
    return message + struct.pack(">I", binascii.crc32(message) & 0xFFFFFFFF)


def event_message(event_type: str, payload: bytes, message_type: str = "event") -> bytes:
    """One event-stream message with the usual headers."""
    headers = (
        _header(":message-type", message_type)
        + _header(":event-type", event_type)
        + _header(":content-type", "application/json")
    )
    return _frame(headers, payload)


INITIAL_RESPONSE = event_message("initial-response", b"{}")


def first_message(data: bytes) -> tuple[str, str] | None:
    """(:message-type, its :event-type or :exception-type) of the first message in `data`, or None
    while it is incomplete."""
    if len(data) < 4 or len(data) < struct.unpack(">I", data[:4])[0]:
        return None
    buffer = EventStreamBuffer()
    buffer.add_data(data[: struct.unpack(">I", data[:4])[0]])
    for message in buffer:
        kind = str(message.headers.get(":message-type", ""))
        return kind, str(message.headers.get(":event-type") or message.headers.get(":exception-type") or "")
    return None


class Cut(Exception):
    """The relay stopped a subscription on purpose (`cut`): `reset` says whether the connection is to
    be reset (else the body ends cleanly)."""

    def __init__(self, reset: bool) -> None:
        super().__init__("cut")
        self.reset = reset


def relay(
    response: Any,
    write: Any,
    on_first: Any = None,
    max_chunks: int = 10_000_000,
    rewrite: Callable[[bytes], bytes] | None = None,
    cut: tuple[str, int] | None = None,
) -> int:
    """Forward an event-stream HTTP body from `response` (http.client) to `write` (one HTTP chunk per
    call) as it arrives, with an `initial-response` in front when the server sent none; `on_first`
    gets the first message's (type, event or exception type) (an exception: the subscription was
    refused). With `rewrite`, every `SubscribeToShardEvent` payload is passed through it (the fault
    proxy drops aged-out records from events). With `cut` ("end" or "reset", n): after n events the
    subscription ends cleanly, or the next event is cut in its middle and Cut(reset=True) raised.
    Returns the bytes relayed; ends when the server ends the body or the client went away."""
    head = b""
    checked = False
    sent = 0
    events = 0
    if cut is not None and rewrite is None:
        rewrite = bytes  # (messages one by one, to count them)
    pending = EventStreamBuffer() if rewrite is not None else None
    for _chunk in range(max_chunks):
        data = response.read1(65536)
        if not data:
            break
        if not checked:
            head += data
            first = first_message(head)
            if first is None:
                continue
            checked, data = True, head
            if on_first is not None:
                on_first(first)
            if first[1] != "initial-response":
                write(INITIAL_RESPONSE)
        if pending is not None and rewrite is not None:
            pending.add_data(data)
            messages = [_rewritten(message, rewrite) for message in pending]
            if cut is not None:
                for message in messages:
                    if events >= cut[1]:
                        if cut[0] == "reset":
                            write(message[: len(message) // 2])
                        raise Cut(reset=cut[0] == "reset")
                    write(message)
                    sent += len(message)
                    events += b"SubscribeToShardEvent" in message[:200]
                continue
            data = b"".join(messages)
            if not data:
                continue
        write(data)
        sent += len(data)
    return sent


def _rewritten(message: Any, rewrite: Callable[[bytes], bytes]) -> bytes:
    """A parsed message framed again, its payload rewritten if it is a SubscribeToShardEvent."""
    headers = message.headers
    kind = str(headers.get(":message-type", "event"))
    event = str(headers.get(":event-type") or headers.get(":exception-type") or "")
    payload = bytes(message.payload)
    if kind == "event" and event == "SubscribeToShardEvent":
        payload = rewrite(payload)
    if kind == "exception":
        return _exception_message(event, payload)
    return event_message(event, payload, kind)


def _exception_message(exception_type: str, payload: bytes) -> bytes:
    headers = (
        _header(":message-type", "exception")
        + _header(":exception-type", exception_type)
        + _header(":content-type", "application/json")
    )
    return _frame(headers, payload)


def relay_subscription(
    handler: Any,
    target: tuple[str, int],
    body: bytes,
    on_first: Callable[[tuple[str, str]], None],
    rewrite: Callable[[bytes], bytes],
    cut: tuple[str, int] | None = None,
    note: Callable[[str], None] | None = None,
) -> bool:
    """Forward one SubscribeToShard call from an HTTP handler to the server at `target` and relay its
    answer: a refusal as it came, a stream through `relay`. False when the server could not be reached
    (nothing was answered)."""
    connection = http.client.HTTPConnection(*target, timeout=600)
    try:
        # (the body may have been rewritten: its length is the body's own, not the request's header)
        skip = ("host", "connection", "content-length")
        send = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
        try:
            connection.request("POST", "/", body=body, headers=send)
            response = connection.getresponse()
        except OSError:
            return False
        if response.status != 200:
            payload = response.read()
            handler.send_response(response.status)
            handler.send_header("Content-Type", "application/x-amz-json-1.1")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return True
        handler.send_response(200)
        handler.send_header("Content-Type", "application/vnd.amazon.eventstream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def chunk(data: bytes) -> None:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

        try:
            relay(response, chunk, on_first, rewrite=rewrite, cut=cut)
            handler.wfile.write(b"0\r\n\r\n")
        except Cut as stopped:
            if note is not None:
                note("subscription reset" if stopped.reset else "subscription ended")
            if stopped.reset:  # RST instead of FIN: SO_LINGER with a zero timeout, then close
                handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                handler.connection.close()
            else:
                handler.wfile.write(b"0\r\n\r\n")
        except (OSError, ValueError, http.client.HTTPException):
            pass  # the client closed the subscription (close ours upstream too), or the server ended it
        handler.close_connection = True
        return True
    except OSError:
        handler.close_connection = True
        return True
    finally:
        connection.close()
