"""Frames on a stream socket (src/pyspark_kinesis/source/agent/framing.py), over a real socket pair: a
peer that closes between frames, inside a header or inside a body; a length over the limit; bytes that
trickle in one at a time; a deadline that passes before or while a frame comes."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest

from pyspark_kinesis.source.agent import framing
from pyspark_kinesis.source.agent.framing import receive_frame, send_frame

CUT = "the fan-out agent's connection closed in the middle of a message"


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_frames_come_back_whole_and_a_close_between_frames_is_the_end(pair):
    ours, theirs = pair
    send_frame(theirs, b"one")
    send_frame(theirs, b"")
    theirs.close()
    assert receive_frame(ours, 10) == b"one"
    assert receive_frame(ours, 10) == b""
    assert receive_frame(ours, 10) is None


@pytest.mark.parametrize("sent", [b"\x00\x00", b"\x00\x00\x00\x05ab", b"\x00\x00\x00\x05"])
def test_a_close_inside_a_header_or_a_body_is_a_cut_message(pair, sent):
    ours, theirs = pair
    theirs.sendall(sent)
    theirs.close()
    with pytest.raises(ConnectionError) as raised:
        receive_frame(ours, 10)
    assert str(raised.value) == CUT


def test_a_length_over_the_limit_is_not_a_frame_and_the_limit_itself_is(pair):
    ours, theirs = pair
    send_frame(theirs, b"x" * 10)
    assert receive_frame(ours, 10) == b"x" * 10
    send_frame(theirs, b"x" * 11)
    with pytest.raises(ConnectionError) as raised:
        receive_frame(ours, 10)
    assert str(raised.value) == "a frame of 11 bytes: not a message of the fan-out agent's protocol"


def test_bytes_that_trickle_in_one_at_a_time_make_the_same_frame(pair):
    ours, theirs = pair
    message = b"\x00\x00\x00\x04abcd"

    def trickle() -> None:
        for byte in message:
            theirs.sendall(bytes([byte]))
            time.sleep(0.005)

    sender = threading.Thread(target=trickle)
    sender.start()
    assert receive_frame(ours, 10, deadline=time.monotonic() + 10) == b"abcd"
    sender.join(5)


@pytest.mark.parametrize("sent", [b"", b"\x00\x00\x00\x04ab"])  # (nothing at all, or half a body)
def test_a_deadline_bounds_the_whole_frame(pair, sent):
    ours, theirs = pair
    theirs.sendall(sent)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        receive_frame(ours, 10, deadline=started + 0.2)
    assert time.monotonic() - started < 5


def test_a_deadline_already_at_hand_reads_nothing(pair, monkeypatch):
    ours, theirs = pair
    send_frame(theirs, b"ready")
    monkeypatch.setattr(framing, "time", SimpleNamespace(monotonic=lambda: 50.0))
    with pytest.raises(TimeoutError) as raised:
        receive_frame(ours, 10, deadline=50.0)
    assert str(raised.value) == "the handshake took longer than its deadline"


def test_a_deadline_bounds_a_body_that_keeps_trickling(pair):
    """Each byte of the body comes well within the socket's own timeout, but the frame as a whole
    takes longer than the deadline: the deadline still ends it."""
    ours, theirs = pair
    ours.settimeout(5.0)
    stop = threading.Event()

    def trickle() -> None:
        theirs.sendall(b"\x00\x00\x00\x0a")  # the header at once, then the body a byte every 0.1 s
        for byte in b"0123456789":
            if stop.wait(0.1):
                return
            theirs.sendall(bytes([byte]))

    sender = threading.Thread(target=trickle)
    sender.start()
    try:
        with pytest.raises(TimeoutError):
            receive_frame(ours, 100, deadline=time.monotonic() + 0.4)
    finally:
        stop.set()
        sender.join(5)
