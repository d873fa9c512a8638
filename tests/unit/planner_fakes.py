"""A fake Kinesis proxy, an in-memory batch-end store and a clock: the planner without Spark or a server.

The planner takes a proxy factory and a clock (as Flink's enumerator takes a StreamProxy), so its
decisions (discovery timing, idle polling, AvailableNow drains, added and removed streams, expiry)
can be driven batch by batch here, with the tasks' records written by the test.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from pyspark_kinesis.aws.tip_look import TipAnswer
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.errors import StreamAccessError, StreamRecreatedError
from pyspark_kinesis.model import Position, ShardInfo, StreamIdentity
from pyspark_kinesis.source.driver.planner import Planner
from pyspark_kinesis.source.options import SourceConfig, parse_options
from pyspark_kinesis.source.state.batch_log import BatchEndLog
from pyspark_kinesis.source.state.offsets import ShardEnd, SourceOffset, TaskEnd
from pyspark_kinesis.source.state.store import BatchEndStore

HALF = 2**127
CREATED = 1_700_000_000_000  # every fake stream's creation time


def arn(name: str) -> str:
    return f"arn:aws:kinesis:us-east-1:000000000000:stream/{name}"


def shard(sid: str, *parents: str, closed: bool = False, low: int = 0, high: int = 2**128 - 1) -> ShardInfo:
    parent = parents[0] if parents else None
    adjacent = parents[1] if len(parents) > 1 else None
    return ShardInfo(sid, parent, adjacent, low, high, closed)


class MemoryStore(BatchEndStore):
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key in self.data:
            return False
        self.data[key] = data
        return True

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def delete_folder(self, prefix: str) -> None:
        for key in [k for k in self.data if k.startswith(prefix + "/")]:
            del self.data[key]

    def _under(self, prefix: str) -> list[str]:
        lead = f"{prefix}/" if prefix else ""
        return [k[len(lead) :] for k in self.data if k.startswith(lead)]

    def list_folders(self, prefix: str) -> list[str]:
        return sorted({rest.split("/")[0] for rest in self._under(prefix) if "/" in rest})

    def list_records(self, prefix: str) -> list[str]:
        return sorted(rest for rest in self._under(prefix) if "/" not in rest)


@dataclass
class FakeKinesis:
    """Shards per stream ARN, as ListShards would list them; counts the calls."""

    shards: dict[str, list[ShardInfo]] = field(default_factory=dict)
    list_calls: Counter = field(default_factory=Counter)
    checks: Counter = field(default_factory=Counter)  # DescribeStreamSummary calls (same-stream checks)
    failures: int = 0  # how many of the next listings fail (throttled, region down)
    created: dict[str, int] = field(default_factory=dict)  # creation time per stream (default CREATED)
    lagging: list[list[ShardInfo]] = field(default_factory=list)  # answered first: listings behind the stream
    # What a look at an idle shard answers (`look_past_tip`), by shard id: default nothing new.
    tips: dict[str, TipAnswer] = field(default_factory=dict)
    looks: list[tuple[str, str, Position, str | None]] = field(
        default_factory=list
    )  # (stream, shard, at, iterator)

    def factory(self, spec: StreamSpec) -> FakeProxy:
        return FakeProxy(self, spec)


class FakeProxy:
    def __init__(self, kinesis: FakeKinesis, spec: StreamSpec) -> None:
        self.kinesis, self.spec = kinesis, spec

    def identity(self) -> StreamIdentity:
        return StreamIdentity(
            self.spec.resolved_arn, self.kinesis.created.get(self.spec.resolved_arn, CREATED)
        )

    def check_same_stream(self) -> None:
        self.kinesis.checks[self.spec.resolved_arn] += 1
        if self.kinesis.created.get(self.spec.resolved_arn, CREATED) != self.spec.created_ms:
            raise StreamRecreatedError(f"{self.spec.resolved_arn} was re-created (fake)")

    def list_shards(self, open_only: bool = False) -> list[ShardInfo]:
        self.kinesis.list_calls[self.spec.resolved_arn] += 1
        if self.kinesis.failures > 0:
            self.kinesis.failures -= 1
            raise StreamAccessError(f"ListShards failed for {self.spec.resolved_arn} (injected)")
        lagging = self.kinesis.lagging
        listed = list(lagging.pop(0) if lagging else self.kinesis.shards[self.spec.resolved_arn])
        return [s for s in listed if not s.closed] if open_only else listed

    def look_past_tip(self, shard_id: str, position: Position, iterator: str | None) -> TipAnswer:
        self.kinesis.looks.append((self.spec.resolved_arn, shard_id, position, iterator))
        n = len(self.kinesis.looks)
        return self.kinesis.tips.get(shard_id, TipAnswer(False, f"it-{shard_id}-{n}"))


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def config(*names: str, **options: str) -> SourceConfig:
    opts = {"streamName": ",".join(names), "region": "us-east-1", "metadataPath": "/unused"}
    opts.setdefault("startingPosition", "TRIM_HORIZON")
    opts.update(options)
    return parse_options(opts, streaming=True).with_identities(
        [StreamIdentity(arn(n), CREATED) for n in names]
    )


def config_with_created(base: SourceConfig, created: int, **options: str) -> SourceConfig:
    """`base`'s streams as a restarted query would see them: with another creation time (re-created)."""
    names = [s.name for s in base.streams]
    fresh = parse_options(
        {"streamName": ",".join(names), "region": "us-east-1", "metadataPath": "/unused", **options},
        streaming=True,
    )
    return fresh.with_identities([StreamIdentity(s.resolved_arn, created) for s in base.streams])


@dataclass
class Harness:
    config: SourceConfig
    kinesis: FakeKinesis
    clock: Clock
    store: MemoryStore = field(default_factory=MemoryStore)

    def planner(self) -> Planner:
        """A planner for a (re)started driver: fresh caches, same store, same fake Kinesis."""
        return Planner(self.config, BatchEndLog(self.store, "mem://"), self.kinesis.factory, self.clock)

    def run(
        self,
        offset: SourceOffset,
        ends: dict[tuple[str, str], ShardEnd] | None = None,
        only: set[int] | None = None,
    ) -> None:
        """The tasks of batch `offset` (those in `only`, if given: the others never ran) record their
        ends; a shard without one in `ends` read 10 records and stopped short of the tip."""
        ends = ends or {}
        log = BatchEndLog(self.store, "mem://")
        for task, refs in offset.tasks().items():
            if only is not None and task not in only:
                continue
            shards = {}
            for ref in refs:
                start = offset.state(ref).position
                shards[ref] = ends.get(ref) or read(start, 10, tip=False, at_ms=self.clock.now)
            log.write(TaskEnd(offset.token, offset.batch, task, shards))


def read(
    start: Position, records: int, *, tip: bool, at_ms: int = 1, end: Position | None = None
) -> ShardEnd:
    """A shard's end after reading `records` records from `start`."""
    if end is None:
        end = Position.after(str(1000 + records)) if records else start
    return ShardEnd(
        start=start, reached=end, records=records, bytes=records * 100, at_tip=tip, read_at_ms=at_ms
    )


def one_stream(**options: str) -> Harness:
    """Stream "a" of two shards (each half the hash key space), planned with `options`."""
    kinesis = FakeKinesis({arn("a"): [shard("s0", high=HALF - 1), shard("s1", low=HALF)]})
    return Harness(config("a", **options), kinesis, Clock())


def logged(offset: SourceOffset) -> SourceOffset:
    """The offset as Spark's offset log gives it back (JSON text and back)."""
    return SourceOffset.from_json(json.loads(json.dumps(offset.to_json())))
