"""The batch-end log: where tasks record how far each shard was read in a batch, and its one owner.

Spark logs a batch's offset before the batch runs, so where the batch *ends* is learned by its tasks
and written here, under the user's `metadataPath`, one record per (batch, task), first writer wins
(see `store.BatchEndStore`). Everything that knows how these records are laid out, decoded, checked
against the checkpoint and collected lives in `BatchEndLog`, which both sides use: the driver to learn
where the last batch ended and to collect old batches, the executors to record or replay.

Layout under metadataPath (one folder per query, named by the query's random token, which its offsets
carry):

    <token>/source.json                        the query's identity (token, streams at start)
    <token>/batch-000000000007/planned.json     batch 7 was planned (written before Spark logs it)
    <token>/batch-000000000007/task-00003.json  where task 3 of batch 7 stopped on each of its shards

A batch's tasks need not all run: a `foreachBatch` that calls `df.show()` or `df.take(n)`, or returns
without touching `df`, leaves tasks that never ran and never recorded anything. Such a task emitted
nothing, so the driver closes its record as "read nothing" through the same first-writer-wins write
(a late attempt then loses, adopts it and emits nothing) and its shards are read again from the same
positions. The `planned` marker tells that case apart from a metadataPath that was changed or cleaned:
a missing task record under a planned batch is a task that never ran; a missing marker means the
records are gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ..errors import CheckpointMismatchError
from ..model import Position, ShardRef
from .offsets import ShardEnd, TaskEnd
from .store import BatchEndStore, open_store


def batch_folder(token: str, batch: int) -> str:
    return f"{token}/batch-{batch:012d}"


def task_key(token: str, batch: int, task: int) -> str:
    return f"{batch_folder(token, batch)}/task-{task:05d}.json"


def planned_key(token: str, batch: int) -> str:
    return f"{batch_folder(token, batch)}/planned.json"


def source_key(token: str) -> str:
    return f"{token}/source.json"


class BatchEndLog:
    """The batch-end records of the queries whose records live under one metadataPath."""

    def __init__(self, store: BatchEndStore, location: str) -> None:
        self.store = store
        self.location = location  # metadataPath as the user gave it, for messages
        self._collected_below: dict[str, int] = {}

    @staticmethod
    def open(location: str, storage_options: Mapping[str, Any] | None = None) -> BatchEndLog:
        """The log under `location` (a path or an fsspec URL, with the filesystem's options)."""
        return BatchEndLog(open_store(location, storage_options), location)

    # -- the query's identity ------------------------------------------------------------------
    def start_query(self, token: str, streams: list[str]) -> None:
        """Record a new query's identity; its offsets carry `token`."""
        self.store.put_if_absent(source_key(token), orjson.dumps({"token": token, "streams": streams}))

    def check_query(self, token: str) -> None:
        """Fail clearly unless the records of the query with this token are here."""
        raw = self.store.get(source_key(token))
        if raw is None:
            raise CheckpointMismatchError(
                f"metadataPath '{self.location}' holds no records for this checkpoint "
                f"(query token {token}). Restart with the metadataPath the query was first started "
                "with, or start over with a new checkpointLocation."
            )
        meta = orjson.loads(raw)
        if meta.get("token") != token:
            raise CheckpointMismatchError(
                f"The records under metadataPath '{self.location}' belong to another query "
                f"(token {meta.get('token')}, not {token}). Use the metadataPath of this query."
            )

    # -- batches -------------------------------------------------------------------------------
    def mark_planned(self, token: str, batch: int) -> None:
        """Record that batch `batch` was planned, before Spark logs its offset (see the module docstring)."""
        self.store.put_if_absent(planned_key(token, batch), orjson.dumps({"token": token, "batch": batch}))

    def was_planned(self, token: str, batch: int) -> bool:
        return self.store.get(planned_key(token, batch)) is not None

    # -- task records --------------------------------------------------------------------------
    def read(self, token: str, batch: int, task: int) -> TaskEnd | None:
        """The record of a (batch, task), or None if no attempt has written one."""
        raw = self.store.get(task_key(token, batch, task))
        return None if raw is None else TaskEnd.from_json(orjson.loads(raw))

    def write(self, record: TaskEnd) -> TaskEnd:
        """Write `record` unless an attempt wrote first; returns the record that stands (the winner)."""
        if self.store.put_if_absent(
            task_key(record.token, record.batch, record.task), orjson.dumps(record.to_json())
        ):
            return record
        winner = self.read(record.token, record.batch, record.task)
        if winner is None:  # pragma: no cover - a store that lost a record it refused to overwrite
            raise CheckpointMismatchError(
                f"The batch-end record of batch {record.batch}, task {record.task} under metadataPath "
                f"'{self.location}' exists and cannot be read. metadataPath must be durable storage."
            )
        return winner

    def close_unrun(self, token: str, batch: int, task: int, starts: Mapping[ShardRef, Position]) -> TaskEnd:
        """Close the record of a task that never ran as "read nothing", unless an attempt of it records
        its ends first; returns the record that stands."""
        unrun = TaskEnd(token, batch, task, {ref: ShardEnd.not_run(start) for ref, start in starts.items()})
        return self.write(unrun)

    def check(self, record: TaskEnd, starts: Mapping[ShardRef, Position]) -> None:
        """A record must cover exactly the shards the checkpoint planned for its task, from the start
        positions the checkpoint gives: anything else means metadataPath holds another query's records."""
        for ref, start in starts.items():
            end = record.shards.get(ref)
            if end is None or end.start != start:
                raise CheckpointMismatchError(
                    f"The batch-end record of batch {record.batch}, task {record.task} under metadataPath "
                    f"'{self.location}' does not match the checkpoint for shard {ref[1]} of {ref[0]}. "
                    "metadataPath must belong to this query's checkpoint only."
                )

    # -- garbage collection --------------------------------------------------------------------
    def collect(self, token: str, below: int) -> None:
        """Delete the records of batches before `below`: once batch `below` is in the offset log (its
        start positions are in the checkpoint), nothing before it can be replayed nor re-planned."""
        if below <= self._collected_below.get(token, 0):
            return
        for name in self.store.list_folders(token):
            if name.startswith("batch-") and int(name[6:]) < below:
                self.store.delete_folder(f"{token}/{name}")
        self._collected_below[token] = below
