"""Simulated time, and the patches that put the connector's process on it.

Every module of the connector that reads the clock, sleeps or draws jitter does so through its own
`time` / `random` module attribute: the simulation swaps those attributes for a clock it advances
itself and a seeded generator, in every loaded module of the package (found, not listed, so a module
added later is covered). Thread pools (a task's shard reads, the driver's looks) run their work in
order, in the calling thread: the simulation is one thread, so a run is a function of its seed.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time as real_time
import types
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

START_MS = 1_800_000_000_000  # the simulated epoch every run starts at (2027-01-15)


class SimClock:
    """Milliseconds since the epoch, advanced only by the simulation (and by sleeps of the code)."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms
        self.slept_s = 0.0  # what the connector's code slept, in all

    def advance_ms(self, ms: int) -> None:
        self.now_ms += max(0, ms)

    def advance_to(self, ms: int) -> None:
        self.now_ms = max(self.now_ms, ms)


class SimTime(types.SimpleNamespace):
    """The `time` module as the connector uses it, on a `SimClock`: wall and monotonic clocks move
    together; a sleep moves both."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__()
        self._clock = clock

    def time(self) -> float:
        return self._clock.now_ms / 1000.0

    def time_ns(self) -> int:
        return self._clock.now_ms * 1_000_000

    def monotonic(self) -> float:
        return self._clock.now_ms / 1000.0

    def perf_counter(self) -> float:
        return self._clock.now_ms / 1000.0

    def sleep(self, seconds: float) -> None:
        step = max(0, round(seconds * 1000))
        self._clock.slept_s += step / 1000.0
        self._clock.advance_ms(step)

    def __getattr__(self, name: str) -> Any:  # anything else (struct_time, strftime...) as it is
        return getattr(real_time, name)


class SerialPool:
    """`concurrent.futures.ThreadPoolExecutor` that runs each call at once, in order, in this thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> SerialPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any]) -> Iterator[Any]:
        return iter([fn(*args) for args in zip(*iterables, strict=False)])

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # (as a pool's future holds it)
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


def chance(seed: int, *context: object) -> float:
    """A number in [0, 1) fixed by the seed and the decision point's context (a batch, a task, an
    attempt): the same decision comes out the same however the rest of the run changed (what lets a
    shrunk schedule replay its failure)."""
    digest = hashlib.blake2b(repr((seed, *context)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def patch_process(patches: pytest.MonkeyPatch, clock: SimClock, rng: random.Random) -> None:
    """Put every loaded module of the connector on the simulated clock, the seeded generator and
    in-order pools (see the module docstring)."""
    sim_time = SimTime(clock)
    for name, module in list(sys.modules.items()):
        if not name.startswith("pyspark_kinesis") or module is None:
            continue
        if getattr(module, "time", None) is real_time:
            patches.setattr(module, "time", sim_time)
        if getattr(module, "random", None) is random:
            patches.setattr(module, "random", rng)
        if "ThreadPoolExecutor" in vars(module):
            patches.setattr(module, "ThreadPoolExecutor", SerialPool)
