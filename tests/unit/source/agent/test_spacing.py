"""The agent's spacing of SubscribeToShard (src/pyspark_kinesis/source/agent/spacing.py) on a clock of
its own: one call per second per consumer and shard, none within 5 s of a success, a subscription made
elsewhere waited out for the rest of its 5 s and never longer, and a call whose answer comes late
counting from the answer."""

from __future__ import annotations

import pytest

from pyspark_kinesis.source.agent import spacing
from pyspark_kinesis.source.agent.spacing import RESUBSCRIBE_AFTER_S, SUBSCRIBE_SPACING_S, Spacing

KEY = ("arn:aws:kinesis:eu-west-1:1:stream/s/consumer/c:1", "shardId-000000000001")
OTHER = ("arn:aws:kinesis:eu-west-1:1:stream/s/consumer/c:1", "shardId-000000000002")


class Clock:
    """time.monotonic, time.time and time.sleep for the module; `advance`: whether a sleep moves time
    (False: the waits are only recorded, as for calls made by several threads at once)."""

    def __init__(self, advance: bool = True) -> None:
        self.mono, self.wall, self.advance = 100.0, 1_800_000_000.0, advance
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        if self.advance:
            self.mono += seconds
            self.wall += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(spacing, "time", c)
    return c


def test_calls_on_one_shard_are_a_second_apart_and_other_shards_do_not_wait(clock):
    space = Spacing()
    space.before_subscribe(KEY)
    space.before_subscribe(OTHER)
    space.before_subscribe(KEY)
    assert clock.slept == [SUBSCRIBE_SPACING_S]


def test_after_a_success_the_next_call_waits_five_seconds_from_the_answer(clock):
    space = Spacing()
    space.before_subscribe(KEY)
    clock.mono += 0.5  # (the answer comes half a second later)
    space.answered(KEY, ok=True)
    space.before_subscribe(KEY)
    assert clock.slept == [RESUBSCRIBE_AFTER_S]
    clock.mono += 2.0
    space.answered(KEY, ok=False)  # (a refusal: only the one-second spacing, from its answer)
    space.before_subscribe(KEY)
    assert clock.slept == [RESUBSCRIBE_AFTER_S, SUBSCRIBE_SPACING_S]


def test_an_answer_on_a_shard_never_called_here_counts_as_a_call(clock):
    space = Spacing()
    space.answered(KEY, ok=False)
    space.before_subscribe(KEY)
    assert clock.slept == [SUBSCRIBE_SPACING_S]


def test_a_late_answer_does_not_pull_forward_a_turn_already_given(monkeypatch):
    clock = Clock(advance=False)  # (three threads: the turns are handed out before anyone sleeps)
    monkeypatch.setattr(spacing, "time", clock)
    space = Spacing()
    space.before_subscribe(KEY)  # turn at 100
    space.before_subscribe(KEY)  # turn at 101
    space.answered(KEY, ok=False)  # the first call's answer, at 100
    space.before_subscribe(KEY)  # after the second's turn: 102
    assert clock.slept == [1.0, 2.0]


@pytest.mark.parametrize(
    ("ago_s", "waits"),
    [
        (2.0, 3.0),  # the rest of the 5 s after it
        (10.0, None),  # long past: no wait
        (-10.0, RESUBSCRIBE_AFTER_S),  # another clock ahead of this one: never more than the 5 s
    ],
)
def test_a_subscription_made_elsewhere_is_waited_out_for_the_rest_of_its_five_seconds(clock, ago_s, waits):
    Spacing().before_subscribe(KEY, elsewhere_ms=int((clock.wall - ago_s) * 1000))
    assert clock.slept == ([] if waits is None else [waits])
