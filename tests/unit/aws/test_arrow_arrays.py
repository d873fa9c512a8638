"""The Arrow builders against pa.array on the same values, and a cold worker's read that never
imports pandas (pyarrow's first pa.array or pa.scalar does: 0.4-0.5 s of every new Python worker's
first batch, which after a quiet spell is the batch users wait for)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_kinesis.aws import arrow_arrays as aa


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text()), max_size=40))
def test_string_array_is_pa_array(values: list[str | None]) -> None:
    built = aa.string_array(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.string()))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=20))
def test_binary_array_is_pa_array(values: list[bytes]) -> None:
    built = aa.binary_array(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.binary()))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30), st.integers(0, 50))
def test_repeat_string_is_pa_repeat(value: str, n: int) -> None:
    built = aa.repeat_string(value, n)
    built.validate(full=True)
    assert built.equals(pa.repeat(pa.scalar(value, pa.string()), n))


def test_numbers_and_empties() -> None:
    assert aa.float64_array([1.5, -0.0, 1e300]).equals(pa.array([1.5, -0.0, 1e300], pa.float64()))
    assert aa.int64_array([0, -1, 2**62]).equals(pa.array([0, -1, 2**62], pa.int64()))
    assert aa.int64_zeros(3).equals(pa.array([0, 0, 0], pa.int64()))
    assert aa.int32_array(np.arange(0, 6, 2)).equals(pa.array([0, 2, 4], pa.int32()))
    for kind in (pa.binary(), pa.string(), pa.float64()):
        assert aa.empty(kind).equals(pa.array([], kind))


COLD_READ = textwrap.dedent(
    """
    import base64, sys
    import orjson
    from pyspark_kinesis.aws.get_records import Records, decode
    from pyspark_kinesis.source.executor import task  # (what a read task imports)
    from pyspark_kinesis.source.executor.modes import fanout, polling
    from pyspark_kinesis.source.executor.columns import Columns

    body = orjson.dumps({"Records": [{
        "SequenceNumber": str(49_000 + i), "ApproximateArrivalTimestamp": 1.7e9 + i,
        "Data": base64.b64encode(b"x" * (i * 37)).decode(), "PartitionKey": f"k{i}"}
        for i in range(5)], "NextShardIterator": "it", "MillisBehindLatest": 0})
    page = decode(body)["Records"]
    cols = Columns("s", "arn:aws:kinesis:us-east-1:1:stream/s", "shardId-000000000000")
    cols.add(page, 3)
    cols.append(b"agg", "k", "49001", 2, 1.7e9)
    cols.add(Records.from_lists(["49002"], [None], [b"y"], [1.7e9]), 1)
    cols.append(b"agg", "k", "49003", 0, 1.7e9)
    rows = sum(b.num_rows for b in cols.to_batches())
    print(rows, "pandas" in sys.modules)
    """
)


@pytest.mark.timeout(120)
def test_a_cold_workers_read_does_not_import_pandas() -> None:
    out = subprocess.run(
        [sys.executable, "-c", COLD_READ], capture_output=True, text=True, check=True, timeout=100
    ).stdout.split()
    assert out == ["6", "False"], out


def test_float64_values_of_a_slice() -> None:
    values = pa.array([0.5, 1.5, 2.5, 3.5], pa.float64()).slice(1, 2)
    assert aa.float64_values(values).tolist() == [1.5, 2.5]
