"""Memory benchmark: the peak resident memory a task's read path adds, measured in a fresh process per
case (its peak reset after the imports), so that the Memory section of docs/performance.md states
measured figures, not estimates.

Cases: decoding one full GetRecords response (the vectorised scan, and msgspec for the bodies the scan
leaves to it), and one shard's read at the default limits (responses taken until `maxBytesPerShard`,
then the Arrow batch a task yields). Each case runs `ROUNDS` times, a fresh process each time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report import machine

ROUNDS = 3
SIZES = (100, 1000, 10_000)
MIB = 1024 * 1024


def _peak_kib() -> int:
    """This process's peak resident set (VmHWM) in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak() -> None:
    """Linux: writing 5 to clear_refs resets the peak resident set to the current one."""
    Path("/proc/self/clear_refs").write_text("5")


def child(case: str, size: int) -> dict[str, float]:
    """Run one case in this (fresh) process: what its peak grew by, over what payload it held."""
    import gc

    import pyarrow as pa

    from benchmarks.decode import get_records_body
    from pyspark_kinesis.aws.get_records import decode, decode_msgspec
    from pyspark_kinesis.model import Position
    from pyspark_kinesis.source.executor.cutting import BatchCut, ShardLimits

    count = min(10_000, 10_000_000 // size)  # one full response: 10,000 records or 10 MB
    pa.array([b"warm"]).to_pylist()  # (Arrow's pool and the scan's code paths loaded before the reset)
    decode(get_records_body(size, 2))
    body = get_records_body(size, count)  # (a response's bytes as botocore hands them over: counted below)
    gc.collect()
    _reset_peak()
    base = _peak_kib() - len(body) // 1024
    payload = 0
    if case in ("decode", "msgspec"):
        records = (decode if case == "decode" else decode_msgspec)(body)["Records"]
        payload = size * count
        del records, body
    elif case == "shard":
        limits = ShardLimits(100_000, 64 * MIB)  # the defaults: maxRecordsPerShard, maxBytesPerShard
        stream = "arn:aws:kinesis:us-east-1:0:stream/bench"
        read = BatchCut("bench", stream, "shardId-0", Position.trim_horizon(), limits, None)
        for _response in range(2 + 64 * MIB // (size * count)):
            read.take(decode(body)["Records"], Position.trim_horizon())  # (one response held at a time)
            if read.stop:
                break
        payload = read.n_bytes
        batch = read.cols.to_batches()
        del batch
    else:
        raise ValueError(case)
    peak = _peak_kib()
    return {"grew_mib": (peak - base) / 1024, "payload_mib": payload / MIB}


@dataclass
class MemoryRow:
    case: str
    size: int
    payload_mib: float
    grew_mib: list[float]

    @property
    def ratio(self) -> list[float]:
        return sorted(g / self.payload_mib for g in self.grew_mib)

    def show(self) -> str:
        ratios = self.ratio
        return f"{statistics.median(ratios):.1f}x ({ratios[0]:.1f}-{ratios[-1]:.1f})"

    def show_mib(self) -> str:
        grew = sorted(self.grew_mib)
        return f"{statistics.median(grew):.0f} ({grew[0]:.0f}-{grew[-1]:.0f})"


def run_memory(rounds: int = ROUNDS) -> list[MemoryRow]:
    rows = []
    for case in ("decode", "msgspec", "shard"):
        for size in SIZES:
            results = []
            for _round in range(rounds):
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.memory", case, str(size)],
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=True,
                    env=dict(os.environ),
                )
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            rows.append(MemoryRow(case, size, results[0]["payload_mib"], [r["grew_mib"] for r in results]))
    return rows


LABELS = {
    "decode": "decode one full response (the vectorised scan)",
    "msgspec": "decode one full response by msgspec (bodies the scan leaves to it)",
    "shard": "one shard's read at the default limits, then its Arrow batches",
}


def markdown_memory(rows: list[MemoryRow], rounds: int = ROUNDS) -> str:
    lines = [
        "## Memory",
        "",
        f"Measured {machine()}, with `bash scripts/bench.sh memory`: each case in a fresh process "
        f"({rounds} rounds, one process each), the process's peak resident memory (VmHWM) reset after "
        "the imports and a warm-up; a cell is how much the peak grew, in MiB and as a multiple of the "
        "payload the case held (median, lowest-highest). A full response is 10,000 records or 10 MB; a "
        "shard's read takes responses until its default limits (100,000 records, 64 MiB) and then builds "
        "the Arrow batches the task yields (one per response taken: the responses' arrays, not copied).",
        "",
        "| case | record size | payload MiB | peak grew MiB | peak / payload |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {LABELS[row.case]} | {row.size} B | {row.payload_mib:.1f} | {row.show_mib()} | {row.show()} |"
        )
    lines += [
        "",
        "A task holds the rows of its shards for one batch until its batch end is recorded, then yields them "
        "as Arrow record batches (per shard, one per response taken): per shard it reads, at most "
        "`min(maxRecordsPerShard, its share of maxRecordsPerBatch)` records and "
        "`min(maxBytesPerShard, its share of maxBytesPerBatch)` bytes of payload, which at its peak costs "
        "the multiple in the last rows (the response being decoded, the rows taken so far, and the Arrow "
        "batches built from them); each further shard fetched at that moment adds a response's decode. "
        "`targetTasks`/`maxShardsPerTask` multiply a task's share by the shards it reads, so lower "
        "`maxBytesPerShard` when grouping many busy shards. Records up to 10 MiB (streams raised with "
        "UpdateMaxRecordSize) fit these bounds: a batch takes at least one record however large, and a "
        "GetRecords response carries at most 10 MiB.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
