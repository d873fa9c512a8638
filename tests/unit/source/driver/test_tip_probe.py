"""Looks at idle shards before a batch is planned (src/pyspark_kinesis/source/driver/tip_probe.py),
driven directly: which shards are due, the iterator a look goes on from (and when it is too old),
what a look's answer lets into the batch, and the credentials that may not look. The stream's API is
a scripted stand-in answering `look_past_tip`."""

from __future__ import annotations

import logging

import pytest

from pyspark_kinesis.aws.tip_look import TipAnswer
from pyspark_kinesis.model import Position, ShardRef
from pyspark_kinesis.source.driver import tip_probe
from pyspark_kinesis.source.driver.tip_probe import ITERATOR_FOR_MS, TipProbe
from pyspark_kinesis.source.state.offsets import ShardState
from tests.unit.planner_fakes import Clock

A, B = "arn:a", "arn:b"
AT = Position.after("100")


class Looks:
    """look_past_tip answered from `answers` per shard (default: nothing new, a next iterator)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, Position, str | None]] = []
        self.answers: dict[str, TipAnswer] = {}

    def proxy_for(self, key: str) -> Looks.Proxy:
        return Looks.Proxy(self, key)

    class Proxy:
        def __init__(self, looks: Looks, key: str) -> None:
            self.looks, self.key = looks, key

        def look_past_tip(self, sid: str, position: Position, iterator: str | None) -> TipAnswer:
            self.looks.asked.append((self.key, sid, position, iterator))
            n = len(self.looks.asked)
            return self.looks.answers.get(sid, TipAnswer(False, f"it-{n}"))


def probe(interval_ms: int = 1000) -> tuple[TipProbe, Looks, Clock]:
    looks, clock = Looks(), Clock()
    return TipProbe(looks.proxy_for, interval_ms, clock), looks, clock  # type: ignore[arg-type]


def idle(*refs: ShardRef, polled_ms: int = 0) -> dict[ShardRef, ShardState]:
    return {ref: ShardState(AT, idle=True, polled_ms=polled_ms, tip_ms=1) for ref in refs}


def test_a_shard_is_due_once_the_interval_since_its_last_read_or_look_has_passed():
    run, looks, _clock = probe(interval_ms=1000)
    shard = ShardRef(A, "s0")
    assert run.news(idle(shard, polled_ms=5000), now=5999) == set() and looks.asked == []
    assert run.news(idle(shard, polled_ms=5000), now=6000) == set()  # due: looked, nothing new
    assert len(looks.asked) == 1 and run.looks == 1
    assert run.news(idle(shard, polled_ms=5000), now=6999) == set() and run.looks == 1  # looked at 6000
    run.news(idle(shard, polled_ms=5000), now=7000)
    assert run.looks == 2
    run.news(idle(shard, polled_ms=5000), now=7001, every=True)  # (AvailableNow: every idle shard)
    assert run.looks == 3


def test_a_look_goes_on_from_the_iterator_the_last_one_left_while_it_is_fresh():
    run, looks, clock = probe()
    shard = ShardRef(A, "s0")
    run.news(idle(shard), now=10_000)
    run.news(idle(shard), now=20_000)
    assert [iterator for *_a, iterator in looks.asked] == [None, "it-1"]
    clock.now += ITERATOR_FOR_MS - 1
    run.news(idle(shard), now=30_000)
    assert looks.asked[-1][3] == "it-2"  # (obtained at the last look, now ITERATOR_FOR_MS - 1 old)
    clock.now += ITERATOR_FOR_MS
    run.news(idle(shard), now=40_000)
    assert looks.asked[-1][3] is None  # too old: a new one
    moved = {shard: ShardState(Position.after("200"), idle=True, tip_ms=1)}
    run.news(moved, now=50_000)
    assert looks.asked[-1][2:] == (Position.after("200"), None)  # kept for another position: not used


def test_what_a_look_found_or_could_not_tell_goes_into_the_batch():
    run, looks, _clock = probe()
    looks.answers = {
        "new": TipAnswer(True, "it"),
        "unsure": TipAnswer(None),
        "failed": TipAnswer(True, None, failure="throttled"),
        "empty": TipAnswer(False, "it"),
    }
    refs = [ShardRef(A, sid) for sid in looks.answers]
    assert run.news(idle(*refs), now=10_000) == {
        ShardRef(A, "new"),
        ShardRef(A, "unsure"),
        ShardRef(A, "failed"),
    }


def test_credentials_that_may_not_look_turn_looks_off_for_their_stream_with_one_warning(caplog):
    run, looks, _clock = probe()
    looks.answers = {"s0": TipAnswer(True, None, failure="AccessDenied", denied=True)}
    with caplog.at_level(logging.WARNING, logger=tip_probe.__name__):
        assert run.news(idle(ShardRef(A, "s0"), ShardRef(B, "s1")), now=10_000) == {ShardRef(A, "s0")}
        assert run.news(idle(ShardRef(A, "s0"), ShardRef(A, "s2")), now=20_000) == {
            ShardRef(A, "s0"),
            ShardRef(A, "s2"),
        }
    assert [(key, sid) for key, sid, *_r in looks.asked] == [(A, "s0"), (B, "s1")]  # A not looked at again
    assert caplog.messages == [
        f"Kinesis stream {A}: the driver may not call GetShardIterator/GetRecords (AccessDenied), so idle shards "
        "are read by a batch every idlePollIntervalMs instead of looked at first. Grant kinesis:GetShardIterator "
        "and kinesis:GetRecords to the driver's credentials."
    ]


def test_a_failed_look_is_noted_at_debug_level(caplog):
    run, looks, _clock = probe()
    looks.answers = {"s0": TipAnswer(True, None, failure="throttled")}
    with caplog.at_level(logging.DEBUG, logger=tip_probe.__name__):
        run.news(idle(ShardRef(A, "s0")), now=10_000)
    assert caplog.messages == [f"Kinesis stream {A}, shard s0: a look failed (throttled): read by the batch"]


def test_forget_drops_the_iterators_of_shards_no_longer_idle_and_the_renewals_of_shards_gone():
    run, looks, _clock = probe()
    kept, dropped, gone = ShardRef(A, "s0"), ShardRef(A, "s1"), ShardRef(A, "s2")
    tipped = {ref: ShardState(AT, idle=True, tip_ms=9_000) for ref in (kept, dropped, gone)}
    run.news(tipped, now=10_000)
    assert set(run.quiet) == {kept, dropped, gone}
    run.forget({kept}, {kept, dropped})
    # (a shard no longer idle keeps its renewal: a closed one is read from where it holds)
    assert set(run.quiet) == {kept, dropped}
    run.news(idle(kept, dropped), now=20_000)
    assert {sid: iterator is None for _k, sid, _p, iterator in looks.asked[3:]} == {"s0": False, "s1": True}


def test_a_shard_whose_tip_is_not_known_within_the_retention_is_read_not_looked_at():
    """Found by the simulation: a look finds nothing after a position both when nothing came and when
    what came aged out while the query was down; the shard idled on and its loss was never said."""
    run, looks, _clock = probe()
    fresh, stale = ShardRef(A, "s0"), ShardRef(A, "s1")
    now = 100 * 3_600_000
    states = {
        fresh: ShardState(AT, idle=True, tip_ms=now - 3_600_000),
        stale: ShardState(AT, idle=True, tip_ms=now - 30 * 3_600_000),
    }
    assert run.news(states, now=now) == {stale}
    assert [sid for _k, sid, _p, _i in looks.asked] == ["s0"]


@pytest.mark.parametrize("count", [1, 40])
def test_many_idle_shards_are_each_looked_at_once(count):
    run, looks, _clock = probe()
    refs = [ShardRef(A, f"s{n}") for n in range(count)]
    run.news(idle(*refs), now=10_000)
    assert sorted(sid for _k, sid, *_r in looks.asked) == sorted(r.shard for r in refs)


def test_a_look_that_found_a_record_renews_the_tip_to_when_it_arrived_while_the_old_tip_holds():
    """Found by the simulation (regression `news-a-look-found-renews-the-tip`): a shard a look found
    records in waited for a batch's budget past its old tip's retention, and its records, all still
    there, were called a possible loss. Its position was the tip until the first record after it came."""
    run, looks, _clock = probe()
    now = 100 * 3_600_000
    held, lapsed = ShardRef(A, "s0"), ShardRef(A, "s1")
    arrived = now - 2 * 3_600_000
    looks.answers = {sid: TipAnswer(True, first_ms=arrived) for sid in ("s0", "s1")}
    states = {
        held: ShardState(AT, idle=True, tip_ms=now - 20 * 3_600_000),
        lapsed: ShardState(AT, idle=True, tip_ms=now - 24 * 3_600_000),
    }
    assert run.news(states, now=now) == {held, lapsed}
    # (records after the lapsed one's position may have aged out before the look: its read says so)
    assert run.quiet == {held: (AT, arrived)}
    looks.answers = {"s0": TipAnswer(True, first_ms=now + 5_000)}  # (a service clock ahead of ours)
    assert run.news({held: states[held]}, now=now + 10_000, every=True) == {held}
    assert run.quiet[held] == (AT, now + 5_000)
    looks.answers = {"s0": TipAnswer(True)}  # (behind: records arrived, the look cannot tell when)
    run.news({held: states[held]}, now=now + 20_000, every=True)
    assert run.quiet[held] == (AT, now + 5_000)
    looks.answers = {"s0": TipAnswer(True, ended=True)}  # (the shard ends right after the position)
    run.news({held: states[held]}, now=now + 30_000, every=True)
    assert run.quiet[held] == (AT, now + 30_000)


def test_a_trigger_waits_for_looks_at_most_look_wait_and_the_next_one_takes_their_answers(monkeypatch):
    """Looks run beside planning (issue #65.5: at 2,000 idle shards, waiting for every look made
    planning longer than the trigger): a look still in flight after LOOK_WAIT_S is answered to the next
    trigger, and an answer counts only for the position it was asked at. AvailableNow waits for all."""
    import threading

    monkeypatch.setattr(tip_probe, "LOOK_WAIT_S", 0.05)
    gate = threading.Event()

    class Slow(Looks):
        class Proxy(Looks.Proxy):
            def look_past_tip(self, sid: str, position: Position, iterator: str | None) -> TipAnswer:
                if sid == "slow":
                    assert gate.wait(10)  # (bounded: set below)
                self.looks.asked.append((self.key, sid, position, iterator))
                return TipAnswer(True, first_ms=7)

        def proxy_for(self, key: str) -> Looks.Proxy:
            return Slow.Proxy(self, key)

    looks = Slow()
    run = TipProbe(looks.proxy_for, 1000, Clock())  # type: ignore[arg-type]
    fast, slow = ShardRef(A, "fast"), ShardRef(A, "slow")
    try:
        assert run.news(idle(fast, slow), now=2000) == {fast}  # not waited for: the slow look
        gate.set()
        assert run.news(idle(fast, slow), now=2100) == {slow}  # (neither is due: the answer came)
        assert run.looks == 2 and run.quiet[slow] == (AT, 7)
        gate.clear()
        assert run.news(idle(slow), now=3100) == set()
        moved = {slow: ShardState(Position.after("200"), idle=True, polled_ms=3200, tip_ms=3200)}
        gate.set()
        assert run.news(moved, now=3300) == set()  # answered for a position the shard has left
        gate.clear()
        pending = threading.Timer(0.2, gate.set)
        pending.start()
        assert run.news(moved, now=3400, every=True) == {slow}  # AvailableNow: waited for
    finally:
        gate.set()
        run.close()
