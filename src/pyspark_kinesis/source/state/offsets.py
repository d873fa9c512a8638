"""The values that cross process boundaries: the offset Spark logs, and a task's batch-end record.

Spark logs the offset for batch k *before* batch k runs, but Kinesis cannot say where a shard's data
ends without reading it. So the offset for batch k carries each shard's concrete *start* position
(the recorded ends of batch k-1), its lineage, and which task reads it; where batch k stopped is
learned by the executors and written once, atomically, as a TaskEnd record under metadataPath. A
replay of batch k reads exactly up to those recorded ends. All of this is plain JSON-able data.

A source may read several streams, so shards are grouped by stream, keyed by the stream's ARN (its
identity: names repeat across regions and accounts); in memory a shard is a `ShardRef`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import CheckpointFormatError
from ...model import Position, ShardRef
from .offset_codec import NO_TASK, decode_state, encode_state, pack_shard_id, unpack_shard_id

FORMAT_VERSION = 2  # batch-end records
OFFSET_VERSION = 3  # offsets: one compact string per shard (offset_codec); version 2 still loads


def _split(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.split(",") if p)


def _check_version(data: dict[str, Any], what: str, accepted: tuple[int, ...] = (FORMAT_VERSION,)) -> int:
    version = int(data.get("v", 0))
    if version not in accepted:
        raise CheckpointFormatError(
            f"The {what} is in format version {version}; this version of pyspark-kinesis reads versions "
            f"{', '.join(map(str, accepted))}: the checkpoint (or metadataPath) was written by a newer version. "
            "Run that version, or start over with a new checkpointLocation and metadataPath."
        )
    return version


def _nest(flat: dict[ShardRef, Any]) -> dict[str, dict[str, Any]]:
    """{(stream, shard): x} -> {stream: {shard: x.to_json()}} in sorted order (stable offsets)."""
    out: dict[str, dict[str, Any]] = {}
    for stream, sid in sorted(flat):
        out.setdefault(stream, {})[sid] = flat[ShardRef(stream, sid)].to_json()
    return out


@dataclass(frozen=True)
class ShardState:
    """One shard's entry in the offset."""

    position: Position
    parents: tuple[str, ...] = ()
    task: int = NO_TASK
    max_records: int = -1  # per-batch budget from Spark's read limit; -1 = only the per-shard cap
    max_bytes: int = -1
    idle: bool = False  # the last read found it at the tip with nothing new
    polled_ms: int = 0  # when it was last read (driver clock), for the idle poll interval
    closed: bool = False  # ListShards gave it an ending sequence number: its end is yet to be read
    # When a read last found the shard at the tip at exactly this position (read clock, ms; 0: not known).
    # Every record after the position arrived after that moment, so none of them can have aged out
    # within the stream's retention of it: a read that finds the position itself gone loses nothing.
    tip_ms: int = 0

    @property
    def finished(self) -> bool:
        return self.position.is_end

    def to_json(self) -> dict[str, Any]:
        return {
            "pos": self.position.to_json(),
            "par": ",".join(self.parents),
            "task": self.task,
            "rec": self.max_records,
            "byt": self.max_bytes,
            "idle": self.idle,
            "polled": self.polled_ms,
            "closed": self.closed,
            "tip": self.tip_ms,
        }

    def to_compact(self) -> str:
        return encode_state(
            self.position,
            self.parents,
            self.task,
            self.max_records,
            self.max_bytes,
            self.idle,
            self.polled_ms,
            self.closed,
            self.tip_ms,
        )

    @staticmethod
    def from_compact(text: str) -> ShardState:
        return ShardState(*decode_state(text))

    @staticmethod
    def from_json(data: dict[str, Any]) -> ShardState:
        """Format 2's entry (a dict per shard), for checkpoints written before format 3."""
        return ShardState(
            position=Position.from_json(data["pos"]),
            parents=_split(data.get("par", "")),
            task=int(data.get("task", NO_TASK)),
            max_records=int(data.get("rec", -1)),
            max_bytes=int(data.get("byt", -1)),
            idle=bool(data.get("idle", False)),
            polled_ms=int(data.get("polled", 0)),
            closed=bool(data.get("closed", False)),
            tip_ms=int(data.get("tip", 0)),
        )


