"""GetRecords responses decoded straight from the JSON body into Arrow columns.

botocore signs, sends and retries GetRecords (its credentials, SigV4, retry modes, connection pool),
but its generic parser walks every record through the service model, turns each timestamp into a
datetime and each payload into bytes one at a time: about 39 MB of payload per second per core.
So the clients the connector builds carry a response-parser factory (response_parser.py) whose JSON
parser hands GetRecords bodies to `decode` and everything else (errors included) to botocore's own code. `decode` reads the
bodies of the usual shape with the vectorised scan (get_records_scan.py: no Python object per record)
and any other with msgspec against a fixed schema, which is several times faster than botocore
too (see docs/performance.md). Both refuse a payload that is not valid base64 instead of silently
dropping characters.

A body that is not a complete GetRecords document decodes to {}: it has no "Records", and
`KinesisProxy` asks again instead of reading it as "shard closed". (A connection cut mid-body is not
one: bodies are read whole against their Content-Length, whole_body.py, and a short one is botocore's
ConnectionClosedError, retried; a body without a length, ended by a closed connection, can be.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from .arrow_arrays import binary_array, float64_array, string_array
from .get_records_scan import scan


class _Record(msgspec.Struct, rename="pascal", gc=False, kw_only=True):
    sequence_number: str
    partition_key: str | None = None  # absent for records put with the service's AUTO record distribution
    data: bytes  # base64 in the body; msgspec decodes it
    approximate_arrival_timestamp: float  # epoch seconds, as Kinesis sends them


class _Output(msgspec.Struct, rename="pascal", gc=False):
    records: list[_Record]
    next_shard_iterator: str | None = None
    millis_behind_latest: float | None = None  # an integer; a float is accepted, not refused
    child_shards: list[dict[str, Any]] | None = None


_DECODER = msgspec.json.Decoder(_Output)


@dataclass(slots=True)
class Records:
    """The records of one GetRecords response, column by column, as Arrow arrays (the bulk path slices
    them into the batch as they are). The record-by-record path (KPL aggregates, replays) reads them
    as Python lists, made once per response when first asked for."""

    data: pa.BinaryArray
    keys: pa.StringArray
    seqs: pa.StringArray
    arrivals: pa.DoubleArray  # epoch seconds, as Kinesis sends them
    _lists: tuple[list[str], list[str], list[bytes], list[float]] | None = None
    _payload_bytes: int = -1

    @classmethod
    def from_lists(
        cls, seqs: list[str], keys: list[str | None], data: list[bytes], arrivals: list[float]
    ) -> Records:
        return cls(
            data=binary_array(data),
            keys=string_array(keys),
            seqs=string_array(seqs),
            arrivals=float64_array(arrivals),
        )

    def __len__(self) -> int:
        return len(self.seqs)

    def slice(self, offset: int) -> Records:
        """The records from `offset` on (a verified read drops the record it resumed after)."""
        return Records(
            self.data.slice(offset),
            self.keys.slice(offset),
            self.seqs.slice(offset),
            self.arrivals.slice(offset),
        )

    @property
    def payload_bytes(self) -> int:
        """Payload bytes of the response: pacing, the limits and the Arrow build all need it."""
        if self._payload_bytes < 0:
            self._payload_bytes = self.bytes_before(len(self))
        return self._payload_bytes

    def bytes_before(self, index: int) -> int:
        """Payload bytes of the first `index` records."""
        return pc.sum(pc.binary_length(self.data.slice(0, index))).as_py() or 0

    def lists(self) -> tuple[list[str], list[str], list[bytes], list[float]]:
        """(seqs, keys, data, arrivals) as Python lists."""
        if self._lists is None:
            self._lists = (
                self.seqs.to_pylist(),
                self.keys.to_pylist(),
                self.data.to_pylist(),
                self.arrivals.to_pylist(),
            )
        return self._lists


def decode(body: bytes) -> dict[str, Any]:
    """A GetRecords body -> {"Records": Records, "NextShardIterator", "MillisBehindLatest", "ChildShards"}.
    The vectorised scan reads the bodies it recognises; msgspec reads the others."""
    scanned = scan(body)
    if scanned is not None:
        out: dict[str, Any] = {"Records": Records(scanned.data, scanned.keys, scanned.seqs, scanned.arrivals)}
        if scanned.next_iterator is not None:
            out["NextShardIterator"] = scanned.next_iterator
        if scanned.millis_behind is not None:
            out["MillisBehindLatest"] = scanned.millis_behind
        return out
    return decode_msgspec(body)


def decode_msgspec(body: bytes) -> dict[str, Any]:
    """`decode` by msgspec alone: any body, including those the scan leaves to it."""
    try:
        doc = _DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError):  # validation errors included
        return {}
    raw = doc.records
    out: dict[str, Any] = {
        "Records": Records.from_lists(
            seqs=[r.sequence_number for r in raw],
            keys=[r.partition_key for r in raw],
            data=[r.data for r in raw],
            arrivals=[r.approximate_arrival_timestamp for r in raw],
        )
    }
    if doc.next_shard_iterator is not None:
        out["NextShardIterator"] = doc.next_shard_iterator
    if doc.millis_behind_latest is not None:
        out["MillisBehindLatest"] = doc.millis_behind_latest
    if doc.child_shards is not None:
        out["ChildShards"] = doc.child_shards
    return out
