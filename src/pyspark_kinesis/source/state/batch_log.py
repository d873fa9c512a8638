"""The batch-end log: where tasks record how far each shard was read in a batch, and its one owner.

Spark logs a batch's offset before the batch runs, so where the batch *ends* is learned by its tasks
and written here, under the user's `metadataPath`, one record per (batch, task), first writer wins
(see `store.BatchEndStore`). Everything that knows how these records are laid out, decoded, checked
against the checkpoint and collected lives in `BatchEndLog`, which both sides use: the driver to learn
where the last batch ended and to collect old batches, the executors to record or replay.

Layout under metadataPath (one folder per query, named by the query's random token, which its offsets
carry):

    <token>/source.json                        the query's identity (token, streams at start)
    <token>/live/<ms>.json                     the query runs: renewed every 20 s by its driver
    <token>/batch-000000000007/planned.json     batch 7 was planned, and its offset (written before Spark
                                               logs it)
    <token>/batch-000000000007/task-00003.json  where task 3 of batch 7 stopped on each of its shards
    <token>/batch-000000000007/loss-task-00003.json  what a replay of that task went on without
                                               (failOnDataLoss=false), for the driver to report
    <token>/batch-000000000007/read.json        the tasks whose records the driver read (or closed)
                                               when it first planned from batch 7
    <token>/batch-000000000007/quiet-<ms>.json  idle shards the driver's looks found at their tip after
                                               batch 7, and when (the newest note only)

A batch's tasks need not all run: a `foreachBatch` that calls `df.show()` or `df.take(n)`, or returns
without touching `df`, leaves tasks that never ran and never recorded anything. Such a task emitted
nothing, so the driver closes its record as "read nothing" through the same first-writer-wins write
(a late attempt then loses, adopts it and emits nothing) and its shards are read again from the same
positions. The `planned` marker tells that case apart from a metadataPath that was changed or cleaned:
a missing task record under a planned batch is a task that never ran; a missing marker means the
records are gone.

Spark may plan a batch again: after a crash under asynchronous progress tracking, it plans from an
older durable offset, and batches that ran already are planned anew. The marker keeps the offset the
batch was planned with, and planning the same batch again returns it unchanged, so the batch reads
exactly what it read before. A batch's records live until Spark commits a later offset than its own.

The driver reads a batch's records when it plans from the batch's offset, and notes which tasks had
one (`read.json`): planning from that offset again (a restart, a stateful query's no-data batch) that
finds one of them gone means a record was deleted from under a batch that ran, and fails loudly,
where "never ran" would read its shards again.

One metadataPath serves one running query: its driver renews a `live` record, and a query with
another token that finds a fresh one refuses to start (two queries would share the default fan-out
consumer, named after metadataPath). A live record names its process: one on this host whose process
is gone (a driver killed and restarted here) does not hold metadataPath, and a new query collects the
folders such dead queries left before Spark logged any of their batches.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ...errors import CheckpointMismatchError
from ...model import Position, ShardInfo, ShardRef
from .layout import (
    QUIET_PREFIX,
    READ_NAME,
    batch_folder,
    loss_key,
    planned_key,
    quiet_key,
    read_key,
    source_key,
    task_key,
    task_name,
)
from .liveness import LIVE_EVERY_S, LIVE_FOR_S, LiveRecords
from .offsets import ShardEnd, TaskEnd
from .store import BatchEndStore, open_store

__all__ = [
    "LIVE_EVERY_S",
    "LIVE_FOR_S",
    "QUIET_PREFIX",
    "READ_NAME",
    "BatchEndLog",
    "Listed",
    "PlannedBatch",
    "batch_folder",
    "loss_key",
    "offset_digest",
    "planned_key",
    "quiet_key",
    "read_key",
    "source_key",
    "task_key",
    "task_name",
]

log = logging.getLogger(__name__)


def offset_digest(offset: Mapping[str, Any]) -> str:
    """A short fingerprint of an offset as Spark logs it (key order does not matter)."""
    return hashlib.sha256(orjson.dumps(offset, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


Listed = dict[ShardRef, ShardInfo]  # what the planning listing said of each shard a batch's tasks read


@dataclass(frozen=True)
class PlannedBatch:
    """What a batch's `planned` marker says: when, from which start offset, its own offset (None in
    markers written before markers held offsets), and the HashKeyRange of each shard its tasks read as
    the planning listing knew it, with a closed shard's sequence number range (None in markers written
    before markers held them)."""

    at_ms: int
    start_digest: str | None
    offset: dict[str, Any] | None
    listed: Listed | None = None

    @property
    def digest(self) -> str | None:
        return None if self.offset is None else offset_digest(self.offset)


def _listed_json(listed: Listed) -> dict[str, dict[str, list[Any]]]:
    """{stream: {shard: [low, high, first, last]}}: hash key bounds in hexadecimal (a 128-bit bound is 32
    digits), the StartingSequenceNumber and a closed shard's EndingSequenceNumber (null: not said)."""
    out: dict[str, dict[str, list[Any]]] = {}
    for (key, sid), info in sorted(listed.items()):
        last = info.last_seq if info.closed else None
        out.setdefault(key, {})[sid] = [f"{info.start_hash:x}", f"{info.end_hash:x}", info.first_seq, last]
    return out


