"""What a query's checkpoint and metadataPath say, for the `inspect` and `lag` commands.

Spark's offset log (`<checkpoint>/offsets/<batch>`: a version line, a metadata line, then one line per
source) holds each batch's *start* positions; `<checkpoint>/commits/<batch>` exists once the batch
finished. Where a committed batch stopped is in its batch-end records under metadataPath. Both are
read through fsspec, so a checkpoint on S3 reads like a local one; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
import orjson

from ..model import Position, ShardRef
from ..source.state.batch_log import BatchEndLog, source_key
from ..source.state.offsets import OFFSET_VERSION, SourceOffset, TaskEnd


@dataclass(frozen=True)
class CheckpointBatch:
    """One batch of the offset log, with what its tasks recorded."""

    batch: int
    committed: bool
    offset: SourceOffset  # the Kinesis source's entry: start positions and task assignment
    raw: dict[str, Any]
    records: dict[int, TaskEnd | None]  # task -> its batch-end record (None: not written, yet or ever)
    read: frozenset[int] = frozenset()  # tasks whose records the driver read: a missing one was deleted

    def positions_after(self) -> dict[ShardRef, Position]:
        """Where each shard stands once this batch is done: its recorded end where its task wrote one,
        else the batch's start (a task that never ran read nothing)."""
        out: dict[ShardRef, Position] = {}
        for stream, shards in self.offset.streams.items():
            for sid, state in shards.items():
                out[ShardRef(stream, sid)] = state.position
        for record in self.records.values():
            if record is None:
                continue
            for ref, end in record.shards.items():
                if not end.unrun:
                    out[ref] = end.reached
        return out


class Checkpoint:
    """A query's checkpoint folder and its metadataPath, read-only."""

    def __init__(
        self, location: str, metadata_path: str, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self.location = location.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.location, **(storage_options or {}))
        if not self.fs.exists(f"{self.root}/offsets"):
            what = (
                "is not a Structured Streaming checkpoint (no offsets/ folder)"
                if self.fs.exists(self.root)
                else "does not exist"
            )
            raise ValueError(f"the checkpoint '{self.location}' {what}: give the query's checkpointLocation")
        self.metadata_path = metadata_path
        self.log = BatchEndLog.open(metadata_path, storage_options)

    def _batches(self, folder: str) -> list[int]:
        path = f"{self.root}/{folder}"
        if not self.fs.exists(path):
            return []
        names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False)]
        return sorted(int(n) for n in names if n.isdigit())

    def batches(self) -> list[int]:
        """Batch ids in the offset log, oldest first (Spark keeps the last 100 by default)."""
        return self._batches("offsets")

    def committed(self) -> list[int]:
        return self._batches("commits")

    def source_entry(self, batch: int) -> dict[str, Any]:
        """The Kinesis source's line of the offset log for `batch`."""
        with self.fs.open(f"{self.root}/offsets/{batch}", "rb") as handle:
            lines = handle.read().decode().splitlines()
        for line in lines[2:]:
            if line.strip() in ("", "-"):
                continue
            entry = orjson.loads(line)
            if isinstance(entry, dict) and entry.get("v") in (2, OFFSET_VERSION) and "streams" in entry:
                return entry
        raise ValueError(
            f"offsets/{batch} under '{self.location}' has no pyspark-kinesis source entry: is this the "
            "checkpointLocation of a query that reads format 'kinesis'?"
        )

    def batch(self, batch: int | None = None, *, committed_only: bool = False) -> CheckpointBatch:
        """Batch `batch`, or the latest one (the latest committed one with `committed_only`)."""
        ids = self.committed() if committed_only else self.batches()
        if batch is None:
            if not ids:
                raise ValueError(
                    f"the checkpoint '{self.location}' has no {'committed ' if committed_only else ''}batch yet"
                )
            batch = ids[-1]
        elif batch not in self.batches():
            raise ValueError(
                f"the checkpoint '{self.location}' has no batch {batch} (it has {self.batches()})"
            )
        raw = self.source_entry(batch)
        offset = SourceOffset.from_json(raw)
        if self.log.store.get(source_key(offset.token)) is None:
            raise ValueError(
                f"the metadataPath '{self.metadata_path}' holds no records of this checkpoint's query (token "
                f"{offset.token}): it is another query's metadataPath, or it was moved or cleaned; give the "
                "metadataPath the query runs with"
            )
        # Records are keyed by the source's own batch number, which stays behind Spark's when other sources
        # of the query have batches without Kinesis data.
        records = {task: self.log.read(offset.token, offset.batch, task) for task in sorted(offset.tasks())}
        read = self.log.tasks_read(offset.token, offset.batch)
        return CheckpointBatch(batch, batch in self.committed(), offset, raw, records, read)

    def where(self, token: str) -> dict[str, dict[str, str | None]]:
        """Each stream's region and endpoint as the query recorded them under metadataPath ({}: a query
        started by a version that did not record them)."""
        return self.log.recorded_where(token)
