"""The AWS Glue Schema Registry's wire format, as its serializers (the KPL/KCL integration, Flink's
avro-glue format, the Java and Python serde libraries) frame each record:

    byte 0      header version, 3
    byte 1      compression: 0 none, 5 zlib
    bytes 2-17  the schema version's UUID (the registry's SchemaVersionId)
    bytes 18-   the payload (Avro binary, JSON text or Protobuf), zlib-compressed when byte 1 says so

The UUID names the *writer's* schema version; a reader decodes into its own (see `avro_types`).
"""

from __future__ import annotations

import functools
import uuid
import zlib
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

HEADER_VERSION = 3
COMPRESSION_NONE = 0
COMPRESSION_ZLIB = 5
HEADER_BYTES = 18


@functools.cache
def _plain() -> pa.Scalar:
    """The header's first two bytes when uncompressed, made on first use: building an Arrow scalar
    loads pandas (pyarrow checks for pandas objects), which a process that only imports this module
    (a query's planning) does not need."""
    return pa.scalar(bytes([HEADER_VERSION, COMPRESSION_NONE]), pa.binary())


MAX_INFLATED = 64 * 1024 * 1024  # a record inflating beyond this is refused (Kinesis records are <= 10 MiB)


class WireError(ValueError):
    """A payload that is not framed as the registry's serializers frame records."""


class Framed(NamedTuple):
    schema_version: str  # the writer's SchemaVersionId, as the registry spells it (lower-case UUID)
    body: bytes  # the payload, inflated


def unframe(payload: bytes) -> Framed:
    """The writer's schema version and the payload of one record; WireError when it is not framed."""
    if len(payload) < HEADER_BYTES:
        raise WireError(f"{len(payload)} bytes, shorter than the {HEADER_BYTES}-byte header")
    if payload[0] != HEADER_VERSION:
        raise WireError(f"header version {payload[0]}, not {HEADER_VERSION}")
    compression = payload[1]
    version = _version_text(bytes(payload[2:HEADER_BYTES]))
    body = bytes(payload[HEADER_BYTES:])
    if compression == COMPRESSION_ZLIB:
        inflater = zlib.decompressobj()
        try:
            body = inflater.decompress(body, MAX_INFLATED)
        except zlib.error as exc:
            raise WireError(f"the zlib-compressed payload does not inflate ({exc})") from None
        if inflater.unconsumed_tail:
            raise WireError(f"the payload inflates beyond {MAX_INFLATED} bytes")
        # zlib inflates what it has and says nothing of what is missing: a cut body would decode
        # into a shorter record (or fail later, far from the cause), and bytes after the end of the
        # stream would be silently ignored.
        if not inflater.eof:
            raise WireError("the zlib-compressed payload is cut short (its stream does not end)")
        if inflater.unused_data:
            raise WireError(
                f"{len(inflater.unused_data)} bytes follow the end of the zlib-compressed payload"
            )
    elif compression != COMPRESSION_NONE:
        raise WireError(f"compression byte {compression}, neither 0 (none) nor 5 (zlib)")
    return Framed(version, body)


def plain_bodies(data: pa.Array) -> pa.Array | None:
    """The bodies of a batch of framed records by Arrow kernels, when every record is there, framed
    and not compressed (what the registry's serializers write by default); None when some record
    needs a look of its own (`unframe`). Why: unframing record by record in Python cost more than
    Arrow's JSON reader takes to decode the bodies (`json_batch`)."""
    if not len(data) or data.null_count:
        return None
    long_enough = pc.all(pc.greater_equal(pc.binary_length(data), HEADER_BYTES)).as_py()
    if not long_enough or not pc.all(pc.equal(pc.binary_slice(data, 0, 2), _plain())).as_py():
        return None
    return pc.binary_slice(data, HEADER_BYTES, 2**31 - 1)


@functools.lru_cache(maxsize=1024)
def _version_text(raw: bytes) -> str:
    """A stream carries a handful of schema versions: parsing the UUID of each record cost a third of
    the decode (bash scripts/bench.sh glue-decode), a cache lookup costs next to nothing."""
    return str(uuid.UUID(bytes=raw))


def frame(schema_version: str, body: bytes, compress: bool = False) -> bytes:
    """One record as the registry's serializers write it (the sink's `valueFormat=glue`)."""
    if compress:
        body = zlib.compress(body)
    flag = COMPRESSION_ZLIB if compress else COMPRESSION_NONE
    return bytes([HEADER_VERSION, flag]) + uuid.UUID(schema_version).bytes + body
