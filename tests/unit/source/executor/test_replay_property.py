"""The replay rule as a property: a shard of plain records and KPL aggregates, read batch after batch
with random record limits (so batch ends fall inside aggregates too), then every batch replayed to its
recorded end from its recorded start, must give exactly the rows of its first attempt, and the first
attempts together every user record once, in order.

The shard is served by a page source over an in-memory list (`ShardPages`) that honours the positions
the loop opens at (TRIM_HORIZON, "after S", verified "after S" from S itself, inside an aggregate) and
cuts pages at random sizes, so the loop's rules (limits, skipping a partly read aggregate, the anchor,
the replay bound) meet every boundary. A replay bound one sub-record short, or a resume position that
skips or repeats a sub-record, breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.kpl import Aggregate
from pyspark_kinesis.model import AFTER, INSIDE, TRIM, Position
from pyspark_kinesis.source.executor.pages import Page
from pyspark_kinesis.source.executor.shard_read import ShardRead
from tests.unit.scripted import context

MAX_BATCHES = 200  # a shard of at most 12 records x 4 sub-records takes at most 48 batches


@dataclass
class ShardPages:
    """A shard's records served from a list, `page_sizes` records at a time (cycled)."""

    seqs: list[str]
    data: list[bytes]
    page_sizes: list[int]
    cursor: int = 0
    served: int = 0
    opens: list[Position] = field(default_factory=list)
    keeps_partial: bool = False

    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        self.opens.append(position)
        if position.kind == TRIM:
            self.cursor = 0
        elif position.kind == INSIDE or (position.kind == AFTER and verify):
            self.cursor = self.seqs.index(position.seq or "")
        elif position.kind == AFTER:
            self.cursor = self.seqs.index(position.seq or "") + 1
        else:
            raise AssertionError(f"unexpected start {position.describe()}")
        return True

    def open_oldest(self) -> bool:
        raise AssertionError("nothing ages out of this shard")

    def next_page(self, limit: int) -> Page | None:
        size = min(limit, self.page_sizes[self.served % len(self.page_sizes)])
        self.served += 1
        chunk = slice(self.cursor, self.cursor + size)
        self.cursor = min(len(self.seqs), self.cursor + size)
        seqs, data = self.seqs[chunk], self.data[chunk]
        records = Records.from_lists(seqs, ["k"] * len(seqs), data, [1.0] * len(seqs))
        return Page(records, behind_ms=0 if self.cursor >= len(self.seqs) else 5_000)

    def keep(self, position: Position) -> str:
        return ""

    def close(self) -> None:
        pass


def build_shard(shape: list[int]) -> tuple[list[str], list[bytes], list[tuple[str, int, bytes]]]:
    """Kinesis records from `shape` (0: a plain record; n: an aggregate of n user records) and the user
    records they hold, as (sequence number, sub-sequence number, payload)."""
    seqs, data, users = [], [], []
    for index, subs in enumerate(shape):
        seq = str(1000 * (index + 1))
        if subs == 0:
            payload = f"plain-{index}".encode()
            seqs.append(seq)
            data.append(payload)
            users.append((seq, 0, payload))
            continue
        aggregate = Aggregate(1_000_000)
        for sub in range(subs):
            payload = f"agg-{index}-{sub}".encode()
            assert aggregate.add(f"k{sub}", None, payload)
            users.append((seq, sub, payload))
        seqs.append(seq)
        data.append(aggregate.encode())
    return seqs, data, users


def rows(cols) -> list[tuple[str, int, bytes]]:
    table = cols.to_arrow()
    return list(
        zip(
            table.column("sequenceNumber").to_pylist(),
            table.column("subSequenceNumber").to_pylist(),
            table.column("data").to_pylist(),
            strict=True,
        )
    )


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=12),
    limits=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8),
    page_sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=4),
)
def test_every_batch_replays_to_exactly_its_first_attempts_rows(shape, limits, page_sizes):
    seqs, data, users = build_shard(shape)
    start, batches = Position.trim_horizon(), []
    for batch in range(MAX_BATCHES):
        source = ShardPages(seqs, data, page_sizes)
        ctx = context(max_records=limits[batch % len(limits)], seconds=5.0)
        cols, end = ShardRead(source, ctx, start).run()
        if not len(cols):
            assert end.at_tip and end.reached == start
            break
        batches.append((start, end, rows(cols)))
        start = end.reached
    else:
        raise AssertionError(f"the shard was not read to its tip in {MAX_BATCHES} batches")
    assert [row for _s, _e, taken in batches for row in taken] == users  # each user record once, in order
    for first_start, end, taken in batches:
        source = ShardPages(seqs, data, page_sizes)
        cols, replayed_end = ShardRead(
            source, context(until=end.reached, seconds=5.0), first_start, end
        ).run()
        assert rows(cols) == taken, f"replay from {first_start.describe()} to {end.reached.describe()}"
        assert replayed_end.reached == end.reached
