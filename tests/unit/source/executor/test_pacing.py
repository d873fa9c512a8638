"""The per-process pacing of calls on a shard (src/pyspark_kinesis/source/executor/pacing.py),
on a scripted clock: the spacing each pacer keeps per shard, and that polling and fan-out space their
GetShardIterator calls with the iterator pacer (a read that reopens again and again, or a speculative
copy beside its first attempt, stays inside the shard's 5 calls/s)."""

from __future__ import annotations

import threading
import time

import pytest

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import pacing
from pyspark_kinesis.source.executor.iterator_cache import ITERATORS
from pyspark_kinesis.source.executor.modes import fanout, polling
from pyspark_kinesis.source.executor.pacing import ITERATOR_SPACING_S, MIN_CALL_SPACING_S, Pacer
from tests.unit.scripted import SHARD, SPEC, FakeProxy, context


class Clock:
    """time.monotonic and time.sleep of the pacer, scripted: a sleep moves the clock."""

    def __init__(self, monkeypatch) -> None:
        self.now = 100.0
        self.slept: list[float] = []
        self.me, self.real_sleep = threading.get_ident(), time.sleep
        monkeypatch.setattr(pacing.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(pacing.time, "sleep", self.sleep)

    def sleep(self, seconds: float) -> None:
        if threading.get_ident() != self.me:  # (another thread's sleep, e.g. one an earlier test left)
            self.real_sleep(seconds)
            return
        self.slept.append(round(seconds, 6))
        self.now += seconds


@pytest.mark.parametrize("spacing", [MIN_CALL_SPACING_S, ITERATOR_SPACING_S])
def test_calls_on_one_shard_start_a_spacing_apart_and_other_shards_do_not_wait(monkeypatch, spacing):
    clock = Clock(monkeypatch)
    pacer = Pacer(spacing)
    starts = [pacer.before_call(("s", "a")) for _ in range(3)]
    assert starts == pytest.approx([100.0, 100.0 + spacing, 100.0 + 2 * spacing])
    assert clock.slept == pytest.approx([spacing, spacing])
    assert pacer.before_call(("s", "b")) == pytest.approx(clock.now)  # another shard: its own turn
    assert len(clock.slept) == 2
    clock.now += 10
    assert pacer.before_call(("s", "a")) == pytest.approx(clock.now)  # long after: no wait
    assert len(clock.slept) == 2


def test_a_response_of_many_bytes_delays_the_shards_next_call(monkeypatch):
    clock = Clock(monkeypatch)
    pacer = Pacer()
    started = pacer.before_call(("s", "a"))
    pacer.after_response(("s", "a"), started, 2_000_000, 1_000_000)
    assert pacer.before_call(("s", "a")) == pytest.approx(started + 2.0)
    assert clock.slept == pytest.approx([2.0])


class Recorder:
    def __init__(self, monkeypatch) -> None:
        self.keys: list[tuple[str, str]] = []
        monkeypatch.setattr(pacing.ITERATOR_PACER, "before_call", lambda key: self.keys.append(key) or 0.0)


def test_polling_spaces_every_get_shard_iterator_call(monkeypatch):
    paced = Recorder(monkeypatch)
    source = polling.PollingPages(context(FakeProxy()))
    source.open(Position.after("5"), verify=False, reuse=False)
    source.open_oldest()
    assert paced.keys == [(SPEC.resolved_arn, SHARD), (SPEC.resolved_arn, SHARD)]


def test_a_kept_iterator_needs_no_turn(monkeypatch):
    paced = Recorder(monkeypatch)
    ITERATORS.put(SPEC.resolved_arn, SHARD, Position.after("5"), "kept", time.monotonic())
    source = polling.PollingPages(context(FakeProxy()))
    assert source.open(Position.after("5"), verify=False, reuse=True) is False
    assert paced.keys == []


def test_fan_out_spaces_its_get_shard_iterator_calls(monkeypatch):
    paced = Recorder(monkeypatch)
    source = fanout.FanOutPages(context(FakeProxy()))
    monkeypatch.setattr(source, "open", lambda *a, **k: True)
    assert source.open_oldest() is True
    assert paced.keys == [(SPEC.resolved_arn, SHARD)]


def test_a_response_paces_nothing_when_pacing_is_off_or_it_held_no_bytes(monkeypatch):
    """Byte pacing off (`shardReadBytesPerSecond` 0) or an empty response: no pause and no error; the
    smallest response that counts (one byte at one byte a second) pauses for its second."""
    clock = Clock(monkeypatch)
    pacer = Pacer()
    pacer.after_response(("s", "a"), clock.now, 1_000, 0)  # (pacing off: no division by its zero)
    pacer.after_response(("s", "b"), clock.now + 5, 0, 1_000_000)  # (no bytes: no turn set at all)
    assert pacer.before_call(("s", "a")) == pytest.approx(clock.now)
    assert pacer.before_call(("s", "b")) == pytest.approx(clock.now) and clock.slept == []
    started = pacer.before_call(("s", "c"))
    pacer.after_response(("s", "c"), started, 1, 1)
    assert pacer.before_call(("s", "c")) == pytest.approx(started + 1.0)


def test_a_small_response_keeps_the_call_spacing_and_a_fresh_shard_waits_for_nothing(monkeypatch):
    clock = Clock(monkeypatch)
    clock.now = 0.5  # (a clock near its origin: a fresh shard's turn is "now", not a made-up time)
    pacer = Pacer()
    assert pacer.before_call(("s", "fresh")) == pytest.approx(0.5) and clock.slept == []
    pacer.after_response(("s", "new"), 0.0, 1, 10)  # (a shard with no turn yet: its turn is 0.1)
    assert pacer.before_call(("s", "new")) == pytest.approx(0.5) and clock.slept == []
    started = pacer.before_call(("s", "a"))
    pacer.after_response(("s", "a"), started, 1, 1_000_000)  # (1 µs of bytes: the 0.2 s spacing stands)
    assert pacer.before_call(("s", "a")) == pytest.approx(started + MIN_CALL_SPACING_S)
