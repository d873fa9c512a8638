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
import struct
from typing import Any

from botocore.eventstream import EventStreamBuffer

_STRING = 7  # header value type: string


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return bytes([len(key)]) + key + bytes([_STRING]) + struct.pack(">H", len(text)) + text


def event_message(event_type: str, payload: bytes, message_type: str = "event") -> bytes:
    """One event-stream message with the usual headers."""
    headers = (
        _header(":message-type", message_type)
        + _header(":event-type", event_type)
        + _header(":content-type", "application/json")
    )
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + payload
    return message + struct.pack(">I", binascii.crc32(message) & 0xFFFFFFFF)


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


def relay(response: Any, write: Any, on_first: Any = None, max_chunks: int = 10_000_000) -> int:
    """Forward an event-stream HTTP body from `response` (http.client) to `write` (one HTTP chunk per
    call) as it arrives, with an `initial-response` in front when the server sent none; `on_first`
    gets the first message's (type, event or exception type) (an exception: the subscription was
    refused). Returns the bytes relayed; ends when the server ends the body or the client went away."""
    head = b""
    checked = False
    sent = 0
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
        write(data)
        sent += len(data)
    return sent
