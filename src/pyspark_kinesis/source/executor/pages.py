"""The seam between the one shard-read loop (`shard_read`) and the ways of reading a shard (`modes`).

A way of reading is a page source: positioned at a place in the shard, it hands out pages, each the
records that arrived with what the source knows of the shard at that moment (how far behind the tip,
whether more is waiting, whether the shard ended there). Everything that is the batch's business stays
in the loop and is written once: what of a page the batch takes (limits, cutoff, replay bound, KPL
aggregates), when a read is over (tip, shard end, budget), whether a start aged out, the data-loss
policy, backoff and the replay checks. A source only reads, and says what its failures mean (`Fault`).
As Flink's KinesisStreamsSource splits its reader: the loop is owned once, each mode implements a
fetch.

Adding a way of reading is one module in `modes` that implements `PageSource`, and one line that
registers its factory there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from ...aws.get_records import Records
from ...model import END, Position
from .cutting import ShardLimits

if TYPE_CHECKING:
    from ...aws.services import StreamProxy


@dataclass(frozen=True)
class Page:
    """One step of a read: the records that came (maybe none) and what the source knows of the shard."""

    records: Records
    behind_ms: int = -1  # how far this page is behind the tip (MillisBehindLatest); -1: not known
    full: bool = False  # more was waiting when the page was made (a full response, events queued)
    ended: bool = False  # the shard is closed and this page reached its end: nothing follows
    children: tuple[str, ...] = ()  # the shards that follow a closed one (with `ended`)
    # The source waited as long as this read should wait for records, and none came (enhanced fan-out:
    # the push wait passed, or another read of the batch already took records): the read is over.
    settled: bool = False


class FaultKind(Enum):
    REOPEN = "reopen"  # the continuation is over (expired iterator, ended subscription): open again
    RETRY = "retry"  # a transient failure (throttling, 5xx, a refused subscription): back off, again
    BROKEN = "broken"  # the continuation broke (a subscription cut): back off, then open again
    GONE = "gone"  # the position or the shard is not there: aged out, or the stream is gone
    AHEAD = "ahead"  # a start ahead of the service's clock: nothing can have arrived since, at the tip


class Fault(Exception):
    """A read step failed in a way the loop knows how to handle; `cause` is the source's own error."""

    def __init__(self, kind: FaultKind, cause: BaseException | None = None) -> None:
        super().__init__(f"{kind.value}: {cause}" if cause is not None else kind.value)
        self.kind, self.cause = kind, cause


@dataclass(frozen=True)
class ReadContext:
    """What a page source is told about the read it serves."""

    proxy: StreamProxy  # the stream's API, Kinesis or DynamoDB Streams (aws/)
    shard: str
    limits: ShardLimits  # the deadline, whether the shard is known closed, the push wait...
    until: Position | None = None  # a replay's recorded end (no deadline: it must get there)
    batch: int = -1
    batch_key: str = ""  # names the read's batch among the executor's reads (fan-out settles by it)
    holder: str = ""  # where the shard's last read kept its continuation for other executors, if anywhere
    relay_key: bytes = b""  # the query run's key for continuations kept on other executors (agent.relay)

    @property
    def replay(self) -> bool:
        return self.until is not None

    @property
    def to_end(self) -> bool:
        """The read goes to the shard's end: the shard is known closed, or a replay up to its end."""
        return self.limits.closed if self.until is None else self.until.kind == END


class PageSource(Protocol):
    """One shard read's source of pages. A read calls `open` first and after every `REOPEN`, then
    `next_page` until the loop is done, then `keep` (when it ended between two pages, or anywhere when
    `keeps_partial`) and `close`."""

    # Whether `keep` may be given a position inside the last page (a batch limit, or inside a KPL
    # aggregate): the source then hands the rest of that page to the next read first (fan-out's agent
    # does; a polling iterator only continues after the whole page).
    keeps_partial: bool

    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        """Position the source at `position`: with `reuse`, continue what the shard's last read kept
        exactly there, if anything; otherwise start anew (with `verify`, "after S" from S itself, see
        `Position.iterator_args`). True when started anew, False when a kept one continues. Raises
        `Fault`."""
        ...

    def open_oldest(self) -> bool:
        """Position the source at the shard's oldest record left; False when the shard is gone."""
        ...

    def next_page(self, limit: int) -> Page | None:
        """The next page, at most `limit` records where the source can ask; None when nothing came
        within the source's own wait (the loop checks its budget and asks again). Raises `Fault`."""
        ...

    def keep(self, position: Position) -> str:
        """The read ended at `position` (between two pages, unless `keeps_partial`): keep the continuation for the shard's next
        batch (in this process, or the executor's agent), if the source can. Returns a hint for the
        shard's next read, wherever it runs (recorded with the batch end, handed to that read as
        `ReadContext.holder`; its form is the mode's own), or "" when there is nothing to say."""
        ...

    def close(self) -> None:
        """Release what was not kept."""
        ...
