"""One shard's rows of one batch, gathered as Arrow columns and handed to Spark as one record batch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ...aws.arrow_arrays import (
    binary_array,
    empty,
    fixed_width,
    float64_array,
    float64_values,
    int64_array,
    int64_zeros,
    repeat_string,
    string_array,
)
from ...aws.get_records import Records
from ..schema import ARROW_SCHEMA

_TIMESTAMP = pa.timestamp("us", tz="UTC")


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
                    string_array(self.keys),
                    string_array(self.seqs),
                    float64_array(self.arrivals),
                    int64_array(self.subs) if any(self.subs) else None,
                )
            )
            self.data, self.keys, self.seqs, self.subs, self.arrivals = [], [], [], [], []

    def _column(self, index: int, kind: pa.DataType) -> pa.Array:
        parts = [chunk[index] for chunk in self.chunks]
        if not parts:
            return empty(kind)
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
        # (numpy, not pc.multiply: a Python number in a compute call is a pa.scalar, which imports pandas)
        micros = np.round(float64_values(arrivals) * 1e6).astype(np.int64)
        return pa.RecordBatch.from_arrays(
            [
                data,
                repeat_string(self.stream, n),
                repeat_string(self.shard, n),
                keys,
                seqs,
                subs if subs is not None else int64_zeros(n),
                fixed_width(_TIMESTAMP, n, micros),
                repeat_string(self.arn, n),
            ],
            schema=ARROW_SCHEMA,
        )

    def to_arrow(self) -> pa.RecordBatch:
        """The rows as one record batch (for tests and tools; reads hand Spark `to_batches`)."""
        table = pa.Table.from_batches(self.to_batches(), schema=ARROW_SCHEMA)
        return pa.RecordBatch.from_arrays(
            [column.combine_chunks() for column in table.columns], schema=ARROW_SCHEMA
        )
