"""Whether a shard last found at the tip has anything new, asked before a batch is planned for it.

Kinesis has no call that tells a shard's newest sequence number: only a read does. A batch that
re-read every idle shard each `idlePollIntervalMs` made an idle query run an empty batch every
interval (an empty file per batch in file sinks, Spark's 100-batch history gone within a minute,
almost every `stop()` interrupting a batch). The driver looks instead: one GetRecords of at most
one record per idle shard per interval, from an iterator it keeps at the shard's position, about the
calls those empty batches made (the KCL polls an idle shard about as often), and a batch is planned
only for shards that have something. The record a look returns is not kept: the batch's task reads
it, so every end is still recorded by a task, first writer wins.

A look that fails (a server that refuses it, an error the task's read would handle its own way) lets
the shard into the batch, as before looks; credentials that may not call GetRecords from the driver
turn looks off for that stream, with one warning. Under `trigger(availableNow=True)` every idle
shard is looked at once, whenever it was read last, and one a look found nothing in is drained for
the run (the look was answered after the run's cutoff): a run with nothing new plans no batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from ...aws.kinesis import KinesisProxy, TipAnswer
from ...model import Position, ShardRef
from ..state.offsets import ShardState

log = logging.getLogger(__name__)
LOOKS_AT_ONCE = 16  # looks in flight at once (each one short call)
ITERATOR_FOR_MS = (
    240_000  # a kept iterator is used this long (Kinesis expires one 5 minutes after it is given)
)


class TipProbe:
    """Looks at idle shards for one query run; keeps only hints (iterators, when each shard was looked at)."""

    def __init__(
        self, proxy_for: Callable[[str], KinesisProxy], interval_ms: int, clock: Callable[[], int]
    ) -> None:
        self._proxy_for = proxy_for
        self._interval_ms = interval_ms
        self._clock = clock
        self._looked: dict[ShardRef, int] = {}  # when each shard was last looked at (driver clock)
        self._iterators: dict[ShardRef, tuple[Position, str, int]] = {}  # position, iterator, obtained
        self._denied: set[str] = set()  # streams whose credentials may not look
        self._pool: ThreadPoolExecutor | None = None
        self.looks = 0  # GetRecords calls made by looks (for tests and the lag report's readers)

    def news(self, idle: Mapping[ShardRef, ShardState], now: int, every: bool = False) -> set[ShardRef]:
        """The idle shards a batch should read now: those due for a look (the interval since their last
        read or look has passed; with `every`, all of them) whose look found something, or told
        nothing certain."""
        due = {
            ref: state
            for ref, state in idle.items()
            if every or now - max(state.polled_ms, self._looked.get(ref, 0)) >= self._interval_ms
        }
        if not due:
            return set()
        found = {ref for ref in due if ref[0] in self._denied}  # read by batches, as before looks
        asked = [ref for ref in due if ref[0] not in self._denied]
        if asked:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(LOOKS_AT_ONCE, thread_name_prefix="kinesis-look")
            answers = self._pool.map(lambda ref: self._look(ref, due[ref].position), asked)
            found |= {ref for ref, news in zip(asked, answers, strict=True) if news}
        for ref in due:
            self._looked[ref] = now
        return found

    def _look(self, ref: ShardRef, position: Position) -> bool:
        key, sid = ref
        kept = self._iterators.pop(ref, None)
        fresh = kept is not None and kept[0] == position and self._clock() - kept[2] < ITERATOR_FOR_MS
        iterator = kept[1] if fresh and kept is not None else None
        answer: TipAnswer = self._proxy_for(key).look_past_tip(sid, position, iterator)
        self.looks += 1
        if answer.denied and key not in self._denied:
            self._denied.add(key)
            log.warning(
                "Kinesis stream %s: the driver may not call GetShardIterator/GetRecords (%s), so idle shards "
                "are read by a batch every idlePollIntervalMs instead of looked at first. Grant "
                "kinesis:GetShardIterator and kinesis:GetRecords to the driver's credentials.",
                key,
                answer.failure,
            )
        elif answer.failure:
            log.debug(
                "Kinesis stream %s, shard %s: a look failed (%s): read by the batch", key, sid, answer.failure
            )
        if answer.iterator is not None:  # a next iterator: valid 5 minutes from now
            self._iterators[ref] = (position, answer.iterator, self._clock())
        return answer.news is not False

    def forget(self, keep: set[ShardRef]) -> None:
        """Drop what is kept for shards no longer idle (read since, finished, or gone)."""
        for ref in [r for r in self._iterators if r not in keep]:
            del self._iterators[ref]
