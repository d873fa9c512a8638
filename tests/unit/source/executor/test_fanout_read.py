"""What the enhanced fan-out page source makes of the events it is handed, and what the shard-read loop
concludes from those pages (no server: events are made here; the one GetRecords that confirms a closed
shard's end is answered by a fake proxy)."""

from __future__ import annotations

import time

from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.modes.fanout import FanOutPages
from pyspark_kinesis.source.executor.shard_read import ShardRead
from tests.unit.scripted import THROTTLED, FakeProxy, ScriptedPages, context, records


class StubLink:
    pending, settled, behind, broken = 0, False, -1, False


def pages_for(proxy: FakeProxy, *, closed: bool) -> FanOutPages:
    source = FanOutPages(context(proxy, closed=closed, cutoff_ms=int(time.time() * 1000)))
    source.link, source.position = StubLink(), Position.after("100")  # type: ignore[assignment]
    source.read_wall = time.time() - 60
    return source


def event(seqs: list[str], behind: int = 0, received: float | None = None) -> dict:
    return {
        "Records": records(seqs),
        "NextShardIterator": seqs[-1] if seqs else "100",
        "MillisBehindLatest": behind,
        "ReceivedAt": time.time() if received is None else received,
    }


def test_an_event_pushed_before_the_read_started_proves_no_tip():
    """Events wait in the agent between batches; "MillisBehindLatest 0" on one pushed before this read
    started was true then, not now, so it must not end an AvailableNow read."""
    source = pages_for(FakeProxy(), closed=False)
    stale = source._page(event(["101", "102"], behind=0, received=source.read_wall - 5))
    fresh = source._page(event(["103"], behind=0))
    assert (stale.behind_ms, fresh.behind_ms) == (-1, 0)
    # (a deadline far off: the read must end at the fresh page, not at a deadline a loaded machine meets)
    ctx = context(cutoff_ms=int(time.time() * 1000), seconds=30)
    read = ShardRead(ScriptedPages([stale, fresh], fresh=False), ctx, Position.after("100"))
    cols, end = read.run()
    assert len(cols) == 3 and end.at_tip and end.reached == Position.after("103")


def test_a_closed_shard_whose_end_is_not_confirmed_is_not_at_the_tip():
    """An AvailableNow run takes a shard at the tip as done for the run; a closed shard taken as done
    before its end was confirmed would leave its children unread (found by the chaos suite)."""
    source = pages_for(FakeProxy(answers=[THROTTLED] * 8), closed=True)
    unconfirmed = source._page(event([]))  # the confirming GetRecords was throttled: no verdict
    assert unconfirmed.behind_ms == -1 and not unconfirmed.ended
    ctx = context(closed=True, cutoff_ms=int(time.time() * 1000), seconds=0.3)
    _cols, end = ShardRead(ScriptedPages([unconfirmed] * 4, fresh=False), ctx, Position.after("100")).run()
    assert not end.at_tip and not end.reached.is_end


def test_a_closed_shard_confirmed_at_its_end_is_closed():
    source = pages_for(
        FakeProxy(answers=[{"Records": records([]), "ChildShards": [{"ShardId": "c1"}]}]), closed=True
    )
    confirmed = source._page(event([]))
    assert confirmed.ended and confirmed.children == ("c1",)
    ctx = context(closed=True, cutoff_ms=int(time.time() * 1000))
    _cols, end = ShardRead(ScriptedPages([confirmed], fresh=False), ctx, Position.after("100")).run()
    assert end.reached.is_end and end.children == ("c1",) and not end.at_tip


def test_events_that_already_wait_make_a_full_page():
    """At the tip when pushed, but more events have come since: read on."""
    source = pages_for(FakeProxy(), closed=False)
    source.link.pending = 2  # type: ignore[union-attr]
    assert source._page(event(["101"], behind=0)).full
