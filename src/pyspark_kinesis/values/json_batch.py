"""A batch of JSON bodies decoded at once by Arrow's JSON reader, to exactly what `json_types`
decodes record by record, or declined.

Why: record by record, orjson and then fitting each value in Python ran at a tenth of orjson alone
(docs/performance.md, `bench-glue-decode`); Arrow's reader parses the whole batch into typed columns
in C++, faster than orjson builds Python objects. Its rules are not the per-record ones everywhere, so its
result is used only where it is the per-record result, and a declined batch is decoded record by record
(which also names the record that does not decode). Where they differ, and what guards each:

- Arrow reads NaN, Inf and Infinity, and invalid UTF-8, which orjson refuses, also in a value it
  skips (a field the schema lacks): a batch is declined when its bytes are not UTF-8 or hold `NaN` or
  `Inf` where a value starts (after `:`, `,` or `[`). A pattern cannot tell a string's inside, so a
  string such as "a, Info" declines its batch too: only slower, the values are the same.
- A root `null` crashes Arrow's reader (pyarrow 26) when it comes first, and is a row of nulls later;
  the bodies are joined one per line, so only bodies whose first byte is `{` and last byte is `}` go
  to it, and it must return one row per body. Then each body is one object: a line starting with `{`
  can only start a row (inside an open object or array, a value without a comma is a syntax error), so
  each body starts at least one row, and one row per body leaves none for a second value in a body.
- Arrow fills a missing field with null: a null where the reader's schema requires a value (under a
  parent that is there) declines the batch.
- Timestamps and dates are read as strings. Arrow's cast converts them only when every one has a form
  that Arrow and Python's `fromisoformat` read alike (the patterns below); otherwise they are converted
  one by one as `json_types` does, and a string neither reads declines the batch.
- What Arrow refuses (another type than the schema's, a fraction or more than 64 bits in an integer,
  a key given twice: orjson keeps the last) declines the batch, and the per-record rules decide.

One difference is left, on purpose: orjson refuses a document nested deeper than 1,024 levels, Arrow's
reader does not. The reader's schema is at most 32 levels deep (`json_types.MAX_DEPTH`), so such a
body decodes in a batch only when the depth is in a field the schema lacks, and is then a valid
document decoded correctly; record by record it is an error. Telling them apart would take a
per-record pass over every body, the cost this module removes.
"""

from __future__ import annotations

import datetime
import logging

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from .json_types import _timestamp

log = logging.getLogger(__name__)

# Forms both Arrow's cast and Python's fromisoformat (3.11+) read, to the same instant. Year 0 is
# left out: Arrow reads it, Python has none.
_YEAR = r"(000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d\d\d)"
_DATE = rf"^{_YEAR}-\d{{2}}-\d{{2}}$"
_NAIVE = (
    rf"^{_YEAR}-\d{{2}}-\d{{2}}[T ]\d{{2}}:\d{{2}}(:\d{{2}}(\.\d{{1,6}})?)?$"  # UTC, as json_types reads it
)
_ZONED = _NAIVE[:-1] + r"(Z|[+-]\d{2}:\d{2})$"
_UTC = pa.timestamp("us", tz="UTC")
_MAX_BLOCK = 2**31 - 2  # Arrow's reader takes one block of at most this many bytes
_OPEN, _CLOSE = pa.scalar(b"{", pa.binary()), pa.scalar(b"}", pa.binary())


# NaN or Inf (Infinity) where a JSON value starts: after a colon, a comma or a bracket.
_NON_FINITE_TOKEN = r"[:,\[]\s*-?(NaN|Inf)"


class Declined(Exception):
    """The batch's result would not be provably the per-record one."""


