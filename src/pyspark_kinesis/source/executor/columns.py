"""One shard's rows of one batch, gathered as Arrow columns and handed to Spark as one record batch."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ...aws.arrow_arrays import binary_array
from ...aws.get_records import Records
from ..schema import ARROW_SCHEMA


@dataclass
class Columns:
    """One shard's rows as columns, turned into an Arrow batch at the end. Responses taken in bulk
    arrive as slices of their Arrow arrays (`chunks`); rows taken one by one (aggregates, replays)
    wait in the lists below until the next slice or the end become a chunk, so row order is kept."""

    stream: str
    arn: str
    shard: str
    # (data, partitionKey, sequenceNumber, arrival seconds, subSequenceNumber or None when all are 0)
    chunks: list[tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array | None]] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)  # pending rows, one by one
    keys: list[str] = field(default_factory=list)
    seqs: list[str] = field(default_factory=list)
    subs: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # epoch seconds
    rows: int = 0

    def __len__(self) -> int:
        return self.rows

    def append(self, payload: bytes, key: str, seq: str, sub: int, arrival: float) -> None:
        self.data.append(payload)
        self.keys.append(key)
        self.seqs.append(seq)
        self.subs.append(sub)
        self.arrivals.append(arrival)
        self.rows += 1

    def add(self, records: Records, count: int) -> None:
        """Append the first `count` rows of a response, as slices of its arrays."""
        self._flush()
        columns = (records.data, records.keys, records.seqs, records.arrivals)
        if count < len(records):
            columns = tuple(column.slice(0, count) for column in columns)
        self.chunks.append((*columns, None))
        self.rows += count

    def _flush(self) -> None:
        if self.data:
            self.chunks.append(
                (
                    binary_array(self.data),
                    pa.array(self.keys, pa.string()),
                    pa.array(self.seqs, pa.string()),
                    pa.array(self.arrivals, pa.float64()),
                    pa.array(self.subs, pa.int64()) if any(self.subs) else None,
                )
            )
            self.data, self.keys, self.seqs, self.subs, self.arrivals = [], [], [], [], []

    def _column(self, index: int, kind: pa.DataType) -> pa.Array:
        parts = [chunk[index] for chunk in self.chunks]
        if not parts:
            return pa.array([], kind)
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    def payloads(self) -> pa.Array:
        self._flush()
        return self._column(0, pa.binary())

    def to_batches(self) -> list[pa.RecordBatch]:
        """The rows as Arrow record batches in order, one per chunk: each response's slice as it came
        (bulk) or a run of rows taken one by one. Not concatenated into one: Spark takes the batches as
        they are, and a concatenation copies every payload once more (at 1 KB records, about a fifth
        of the executor workers' CPU per MB)."""
        self._flush()
        return [self._batch(chunk) for chunk in self.chunks]

    def _batch(self, chunk: tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array | None]) -> pa.RecordBatch:
        data, keys, seqs, arrivals, subs = chunk
        n = len(data)
        micros = pc.cast(pc.round(pc.multiply(arrivals, 1e6)), pa.int64())
        return pa.RecordBatch.from_arrays(
            [
                data,
                _repeat(self.stream, n),
                _repeat(self.shard, n),
                keys,
                seqs,
                subs if subs is not None else pa.repeat(pa.scalar(0, pa.int64()), n),
                micros.cast(pa.timestamp("us", tz="UTC")),
                _repeat(self.arn, n),
            ],
            schema=ARROW_SCHEMA,
        )

    def to_arrow(self) -> pa.RecordBatch:
        """The rows as one record batch (for tests and tools; reads hand Spark `to_batches`)."""
        table = pa.Table.from_batches(self.to_batches(), schema=ARROW_SCHEMA)
        return pa.RecordBatch.from_arrays(
            [column.combine_chunks() for column in table.columns], schema=ARROW_SCHEMA
        )


def _repeat(value: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)
