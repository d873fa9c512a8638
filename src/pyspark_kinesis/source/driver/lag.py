"""How far behind the query is, per stream, as Spark's progress shows it.

A Python source cannot add fields to `sources[].metrics`; what it returns from `reportLatestOffset()`
is shown as `sources[].latestOffset` in every `StreamingQueryProgress`. The figures come from the
batch-end records the planner reads anyway (each holds the MillisBehindLatest of the shard's last
GetRecords), so reporting costs no Kinesis call. A shard keeps the figure of the last batch that read
it: an idle shard skipped by the poll interval is still as far behind as when it was last read.

Losses a read went on past (failOnDataLoss=false) are reported here too, from the same records: the
executor that met one warned in its own log, which on a cluster is not the log an operator watches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ...model import ShardRef
from ..state.offsets import ShardEnd

REPORT_VERSION = 1

log = logging.getLogger(__name__)


def report_losses(batch: int, ends: Mapping[ShardRef, ShardEnd]) -> None:
    """The losses a batch's reads went on past (failOnDataLoss=false), in the driver's log: each was
    logged where it happened, in the log of whichever executor ran the task, which on a cluster an
    operator rarely reads; the lag report counts them too (`LagTracker`)."""
    for (key, sid), end in sorted(ends.items()):
        for what in end.losses:
            log.warning(
                "Data loss in batch %d, Kinesis stream %s, shard %s: %s; failOnDataLoss=false, so the query "
                "went on without them", batch, key, sid, what,
            )  # fmt: skip


def report_backlog(batch: int, ends: Mapping[ShardRef, ShardEnd]) -> bool:
    """PySpark 4.0/4.1: a run's first planning says, once, when the batch it starts from left shards
    behind their stream's tip. There `trigger(availableNow=True)` runs one bounded batch and stops
    (see `spark_features`), and the planner hears nothing after a run's last batch: the next run is the
    first moment the connector can tell a nightly catch-up job that each run reads only a part of
    what is there. Returns whether it warned."""
    behind = {ref: end.millis_behind for ref, end in ends.items() if end.millis_behind > 0}
    if not behind:
        return False
    streams = sorted({key for key, _sid in behind})
    log.warning(
        "Batch %d, where this run starts, ended with %d shard(s) of %s still behind the stream's tip (up to "
        "%.1f s). On PySpark 4.0/4.1 a trigger(availableNow=True) run reads one batch, bounded by "
        "maxRecordsPerBatch/maxBytesPerBatch and the per-shard limits, and stops: the rest waits for the "
        "next run. To read the whole backlog in every run, set drainInOneBatch=true (it reads in bounded "
        "chunks), or use PySpark 4.2+. (Under a processingTime trigger the next batches read it: nothing to do.)",
        batch, len(behind), ", ".join(streams), max(behind.values()) / 1000,
    )  # fmt: skip
    return True


class LagTracker:
    """Per-shard lag, updated from each batch's recorded ends, reported per stream."""

    def __init__(self) -> None:
        self._behind: dict[ShardRef, int] = {}  # MillisBehindLatest of each shard's last read (-1: unsaid)
        self._batch = -1
        self._live: dict[str, set[str]] = {}
        # What the last batch read of each stream: records, bytes, shards whose read went on past lost
        # records (failOnDataLoss=false), KPL user records dropped as outside their shard's hash key
        # range. From all its ends, shards read to their end (gone from the offset) included.
        self._read: dict[str, tuple[int, int, int, int]] = {}

    def update(
        self, batch: int, ends: Mapping[ShardRef, ShardEnd], live: Mapping[str, Iterable[str]]
    ) -> None:
        """Take batch `batch`'s ends; `live` is every shard still in the offset (stream -> shard ids)."""
        if batch < self._batch:
            return
        self._batch = batch
        read: dict[str, tuple[int, int, int, int]] = {}
        for ref, end in ends.items():
            self._behind[ref] = end.millis_behind
            records, size, lossy, misplaced = read.get(ref[0], (0, 0, 0, 0))
            read[ref[0]] = (
                records + end.records,
                size + end.bytes,
                lossy + bool(end.losses),
                misplaced + end.misplaced,
            )
        self._read = read
        self._live = {key: set(sids) for key, sids in live.items()}
        # Shards that left the offset (read to their end, or their stream removed) lag no more.
        for ref in [ref for ref in self._behind if ref[1] not in self._live.get(ref[0], ())]:
            del self._behind[ref]

    def report(self) -> dict[str, Any] | None:
        """The dict `reportLatestOffset()` returns: integers and strings only (Spark's rule), keyed by
        stream ARN. `None` before the first batch has been planned."""
        if not self._live:
            return None
        streams: dict[str, Any] = {}
        for key in sorted(self._live):
            behind = [ms for (k, _sid), ms in self._behind.items() if k == key and ms >= 0]
            records, size, lossy, misplaced = self._read.get(key, (0, 0, 0, 0))
            streams[key] = {
                "shards": len(self._live[key]),
                "shardsBehind": sum(1 for ms in behind if ms > 0),
                "shardsLagUnknown": len(self._live[key]) - len(behind),
                "maxMsBehindLatest": max(behind, default=0),
                "avgMsBehindLatest": round(sum(behind) / len(behind)) if behind else 0,
                "recordsRead": records,
                "bytesRead": size,
                "shardsWithDataLoss": lossy,
                "misplacedUserRecordsDropped": misplaced,
            }
        return {"v": REPORT_VERSION, "batch": self._batch, "streams": streams}