def read_type(kind: DataType) -> pa.DataType:
    """What Arrow's reader is told a value is: the Spark type, every field nullable, timestamps and
    dates as the strings they are in JSON."""
    if isinstance(kind, StructType):
        return pa.struct([pa.field(f.name, read_type(f.dataType)) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return pa.list_(read_type(kind.elementType))
    simple: dict[type, pa.DataType] = {
        LongType: pa.int64(),
        DoubleType: pa.float64(),
        BooleanType: pa.bool_(),
        StringType: pa.string(),
        TimestampType: pa.string(),
        DateType: pa.string(),
    }
    return simple[type(kind)]


class JsonBatch:
    """Decodes a batch of JSON bodies into `strict` (the reader's Spark type, required fields not
    nullable), as Arrow's `arrow` type, or declines."""

    def __init__(self, strict: DataType, arrow: pa.DataType) -> None:
        assert isinstance(strict, StructType), "json_types maps a reader's schema to a struct"
        self.strict, self.arrow = strict, arrow
        read = read_type(strict)
        self.schema = pa.schema(list(read))

    def decode(self, bodies: pa.Array) -> pa.Array | None:
        """The values of `bodies` (a binary array), one per body, or None where the batch must be
        decoded record by record. Every check is an Arrow kernel: no Python per record."""
        if not len(bodies) or bodies.null_count:
            return None
        try:
            first, last = pc.binary_slice(bodies, 0, 1), pc.binary_slice(bodies, -1, _MAX_BLOCK)
            if not (pc.all(pc.equal(first, _OPEN)).as_py() and pc.all(pc.equal(last, _CLOSE)).as_py()):
                return None
            # Arrow's reader passes invalid UTF-8, NaN and Inf in what it skips (a field the schema lacks).
            text = bodies.cast(pa.string())
            if _non_finite(text):
                raise Declined("NaN or Inf where a value starts")
            one = pa.ListArray.from_arrays(pa.array([0, len(bodies)], pa.int32()), bodies)
            joined = pc.binary_join(one, b"\n")[0].as_buffer()
            if joined.size > _MAX_BLOCK:
                return None
            table = pa_json.read_json(
                pa.BufferReader(joined),
                # One block and one thread: a Spark task owns one core, and the batch is in memory.
                read_options=pa_json.ReadOptions(use_threads=False, block_size=joined.size + 1),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=self.schema, unexpected_field_behavior="ignore", newlines_in_values=True
                ),
            )
            if table.num_rows != len(bodies):
                return None
            table.validate(full=True)
            columns = [column.combine_chunks() for column in table.columns]
            root = pa.StructArray.from_arrays(columns, fields=list(self.schema))
            return _finish(root, self.strict, None).cast(self.arrow)
        except Declined as why:
            # (debug: a batch decoded record by record costs about ten times more; this says why)
            log.debug("%d JSON bodies decoded record by record: %s", len(bodies), why)
            return None
        except pa.ArrowException as error:  # (its text may quote a record: the kind only)
            log.debug(
                "%d JSON bodies decoded record by record: Arrow's %s", len(bodies), type(error).__name__
            )
            return None


def _non_finite(text: pa.Array) -> bool:
    """Whether a body may hold a NaN or Inf token: the pattern runs only when the plain bytes occur."""
    if not any(pc.any(pc.match_substring(text, token)).as_py() for token in ("NaN", "Inf")):
        return False
    return bool(pc.any(pc.match_substring_regex(text, _NON_FINITE_TOKEN)).as_py())


def _finish(array: pa.Array, kind: DataType, present: pa.Array | None) -> pa.Array:
    """`array` as read, checked against the per-record rules, timestamps and dates converted.
    `present`: where the parent holds a value (None: everywhere)."""
    if isinstance(kind, StructType):
        here = array.is_valid() if present is None else pc.and_(present, array.is_valid())
        children = []
        for index, field in enumerate(kind.fields):
            child = array.field(index)
            if not field.nullable and pc.any(pc.and_(here, child.is_null())).as_py():
                raise Declined(f"{field.name} is required")
            children.append(_finish(child, field.dataType, here))
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, names=[f.name for f in kind.fields], mask=mask)
    if isinstance(kind, ArrayType):
        # Arrow's reader gives a null list no elements: every element is under a list that is there.
        values = _finish(array.values, kind.elementType, None)
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(array.offsets, values, mask=mask)
    if isinstance(kind, TimestampType):
        return _temporal(array, _UTC, ((_ZONED, _UTC), (_NAIVE, pa.timestamp("us"))), _timestamp)
    if isinstance(kind, DateType):
        return _temporal(array, pa.date32(), ((_DATE, pa.date32()),), datetime.date.fromisoformat)
    return array


def _temporal(
    strings: pa.Array,
    target: pa.DataType,
    forms: tuple[tuple[str, pa.DataType], ...],
    one: object,
) -> pa.Array:
    """Strings as `target`: by Arrow's cast when all have one of `forms` (its pattern, the type Arrow
    casts it to), else one by one with `one` (json_types' reading)."""
    if strings.null_count == len(strings):
        return pa.nulls(len(strings), target)
    for pattern, cast_to in forms:
        if pc.all(pc.match_substring_regex(strings, pattern)).as_py():
            try:
                return pc.cast(strings, cast_to).cast(target)
            except pa.ArrowException:
                raise Declined("a date or time Arrow does not read") from None
    assert callable(one)
    try:
        return pa.array([None if s is None else one(s) for s in strings.to_pylist()], type=target)
    except (ValueError, OverflowError):  # what fromisoformat, or the instant in UTC, cannot be
        raise Declined("a date or time fromisoformat does not read") from None