def _listed_from_json(data: Mapping[str, Mapping[str, list[Any]]]) -> Listed:
    return {
        ShardRef(key, sid): ShardInfo(
            sid, None, None, int(low, 16), int(high, 16), last is not None, first, last
        )
        for key, shards in data.items()
        for sid, (low, high, first, last) in shards.items()
    }


class BatchEndLog(LiveRecords):
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
    def start_query(
        self, token: str, streams: list[str], where: Mapping[str, Mapping[str, str | None]] | None = None
    ) -> None:
        """Record a new query's identity; its offsets carry `token`. `where`: each stream's region and
        endpoint (never credentials), so that the CLI's `lag` reaches the streams the query reads
        without being told again."""
        record: dict[str, Any] = {"token": token, "streams": streams}
        if where:
            record["where"] = {arn: dict(place) for arn, place in where.items()}
        self.store.put_if_absent(source_key(token), orjson.dumps(record))

    def recorded_where(self, token: str) -> dict[str, dict[str, str | None]]:
        """Each stream's region and endpoint as the query recorded them at its start ({} before this
        was recorded)."""
        raw = self.store.get(source_key(token))
        return dict(orjson.loads(raw).get("where") or {}) if raw else {}

    def check_query(self, token: str, batch: int = -1, streams: list[str] | None = None) -> None:
        """Fail clearly unless the records of the query with this token are here. A `source.json`
        removed on its own (an object-store lifecycle rule expires it: it is written once, when the
        query first starts) is written again when the marker of the checkpoint's batch `batch` shows
        the query's records are here."""
        raw = self.store.get(source_key(token))
        if raw is None and batch >= 0 and self.planned(token, batch) is not None:
            log.warning(
                "metadataPath '%s': the query's identity record %s was gone (an expiry rule on the "
                "storage?) while its batch records are here: written again. Exclude metadataPath from "
                "expiry rules.",
                self.location,
                source_key(token),
            )
            self.start_query(token, streams or [])
            raw = self.store.get(source_key(token))
        if raw is None:
            raise CheckpointMismatchError(
                f"metadataPath '{self.location}' holds no records for this checkpoint "
                f"(query token {token}). Restart with the metadataPath the query was first started "
                "with, or start over with a new checkpointLocation. If an expiry rule (an S3 lifecycle "
                "rule) covers metadataPath, it deleted them: exclude that prefix from expiry."
            )
        meta = orjson.loads(raw)
        if meta.get("token") != token:
            raise CheckpointMismatchError(
                f"The records under metadataPath '{self.location}' belong to another query "
                f"(token {meta.get('token')}, not {token}). Use the metadataPath of this query."
            )

    # -- batches -------------------------------------------------------------------------------
    def mark_planned(
        self,
        token: str,
        batch: int,
        offset: dict[str, Any],
        start: Mapping[str, Any],
        listed: Listed | None = None,
    ) -> dict[str, Any]:
        """Record that batch `batch` was planned with `offset` from the start offset `start` (and what
        the listing said of its shards: the hash key ranges its tasks filter KPL user records by, a
        closed shard's last sequence number), before Spark logs it, and return the
        offset that stands: this one, or the one an earlier planning of the same batch recorded (see the
        module docstring)."""
        record = {
            "token": token,
            "batch": batch,
            "at": int(time.time() * 1000),
            "from": offset_digest(start),
            "offset": offset,
            **({"listed": _listed_json(listed)} if listed is not None else {}),
        }
        if self.store.put_if_absent(planned_key(token, batch), orjson.dumps(record)):
            return offset
        earlier = self.planned(token, batch)
        if earlier is None or earlier.offset is None:  # a marker of an older version: no offset in it
            return offset
        self.check_same_start(batch, earlier, start)
        return earlier.offset

    def check_same_start(self, batch: int, planned: PlannedBatch, start: Mapping[str, Any]) -> None:
        """A batch planned again must be planned from the offset it was first planned from."""
        if planned.start_digest is not None and planned.start_digest != offset_digest(start):
            raise CheckpointMismatchError(
                f"Batch {batch} was planned before under metadataPath '{self.location}' from another "
                "offset than the checkpoint now gives: the checkpoint was restored from another copy, or "
                "two queries share this metadataPath. Use this query's own checkpoint and metadataPath, "
                "or start over with a new checkpointLocation and metadataPath."
            )

    def planned(self, token: str, batch: int) -> PlannedBatch | None:
        """Batch `batch`'s marker, or None if it was never planned (or its records are gone)."""
        raw = self.store.get(planned_key(token, batch))
        if raw is None:
            return None
        data = orjson.loads(raw)
        listed = data.get("listed")
        return PlannedBatch(
            int(data.get("at", 0)),
            data.get("from"),
            data.get("offset"),
            None if listed is None else _listed_from_json(listed),
        )

    def was_planned(self, token: str, batch: int) -> bool:
        return self.planned(token, batch) is not None

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
        positions the checkpoint gives (but those of streams it says that run dropped): anything else
        means metadataPath holds another query's records."""
        for ref, start in starts.items():
            if ref[0] in record.dropped:
                continue
            end = record.shards.get(ref)
            if end is None or end.start != start:
                raise CheckpointMismatchError(
                    f"The batch-end record of batch {record.batch}, task {record.task} under metadataPath "
                    f"'{self.location}' does not match the checkpoint for shard {ref[1]} of {ref[0]}. "
                    "metadataPath must belong to this query's checkpoint only."
                )

    def names(self, token: str, batch: int) -> frozenset[str]:
        """The records in batch `batch`'s folder (one listing): task records, loss notes, markers."""
        return frozenset(self.store.list_records(batch_folder(token, batch)))

    def mark_read(self, token: str, batch: int, tasks: list[int]) -> None:
        """The driver read batch `batch`'s records: these tasks had one (or were closed as never run)."""
        self.store.put_if_absent(read_key(token, batch), orjson.dumps({"tasks": sorted(tasks)}))

    def tasks_read(self, token: str, batch: int) -> frozenset[int]:
        """The tasks whose records the driver found when it first read batch `batch` (none if it never did)."""
        raw = self.store.get(read_key(token, batch))
        return frozenset(int(t) for t in orjson.loads(raw)["tasks"]) if raw else frozenset()

    # -- what replays went on without ------------------------------------------------------------
    def note_losses(
        self, token: str, batch: int, task: int, losses: Mapping[ShardRef, tuple[str, ...]]
    ) -> None:
        """A replay of a task returned fewer rows than its record says and went on (failOnDataLoss=false).
        The record stands (it describes the first attempt), so what the replay went without is kept
        beside it for the driver, which reports it (`lag.report_losses`); the first note of a task stands."""
        streams: dict[str, dict[str, list[str]]] = {}
        for (key, sid), texts in sorted(losses.items()):
            streams.setdefault(key, {})[sid] = list(texts)
        self.store.put_if_absent(loss_key(token, batch, task), orjson.dumps({"streams": streams}))

    def with_noted_losses(
        self, token: str, batch: int, ends: Mapping[ShardRef, ShardEnd], names: frozenset[str] | None = None
    ) -> dict[ShardRef, ShardEnd]:
        """`ends` with the losses replays of batch `batch` noted (`note_losses`) added to theirs: one
        read per note, of those in `names` (the batch folder's listing, listed here if not given)."""
        out = dict(ends)
        folder = batch_folder(token, batch)
        for name in sorted(self.names(token, batch) if names is None else names):
            data = self.store.get(f"{folder}/{name}") if name.startswith("loss-task-") else None
            for key, shards in (orjson.loads(data)["streams"] if data else {}).items():
                for sid, texts in shards.items():
                    if ShardRef(key, sid) in out:
                        end = out[ShardRef(key, sid)]
                        out[ShardRef(key, sid)] = replace(end, losses=end.losses + tuple(map(str, texts)))
        return out

    # -- the tip renewed while no batch runs --------------------------------------------------------
    def note_quiet(
        self, token: str, batch: int, at_ms: int, quiet: Mapping[ShardRef, tuple[Position, int]]
    ) -> str:
        """Note the shards the driver's looks found at their tip after batch `batch` (each with its
        position and when: `tip_probe.TipProbe.quiet`), so that a restart knows them too; returns the
        note's key (the caller deletes the note this one replaces)."""
        streams: dict[str, dict[str, list[Any]]] = {}
        for (key, sid), (position, seen) in sorted(quiet.items()):
            streams.setdefault(key, {})[sid] = [position.to_json(), seen]
        key = quiet_key(token, batch, at_ms)
        self.store.put_if_absent(key, orjson.dumps({"streams": streams}))
        return key

    def quiet_noted(
        self, token: str, batch: int, names: frozenset[str] | None = None
    ) -> tuple[str, dict[ShardRef, tuple[Position, int]]] | None:
        """The newest note of `note_quiet` for batch `batch`: its key and what it says (None: no note)."""
        names = self.names(token, batch) if names is None else names
        notes = sorted(name for name in names if name.startswith(QUIET_PREFIX))
        key = f"{batch_folder(token, batch)}/{notes[-1]}" if notes else ""
        raw = self.store.get(key) if notes else None
        if raw is None:
            return None
        return key, {
            ShardRef(stream, sid): (Position.from_json(position), int(seen))
            for stream, shards in orjson.loads(raw)["streams"].items()
            for sid, (position, seen) in shards.items()
        }

    def delete(self, key: str) -> None:
        self.store.delete(key)

    # -- garbage collection --------------------------------------------------------------------
    def collect(self, token: str, below: int) -> None:
        """Delete the records of batches before `below`, the batch of an offset Spark committed
        (`Planner.committed`). Spark commits an offset once a later batch is durable in its offset log
        (at once without, every interval with asynchronous progress tracking), and a restart replays
        or plans from the latest durable offset at the earliest: nothing before that offset's batch is
        read again, while its own records are what the next planning from it reads."""
        if below <= self._collected_below.get(token, 0):
            return
        for name in self.store.list_folders(token):
            if name.startswith("batch-") and int(name[6:]) < below:
                self.store.delete_folder(f"{token}/{name}")
        self._collected_below[token] = below
