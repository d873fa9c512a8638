"""How far behind the query is, per stream, as Spark's progress shows it.

A Python source cannot add fields to `sources[].metrics`; what it returns from `reportLatestOffset()`
is shown as `sources[].latestOffset` in every `StreamingQueryProgress`. The figures come from the
batch-end records the planner reads anyway (each holds the MillisBehindLatest of the shard's last
GetRecords), so reporting costs no Kinesis call. A shard keeps the figure of the last batch that read
it: an idle shard skipped by the poll interval is still as far behind as when it was last read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...model import ShardRef
from ..state.offsets import ShardEnd

REPORT_VERSION = 1


@dataclass(frozen=True)
class ShardLag:
    """The last known lag of one shard: from the batch that last read it."""

    batch: int
    millis_behind: int  # -1: the server did not say
    records: int
    bytes: int


class LagTracker:
    """Per-shard lag, updated from each batch's recorded ends, reported per stream."""

    def __init__(self) -> None:
        self._shards: dict[ShardRef, ShardLag] = {}
        self._batch = -1
        self._live: dict[str, set[str]] = {}

    def update(
        self, batch: int, ends: Mapping[ShardRef, ShardEnd], live: Mapping[str, Iterable[str]]
    ) -> None:
        """Take batch `batch`'s ends; `live` is every shard still in the offset (stream -> shard ids)."""
        if batch < self._batch:
            return
        self._batch = batch
        for ref, end in ends.items():
            self._shards[ref] = ShardLag(batch, end.millis_behind, end.records, end.bytes)
        self._live = {key: set(sids) for key, sids in live.items()}
        # Shards that left the offset (read to their end, or their stream removed) lag no more.
        for ref in [ref for ref in self._shards if ref[1] not in self._live.get(ref[0], ())]:
            del self._shards[ref]

    def report(self) -> dict[str, Any] | None:
        """The dict `reportLatestOffset()` returns: integers and strings only (Spark's rule), keyed by
        stream ARN. `None` before the first batch has been planned."""
        if not self._live:
            return None
        streams: dict[str, Any] = {}
        for key in sorted(self._live):
            known = [lag for (k, _sid), lag in self._shards.items() if k == key and lag.millis_behind >= 0]
            behind = [lag.millis_behind for lag in known]
            last = [lag for (k, _sid), lag in self._shards.items() if k == key and lag.batch == self._batch]
            streams[key] = {
                "shards": len(self._live[key]),
                "shardsBehind": sum(1 for ms in behind if ms > 0),
                "shardsLagUnknown": len(self._live[key]) - len(known),
                "maxMsBehindLatest": max(behind, default=0),
                "avgMsBehindLatest": round(sum(behind) / len(behind)) if behind else 0,
                "recordsRead": sum(lag.records for lag in last),
                "bytesRead": sum(lag.bytes for lag in last),
            }
        return {"v": REPORT_VERSION, "batch": self._batch, "streams": streams}
