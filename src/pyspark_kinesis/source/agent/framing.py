"""Frames on a stream socket: a 4-byte big-endian length, then the body. Both of the agent's channels
use them: pickled messages over the executor's Unix socket (`link`), sealed ones between executors
(`relay`)."""

from __future__ import annotations

import socket
import struct
import time

_HEADER = struct.Struct(">I")


def send_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(_HEADER.pack(len(body)) + body)


def receive_frame(sock: socket.socket, limit: int, deadline: float | None = None) -> bytes | None:
    """The next frame's body, or None when the peer closed the connection between frames. A length
    over `limit` is not a frame of these protocols: ConnectionError, as for a frame cut short.
    `deadline` (time.monotonic()): TimeoutError once it passes, however the bytes trickle in (a
    socket's own timeout bounds each wait, not the whole frame)."""
    header = _exactly(sock, _HEADER.size, at_start=True, deadline=deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise ConnectionError(f"a frame of {size} bytes: not a message of the fan-out agent's protocol")
    body = _exactly(sock, size, at_start=False, deadline=deadline)
    if body is None:
        raise ConnectionError("the fan-out agent's connection closed in the middle of a message")
    return body


def _exactly(sock: socket.socket, n: int, *, at_start: bool, deadline: float | None) -> bytes | None:
    buffer = bytearray(n)
    view, got = memoryview(buffer), 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the handshake took longer than its deadline")
            sock.settimeout(remaining)
        read = sock.recv_into(view[got:], n - got)
        if read == 0:
            if got == 0 and at_start:
                return None
            raise ConnectionError("the fan-out agent's connection closed in the middle of a message")
        got += read
    return bytes(buffer)
