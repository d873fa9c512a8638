"""Every Avro logical type, in generated schemas (nested in records, arrays, maps and nullable unions),
decodes into the column Spark gets exactly as fastavro reads it: values written by fastavro (the
independent encoder), read by the connector into the Arrow column of the schema's Spark type, and
compared with fastavro's own reading turned into Spark's values by the rules written out here."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_kinesis.values.avro_types import AvroValues, UnsupportedSchema, parse, spark_type
from pyspark_kinesis.values.glue_encode import AvroEncoder
from pyspark_kinesis.values.glue_wire import unframe

UTC = datetime.UTC
NAMES = iter(f"T{n}" for n in range(10**9))


def _fixed(size: int, logical: str, **extra: Any) -> dict:
    return {"type": "fixed", "name": next(NAMES), "size": size, "logicalType": logical, **extra}


# (schema maker, value strategy, how fastavro's reading becomes the Spark value)
def _leaves() -> list[tuple[Any, Any, Any]]:
    micros = st.integers(min_value=-(2**52), max_value=2**52)
    day_micros = st.integers(min_value=0, max_value=86_400 * 10**6 - 1)
    return [
        (lambda: "long", st.integers(-(2**63), 2**63 - 1), None),
        (lambda: "string", st.text(max_size=8), None),
        (lambda: {"type": "string", "logicalType": "uuid"}, st.uuids(), str),
        (lambda: _fixed(16, "uuid"), st.uuids().map(lambda u: u.bytes), lambda b: str(uuid.UUID(bytes=b))),
        (lambda: {"type": "int", "logicalType": "date"}, st.dates(), None),
        (
            lambda: {"type": "int", "logicalType": "time-millis"},
            day_micros.map(lambda us: _time(us // 1000 * 1000)),
            _as_interval,
        ),
        (lambda: {"type": "long", "logicalType": "time-micros"}, day_micros.map(_time), _as_interval),
        (
            lambda: {"type": "long", "logicalType": "timestamp-millis"},
            micros.map(lambda us: _at(us // 1000 * 1000)),
            None,
        ),
        (lambda: {"type": "long", "logicalType": "timestamp-micros"}, micros.map(_at), None),
        (
            lambda: {"type": "long", "logicalType": "local-timestamp-micros"},
            micros.map(lambda us: _at(us).replace(tzinfo=None)),
            None,
        ),
        (
            lambda: {"type": "long", "logicalType": "local-timestamp-millis"},
            micros.map(lambda us: _at(us // 1000 * 1000).replace(tzinfo=None)),
            None,
        ),
        (lambda: {"type": "long", "logicalType": "timestamp-nanos"}, st.integers(0, 2**62), None),
        (lambda: {"type": "long", "logicalType": "local-timestamp-nanos"}, st.integers(0, 2**62), None),
        (
            lambda: {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4},
            st.decimals(
                min_value=-(10**15), max_value=10**15, places=4, allow_nan=False, allow_infinity=False
            ),
            None,
        ),
        (
            lambda: _fixed(9, "decimal", precision=18, scale=2),
            st.decimals(
                min_value=-(10**15), max_value=10**15, places=2, allow_nan=False, allow_infinity=False
            ),
            None,
        ),
        (
            lambda: _fixed(12, "duration"),
            st.tuples(*[st.integers(0, 2**32 - 1)] * 3).map(lambda t: struct.pack("<III", *t)),
            lambda b: dict(zip(("months", "days", "milliseconds"), struct.unpack("<III", b), strict=True)),
        ),
    ]


def _time(us: int) -> datetime.time:
    return (datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=us)).time()


def _as_interval(t: datetime.time) -> datetime.timedelta:
    return datetime.timedelta(hours=t.hour, minutes=t.minute, seconds=t.second, microseconds=t.microsecond)


def _at(us: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(microseconds=us)


@st.composite
def typed(draw, depth: int = 0) -> tuple[Any, Any, Any]:
    """(schema, value, expected Spark-side value) of one generated type."""
    choice = draw(st.integers(0, 9 if depth < 2 else 5))
    if choice <= 5:
        make, values, turn = draw(st.sampled_from(_leaves()))
        value = draw(values)
        return make(), value, value if turn is None else turn(value)
    if choice == 6:  # nullable
        schema, value, expected = draw(typed(depth + 1))
        if draw(st.booleans()):
            return ["null", schema], None, None
        return ["null", schema], value, expected
    if choice == 7:  # an array of one leaf type
        make, values, turn = draw(st.sampled_from(_leaves()))
        items = draw(st.lists(values, max_size=3))
        return {"type": "array", "items": make()}, items, [v if turn is None else turn(v) for v in items]
    if choice == 8:  # a map of one leaf type (Arrow hands a map back as (key, value) pairs)
        make, values, turn = draw(st.sampled_from(_leaves()))
        entries = draw(st.dictionaries(st.text(max_size=4), values, max_size=3))
        expected = [(k, v if turn is None else turn(v)) for k, v in entries.items()]
        return {"type": "map", "values": make()}, entries, expected
    fields = draw(st.lists(typed(depth + 1), min_size=1, max_size=4))
    schema = {
        "type": "record",
        "name": next(NAMES),
        "fields": [{"name": f"f{i}", "type": f[0]} for i, f in enumerate(fields)],
    }
    return (
        schema,
        {f"f{i}": f[1] for i, f in enumerate(fields)},
        {f"f{i}": f[2] for i, f in enumerate(fields)},
    )


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(st.lists(typed(), min_size=1, max_size=5))
def test_generated_schemas_decode_exactly_as_fastavro_reads_them(fields):
    definition = {
        "type": "record",
        "name": next(NAMES),
        "fields": [{"name": f"c{i}", "type": f[0]} for i, f in enumerate(fields)],
    }
    record = {f"c{i}": f[1] for i, f in enumerate(fields)}
    expected = {f"c{i}": f[2] for i, f in enumerate(fields)}
    schema = parse(definition)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, record)
    values = AvroValues(schema)
    column = values.column([values.decode(body.getvalue(), schema), None])
    assert column.type == values.arrow
    assert column.to_pylist() == [expected, None]
    # The sink's way back: the Spark value (as Arrow hands it over) written with the same schema, read
    # again, is the same value.
    version = str(uuid.uuid4())
    framed = AvroEncoder(orjson.dumps(definition).decode(), version).encode(column.to_pylist()[0])
    again = values.column([values.decode(unframe(framed).body, schema)])
    assert again.to_pylist() == [expected]


def test_a_decimal_wider_than_spark_and_big_decimal_are_refused_naming_the_field():
    wide = {"type": "record", "name": "R", "fields": [
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}},
    ]}  # fmt: skip
    with pytest.raises(UnsupportedSchema, match=r"value\.amount: a decimal of 40 digits"):
        spark_type(parse(wide))
    big = {"type": "record", "name": "R", "fields": [
        {"name": "exact", "type": {"type": "bytes", "logicalType": "big-decimal"}},
    ]}  # fmt: skip
    with pytest.raises(UnsupportedSchema, match=r"value\.exact: big-decimal"):
        spark_type(parse(big))


def test_the_mapping_table_is_what_docs_options_lists():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "options.md").read_text()
    for logical in (
        "uuid", "date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros", "timestamp-nanos",
        "local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos", "decimal", "duration",
        "big-decimal",
    ):  # fmt: skip
        assert f"`{logical}`" in page, f"docs/options.md does not list the Avro logical type {logical}"
