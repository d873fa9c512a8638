"""Arrow arrays built from Python values without `pa.array` or `pa.scalar`.

Two reasons. Cost: for payload-sized values, joining them into one buffer with computed offsets is
half the cost of pa.array's generic conversion. Start-up: pyarrow's first `pa.array`, `pa.scalar` or
`pa.repeat` call in a process imports pandas (pyarrow asks whether the value is a pandas object),
0.4-0.5 s of CPU, and Spark ends an executor's idle Python workers after a minute: the first batch
after a quiet spell runs in new workers, whose reads paid it before any record (docs/performance.md,
`bench-latency-modes-quiet`). Every array a read hands Spark is built here, from buffers.
"""

from __future__ import annotations

import itertools
import sys
from array import array
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

# Below this mean payload size pa.array's own conversion beats joining (measured: 4x faster at 100 B,
# even at 1 KB, 2x slower at 10 KB, where the join's single copy wins).
_JOIN_FROM_MEAN_BYTES = 1024
_MAX_OFFSET = 2**31 - 1  # int32 offsets: one array holds at most 2 GiB of values


def binary_array(values: list[bytes]) -> pa.Array:
    """An Arrow binary array. Payload-sized values are joined into one buffer with computed offsets
    (half the cost of pa.array); small ones, where the offsets' per-value Python work dominates, go
    through pa.array once pandas is loaded anyway. Past int32 offsets (2 GiB), pa.array's own
    chunking takes over."""
    total = sum(map(len, values))
    if total > _MAX_OFFSET or (total < _JOIN_FROM_MEAN_BYTES * len(values) and _pandas_loaded()):
        return pa.array(values, pa.binary())
    offsets = array("i", itertools.accumulate(map(len, values), initial=0))
    return pa.Array.from_buffers(
        pa.binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    )


def string_array(values: Sequence[str | None]) -> pa.Array:
    """An Arrow string array (None: null), from one UTF-8 buffer and its offsets."""
    encoded = [b"" if v is None else v.encode() for v in values]
    total = sum(map(len, encoded))
    if total > _MAX_OFFSET:
        return pa.array(values, pa.string())
    offsets = array("i", itertools.accumulate(map(len, encoded), initial=0))
    nulls = [v is None for v in values]
    validity = None
    null_count = sum(nulls)
    if null_count:
        validity = pa.py_buffer(np.packbits(~np.array(nulls, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(),
        len(values),
        [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
        null_count=null_count,
    )


def fixed_width(kind: pa.DataType, n: int, values: object) -> pa.Array:
    """An array of `n` fixed-width values of `kind` over a buffer of them (array.array, numpy, bytes),
    no nulls."""
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(values)])


def float64_array(values: Sequence[float]) -> pa.Array:
    return fixed_width(pa.float64(), len(values), array("d", values))


def int64_array(values: Sequence[int]) -> pa.Array:
    return fixed_width(pa.int64(), len(values), array("q", values))


def int64_zeros(n: int) -> pa.Array:
    return fixed_width(pa.int64(), n, np.zeros(n, np.int64))


def repeat_string(value: str, n: int) -> pa.Array:
    """`value` n times, as a string array (like pa.repeat of a scalar: the value once per row)."""
    encoded = value.encode()
    if len(encoded) * n > _MAX_OFFSET:
        return pa.repeat(pa.scalar(value, pa.string()), n)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(encoded))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * n)])


def empty(kind: pa.DataType) -> pa.Array:
    """An empty array of `kind`."""
    return pa.nulls(0, kind)


def int32_array(values: np.ndarray) -> pa.Array:
    """An int32 array over a numpy array's buffer (no copy)."""
    return fixed_width(pa.int32(), len(values), np.ascontiguousarray(values, dtype=np.int32))


def float64_values(values: pa.Array) -> np.ndarray:
    """A float64 array without nulls as a numpy view of its buffer (Array.to_numpy imports pandas)."""
    assert values.null_count == 0, "a view has no nulls"
    return np.frombuffer(values.buffers()[1], np.float64, len(values), values.offset * 8)


def _pandas_loaded() -> bool:
    return "pandas" in sys.modules