@dataclass(frozen=True)
class SourceOffset:
    """The offset Spark logs. batch == -1 is the initial offset: nothing planned yet."""

    token: str  # ties the checkpoint to its records under metadataPath
    batch: int
    streams: dict[str, dict[str, ShardState]]  # stream ARN -> shard id -> state
    cutoff_ms: int | None = None  # Trigger.AvailableNow: read records that arrived up to here
    # drainInOneBatch: every shard is read to the cutoff in this one batch, in chunks (see `executor.drain`)
    drain: bool = False
    # Stream ARN -> its creation time when its positions were first taken: a stream deleted and
    # re-created under the same name has the same ARN, and these positions do not apply to it.
    created: dict[str, int] = field(default_factory=dict)

    def tasks(self) -> dict[int, list[ShardRef]]:
        """Task index -> the shards it reads, in (stream, shard id) order."""
        out: dict[int, list[ShardRef]] = {}
        for stream in sorted(self.streams):
            shards = self.streams[stream]
            for sid in sorted(shards):
                if shards[sid].task != NO_TASK:
                    out.setdefault(shards[sid].task, []).append(ShardRef(stream, sid))
        return out

    def state(self, ref: ShardRef) -> ShardState:
        return self.streams[ref[0]][ref[1]]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "v": OFFSET_VERSION,
            "token": self.token,
            "batch": self.batch,
            "streams": {
                stream: {pack_shard_id(sid): shards[sid].to_compact() for sid in sorted(shards)}
                for stream, shards in sorted(self.streams.items())
            },
        }
        if self.cutoff_ms is not None:
            data["cut"] = self.cutoff_ms
        if self.drain:
            data["drain"] = True
        if self.created:
            data["created"] = dict(sorted(self.created.items()))
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> SourceOffset:
        if _check_version(data, "offset", (2, OFFSET_VERSION)) == 2:
            streams = {
                stream: {sid: ShardState.from_json(s) for sid, s in shards.items()}
                for stream, shards in data["streams"].items()
            }
        else:
            streams = {
                stream: {unpack_shard_id(sid): ShardState.from_compact(s) for sid, s in shards.items()}
                for stream, shards in data["streams"].items()
            }
        return SourceOffset(
            token=str(data["token"]),
            batch=int(data["batch"]),
            streams=streams,
            cutoff_ms=data.get("cut"),
            drain=bool(data.get("drain", False)),
            created={str(k): int(v) for k, v in data.get("created", {}).items()},
        )


