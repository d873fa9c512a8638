"""The shard iterators a worker keeps for a shard's next batch (source/executor/iterator_cache.py): an
iterator is taken once, only for the position it points at, only while Kinesis still honours it
(under 5 minutes: kept 240 s), and the cache empties itself rather than grow without bound."""

from __future__ import annotations

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor import iterator_cache
from pyspark_kinesis.source.executor.iterator_cache import IteratorCache

AT = Position.after("49000000000000000000000000000000000000000000000000000001")


def test_an_iterator_is_taken_once_and_only_for_where_it_points(monkeypatch):
    monkeypatch.setattr(iterator_cache.time, "monotonic", lambda: 1_000.0)
    cache = IteratorCache()
    assert cache.take("s", "shard-0", AT) is None
    cache.put("s", "shard-0", AT, "token", 1_000.0)
    assert cache.take("s", "shard-0", Position.trim_horizon()) is None
    assert cache.take("s", "shard-1", AT) is None
    assert cache.take("s", "shard-0", AT) == "token"
    assert cache.take("s", "shard-0", AT) is None  # (taken: a second read must not share it)


def test_an_iterator_older_than_its_keeping_time_is_not_given(monkeypatch):
    monkeypatch.setattr(iterator_cache.time, "monotonic", lambda: 1_000.0)
    cache = IteratorCache()
    cache.put("s", "shard-0", AT, "just-in-time", 1_000.0 - IteratorCache.MAX_AGE_S)
    assert cache.take("s", "shard-0", AT) == "just-in-time"
    cache.put("s", "shard-0", AT, "stale", 1_000.0 - IteratorCache.MAX_AGE_S - 0.001)
    assert cache.take("s", "shard-0", AT) is None


def test_a_full_cache_empties_before_it_takes_one_more():
    cache = IteratorCache()
    cache.MAX_ENTRIES = 3
    for n in range(3):
        cache.put("s", f"shard-{n}", AT, f"t{n}", 0.0)
    assert len(cache._entries) == 3  # (full, not over)
    cache.put("s", "shard-3", AT, "t3", 0.0)
    assert list(cache._entries) == [("s", "shard-3", AT)]
