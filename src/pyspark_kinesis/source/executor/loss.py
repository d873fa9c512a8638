"""The data-loss policy of one shard read: when records the query should read are gone, fail with a
`DataLossError` naming the stream, the shard and the range, or with failOnDataLoss=false log a warning
(with the count where it is known) and go on.

Kinesis does not say that records aged out; a read learns it from what comes back. Two rules decide
whether a start that is gone cost anything:

- A position is *unaged* when no record that arrived after a given moment can have aged out yet: the
  moment lies within the stream's retention (minus a margin for clocks). A read that found the shard at
  the tip at its start position (the offset's `tip_ms`) therefore lost nothing if that position itself
  aged out: every later record arrived after the tip was seen.
- A start at a timestamp older than the retention may have lost the records from then up to the oldest
  one left, unless the tip rule says otherwise.

A loss the read goes on past is also kept (`losses`) for the shard's batch-end record: the warning here
lands in the log of whichever executor ran the task, where an operator of a cluster rarely looks; the
driver reads the record anyway and reports the loss in its own log and in the lag report.
"""

from __future__ import annotations

import logging
import time

from ...errors import DataLossError
from ...model import MIN_RETENTION_MS, TRIM, Position, unaged
from ..state.offsets import ShardEnd

log = logging.getLogger(__name__)


class LossPolicy:
    """failOnDataLoss for one shard read of one batch."""

    def __init__(
        self,
        where: str,
        batch: int,
        fail_on_data_loss: bool,
        retention_ms: int | None,
        tip_ms: int = 0,
    ) -> None:
        """`where` names the stream and shard in messages; `tip_ms`: when a read last found the shard at
        the tip at the read's start position (0: not known)."""
        self.where, self.batch, self.fail = where, batch, fail_on_data_loss
        self.retention_ms = retention_ms or MIN_RETENTION_MS
        self.tip_ms = tip_ms
        self.losses: list[str] = []  # what this read went on without (failOnDataLoss=false), in order

    def unaged(self, since_ms: int) -> bool:
        """No record that arrived after `since_ms` can have aged out yet (0: nothing is known)."""
        return unaged(since_ms, int(time.time() * 1000), self.retention_ms)

    def loss(self, what: str) -> None:
        """Records may be gone: every loss a read can meet is a start past retention (a trimmed start,
        a position gone mid-read, a timestamp or oldest start after an unseen tip), and none can tell
        whether anything came between it and the oldest record left, since Kinesis sequence numbers
        have gaps. It fails the query under failOnDataLoss, as Spark's Kafka source fails on a possible
        loss; the message says it is a possible one, so that an operator does not go looking for
        records that never existed. (A replay that cannot be reproduced has its own message.)"""
        if self.fail:
            raise DataLossError(
                f"{self.where}, batch {self.batch}: {what}, so records may have been lost (how many, if any, "
                "a read cannot tell). Set failOnDataLoss=false to accept the loss and go on."
            )
        log.warning(
            "%s, batch %d: %s; failOnDataLoss=false: going on without them", self.where, self.batch, what
        )
        self.losses.append(what)

    def aged_out(self, what: str) -> None:
        """The read's start is past retention: a loss, unless no record after it can have aged out."""
        if self.unaged(self.tip_ms):
            log.info(
                "%s, batch %d: %s; the shard was at the tip there %d s ago, so nothing after it can have "
                "aged out",
                self.where,
                self.batch,
                what.split(":")[0],
                (int(time.time() * 1000) - self.tip_ms) // 1000,
            )
            return
        self.loss(what)

    def check_start(self, start: Position) -> None:
        """A first read at a timestamp older than the retention (and no tip seen since); or from the
        oldest record where an earlier read found the shard at its tip (`tip_ms`) longer ago than the
        retention: records that arrived since may have aged out unread, and a start with no record to
        resume after cannot tell (found by the simulation: a stream stopped for days while records came
        and went lost them without a word)."""
        if start.kind == TRIM:
            if self.tip_ms > 0 and not self.unaged(self.tip_ms):
                hours = (int(time.time() * 1000) - self.tip_ms) // 3_600_000
                self.loss(
                    f"the read starts at the shard's oldest record, and the shard was last known at its tip "
                    f"there {hours} h ago, longer than the stream's retention ({self.retention_ms // 3_600_000} h): "
                    "an unknown number of records that arrived since may be past retention",
                )
            return
        if start.ts_ms is None or self.unaged(start.ts_ms) or self.unaged(self.tip_ms):
            return
        self.loss(
            f"the read starts at {start.describe()}, longer ago than the stream's retention "
            f"({self.retention_ms // 3_600_000} h): an unknown number of records from then up to the oldest "
            "one left may be past retention",
        )

    def check_reproduced(
        self,
        expect: ShardEnd,
        start: Position,
        reached: bool,
        got: int,
        first: tuple[str, int] | None,
    ) -> None:
        """A replay must return exactly the first attempt's rows: reach the recorded end, start at the
        recorded first record (a TRIM_HORIZON or timestamp start moves as data ages out) and count the
        same rows. Otherwise records are gone."""
        same_first = expect.first is None or expect.records == 0 or first == expect.first
        if reached and same_first and got == expect.records:
            return
        lost = max(0, expect.records - got)
        found = "no record" if first is None else f"{got} records from sequence number {first[0]}"
        wanted = f"{expect.records} records" + (
            f" from sequence number {expect.first[0]}" if expect.first else ""
        )
        what = (
            f"batch {self.batch} must be read again exactly as first read ({wanted}, "
            f"{start.describe()} up to {expect.reached.describe()}), but the stream now gives {found}"
            f"{'' if reached else ' and does not reach that end'}: about {lost} records are past retention "
            "(or the stream was deleted and re-created)"
        )
        text = f"{self.where}: {what}"
        if self.fail:
            raise DataLossError(
                f"{text}. The batch cannot be replayed exactly. Set failOnDataLoss=false to accept the loss "
                "and go on with the records that are left."
            )
        log.warning("%s; failOnDataLoss=false: going on without them", text)
        self.losses.append(what)