@dataclass(frozen=True)
class ShardEnd:
    """Where one shard stopped in one batch, as learned by the task that read it."""

    start: Position
    # Where the read got to: the shard's next batch starts here (SHARD_END when the read met the end of
    # a closed shard). Kept as "end" in the batch-end records.
    reached: Position
    records: int = 0
    bytes: int = 0
    at_tip: bool = False  # MillisBehindLatest was 0 on the last response
    reached_cutoff: bool = False  # an AvailableNow batch met a record that arrived after the cutoff
    children: tuple[str, ...] = ()  # ChildShards reported when the shard closed
    millis_behind: int = -1
    read_at_ms: int = 0  # wall clock when the read finished: drives the idle poll interval
    # The first user record read, (sequence number, sub-sequence number): it pins a start that moves as
    # data ages out (TRIM_HORIZON, a timestamp), so a replay can tell it starts where the first attempt did.
    first: tuple[str, int] | None = None
    unrun: bool = False  # closed by the driver for a task that never ran: nothing was read
    # Where the read kept its continuation for the shard's next batch, in the read mode's own words
    # (enhanced fan-out: `host:port@ms`, the holding agent's relay address and when its subscription was
    # opened, see `agent.relay` and `agent.spacing.Spacing`). A hint, never a position.
    holder: str = ""
    # drainInOneBatch: the chunks the shard was read in, each bounded like a batch's read of one shard,
    # in order (this end sums them up). A replay reads them one by one, each to its own recorded end.
    chunks: tuple[ShardEnd, ...] = ()
    # What the read went on without under failOnDataLoss=false (records past retention), each as the
    # executor's warning said it: the driver reports them from here, whichever executor read the shard.
    losses: tuple[str, ...] = ()
    # User records of KPL aggregates dropped as outside the shard's hash key range (a producer's stale
    # shard map after a reshard; the KPL re-sends them to the right shard).
    misplaced: int = 0

    @staticmethod
    def not_run(start: Position) -> ShardEnd:
        """The end of a shard whose task never ran (see `BatchEndLog.close_unrun`)."""
        return ShardEnd(start=start, reached=start, unrun=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start.to_json(),
            "end": self.reached.to_json(),
            "n": self.records,
            "b": self.bytes,
            "tip": self.at_tip,
            "cut": self.reached_cutoff,
            "children": ",".join(self.children),
            "behind": self.millis_behind,
            "at": self.read_at_ms,
            **({"fs": self.first[0], "fb": self.first[1]} if self.first is not None else {}),
            **({"unrun": True} if self.unrun else {}),
            **({"h": self.holder} if self.holder else {}),
            **({"chunks": [c.to_json() for c in self.chunks]} if self.chunks else {}),
            **({"loss": list(self.losses)} if self.losses else {}),
            **({"mis": self.misplaced} if self.misplaced else {}),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> ShardEnd:
        return ShardEnd(
            start=Position.from_json(data["start"]),
            reached=Position.from_json(data["end"]),
            records=int(data.get("n", 0)),
            bytes=int(data.get("b", 0)),
            at_tip=bool(data.get("tip", False)),
            reached_cutoff=bool(data.get("cut", False)),
            children=_split(data.get("children", "")),
            millis_behind=int(data.get("behind", -1)),
            read_at_ms=int(data.get("at", 0)),
            first=(str(data["fs"]), int(data.get("fb", 0))) if "fs" in data else None,
            unrun=bool(data.get("unrun", False)),
            holder=str(data.get("h", "")),
            chunks=tuple(ShardEnd.from_json(c) for c in data.get("chunks", ())),
            losses=tuple(str(text) for text in data.get("loss", ())),
            misplaced=int(data.get("mis", 0)),
        )


@dataclass(frozen=True)
class TaskEnd:
    """A task's durable record: the ends of all shards it read in one batch. Written once."""

    token: str
    batch: int
    task: int
    shards: dict[ShardRef, ShardEnd] = field(default_factory=dict)
    # Streams of the task's shards in the offset that this run did not read: removed from the options
    # (or re-created) since the batch was logged (see `TaskPlan.dropped`).
    dropped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "token": self.token,
            "batch": self.batch,
            "task": self.task,
            "streams": _nest(self.shards),
            **({"dropped": list(self.dropped)} if self.dropped else {}),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> TaskEnd:
        _check_version(data, "batch-end record")
        return TaskEnd(
            token=str(data["token"]),
            batch=int(data["batch"]),
            task=int(data["task"]),
            shards={
                ShardRef(stream, sid): ShardEnd.from_json(end)
                for stream, shards in data["streams"].items()
                for sid, end in shards.items()
            },
            dropped=tuple(str(key) for key in data.get("dropped", ())),
        )


@dataclass(frozen=True)
class ShardPlan:
    """One shard of a streaming task's plan: where its read starts and the budgets it may take."""

    stream: str  # the stream's ARN
    shard_id: str
    start: Position
    max_records: int
    max_bytes: int
    closed: bool = False  # known to be closed: read on through empty responses to its end
    tip_ms: int = 0  # when a read found the shard at the tip at `start` (see `ShardState.tip_ms`)
    holder: str = ""  # where the shard's last read kept its continuation (see `ShardEnd.holder`)
    # The shard's HashKeyRange as the driver's listing knows it (a shard's range never changes): a KPL
    # user record outside it is dropped on read (`executor.cutting.misplaced`). None: not known.
    hash_range: tuple[int, int] | None = None
    # A closed shard's EndingSequenceNumber where it bounds its records (`ShardInfo.known_end`), and its
    # StartingSequenceNumber: a read past the end is at the shard's end (see `cutting.ShardLimits.last_seq`).
    last_seq: str | None = None
    first_seq: str | None = None

    @property
    def ref(self) -> ShardRef:
        return ShardRef(self.stream, self.shard_id)


@dataclass(frozen=True)
class TaskPlan:
    """Everything one Spark task needs; pickled into the InputPartition."""

    token: str
    batch: int
    task: int
    shards: tuple[ShardPlan, ...]
    cutoff_ms: int | None
    # the query run's key for reads of continuations other executors keep (a secret: not in the repr)
    relay_key: bytes = field(default=b"", repr=False)
    drain: bool = False  # drainInOneBatch: read every shard to the cutoff, in chunks (`executor.drain`)
    dropped: tuple[str, ...] = ()  # streams of this task in the offset that the options no longer read


@dataclass(frozen=True)
class BackfillPlan:
    """One task of a batch read (a backfill): one shard from `start` to records that arrived by
    `cutoff_ms`, or to `end_at` when endingPosition names a sequence number of this shard."""

    stream: str  # the stream's ARN
    shard_id: str
    start: Position
    closed: bool
    cutoff_ms: int
    end_at: Position | None = None
    hash_range: tuple[int, int] | None = None  # the shard's HashKeyRange (see `ShardPlan.hash_range`)
    last_seq: str | None = None  # (see `ShardPlan.last_seq`)
    first_seq: str | None = None
