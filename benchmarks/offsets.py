"""How the offset grows with the stream, and what planning a batch of many shards costs on the driver.

Spark writes the source's offset to the checkpoint every batch, so its bytes per shard decide how much a
stream of thousands of shards writes per batch. Measured for format 2 (a dict per shard) and format 3
(one compact string per shard, `source.offset_codec`), for fresh shards (TRIM_HORIZON) and for shards
that carry a sequence number, a task and a poll time. Then the planner's `next_offset` for N shards, end
to end on the driver but for Kinesis: a fake proxy answers ListShards from memory, and the batch-end
records are read from and written to a real local store, as in a query.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass

from benchmarks.report import Spread, machine
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.model import Position, ShardInfo, StreamIdentity
from pyspark_kinesis.source.driver.planner import Planner
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.batch_log import BatchEndLog
from pyspark_kinesis.source.state.offsets import ShardEnd, ShardState, SourceOffset, TaskEnd

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/bench"
SEQ = "49654321098765432109876543210987654321098765432109876543"
CREATED = 1_700_000_000_000


@dataclass(frozen=True)
class Size:
    shards: int
    what: str
    format2: int
    format3: int


def _format2(offset: SourceOffset) -> int:
    data = offset.to_json() | {
        "v": 2,
        "streams": {k: {sid: s.to_json() for sid, s in v.items()} for k, v in offset.streams.items()},
    }
    return len(json.dumps(data, separators=(",", ":")))


def sizes(shards: int) -> list[Size]:
    ids = [f"shardId-{n:012d}" for n in range(shards)]
    cases = {
        "fresh (TRIM_HORIZON)": {sid: ShardState(Position.trim_horizon()) for sid in ids},
        "read (sequence number, task, poll time)": {
            sid: ShardState(Position.after(SEQ), task=n % 64, polled_ms=1_732_400_000_000)
            for n, sid in enumerate(ids)
        },
    }
    out = []
    for what, states in cases.items():
        offset = SourceOffset("0" * 32, 41, {ARN: states})
        out.append(
            Size(shards, what, _format2(offset), len(json.dumps(offset.to_json(), separators=(",", ":"))))
        )
    return out


class _Proxy:
    """ListShards from memory; the stream never changes."""

    def __init__(self, spec: StreamSpec, shards: list[ShardInfo]) -> None:
        self.spec, self.shards = spec, shards

    def identity(self) -> tuple[str, int]:
        return ARN, CREATED

    def check_same_stream(self) -> None:
        return None

    def list_shards(self, open_only: bool = False) -> list[ShardInfo]:
        return self.shards


def planning_times(shards: int, batches: int) -> Spread:
    """Seconds of `next_offset` per batch for `shards` shards, each batch after every task recorded
    where its shards ended (what the driver does between two batches, Kinesis calls excepted)."""
    step = 2**128 // shards
    listed = [
        ShardInfo(f"shardId-{n:012d}", None, None, n * step, (n + 1) * step - 1, False) for n in range(shards)
    ]
    options = {"streamName": "bench", "region": "us-east-1", "startingPosition": "TRIM_HORIZON"}
    times = []
    with tempfile.TemporaryDirectory(prefix="bench-offsets-") as folder:
        config = parse_options({**options, "metadataPath": folder}, streaming=True)
        config = config.with_identities([StreamIdentity(ARN, CREATED)])
        log = BatchEndLog.open(folder)
        planner = Planner(config, log, lambda spec: _Proxy(spec, listed))  # type: ignore[arg-type,return-value]
        offset = planner.initial_offset()
        log.start_query(offset.token, [ARN])
        for batch in range(batches + 1):
            began = time.perf_counter()
            offset = planner.next_offset(offset, None, None)
            if batch:  # the first batch also lists the stream and fills caches: not steady state
                times.append(time.perf_counter() - began)
            for task, refs in offset.tasks().items():
                ends = {
                    ref: ShardEnd(offset.state(ref).position, Position.after(str(10**50 + batch)), 10, 1000)
                    for ref in refs
                }
                log.write(TaskEnd(offset.token, offset.batch, task, ends))
    return Spread(times)


GOAL_SHARDS, GOAL_S = 10_000, 1.0  # planning at 10,000 shards under a second


def markdown(rows: list[Size], plan: dict[int, Spread], batches: int) -> str:
    lines = [
        "## 5. Offsets and planning at scale",
        "",
        f"Measured {machine()}, with `bash scripts/bench.sh offsets`: the bytes of "
        "the offset Spark writes to the checkpoint every batch, in format 2 (before 2026-11-23, a dict per "
        "shard) and format 3 (one compact string per shard), for shards that were never read and for "
        "shards that carry a sequence number, a task and a poll time; then the driver's planning of one "
        f"batch (`next_offset`, median (lowest-highest) over {batches} batches): reading every task's "
        "batch-end record from a local metadataPath, the lineage rule, assignment and the next offset, "
        "with ListShards answered from memory.",
        "",
        "| shards | shards' state | format 2 bytes | format 3 bytes | bytes per shard (2 -> 3) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.shards:,} | {row.what} | {row.format2:,} | {row.format3:,} | "
            f"{row.format2 / row.shards:.0f} -> {row.format3 / row.shards:.0f} | {row.format3 / row.format2:.2f} |"
        )
    lines += ["", "| shards | planning one batch |", "|---|---|"]
    for shards, spread in sorted(plan.items()):
        lines.append(f"| {shards:,} | {show_ms(spread)} |")
    if GOAL_SHARDS in plan:
        spread = plan[GOAL_SHARDS]
        verdict = "met" if spread.samples[-1] < GOAL_S else "not met"
        lines += [
            "",
            f"Goal (issue #65): planning a batch of {GOAL_SHARDS:,} shards under {GOAL_S:g} s: {verdict} "
            f"(slowest of the {batches} batches {spread.samples[-1] * 1000:,.0f} ms).",
        ]
    return "\n".join(lines) + "\n"


def show_ms(spread: Spread) -> str:
    """ "median (lowest-highest)" in milliseconds."""
    low, high = spread.samples[0], spread.samples[-1]
    return f"{spread.median * 1000:,.0f} ms ({low * 1000:,.0f}-{high * 1000:,.0f})"
