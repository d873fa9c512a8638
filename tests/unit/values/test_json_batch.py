"""JSON bodies decoded a batch at once by Arrow's reader (`json_batch`) give exactly what the
per-record decode (`json_types`) gives, or the batch is declined: never another value, never a record
accepted that the per-record rules refuse. Property tests compare the two on conforming records, on
values of any JSON shape, on bodies cut or spliced at random bytes, and on the inputs where Arrow's
reader is known to be laxer than orjson (NaN, invalid UTF-8, a byte-order mark, a root null, two
values in one body)."""

from __future__ import annotations

import datetime
import json
import logging
import re
import uuid
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_kinesis.values import glue_wire, json_batch, json_types
from pyspark_kinesis.values.glue_values import COLUMN, PASS, GlueValues

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "price": {"type": ["number", "null"]},
        "paid": {"type": "boolean"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
            "required": ["city"],
        },
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku"],
            },
        },
    },
    "required": ["id", "name"],
}


def codec() -> json_types.JsonValues:
    """Built at each use, not at import: a mutation run imports this module once, before the mutants
    (an object built then would hide every mutant of its construction)."""
    return json_types.JsonValues(SCHEMA)


def batch_decoder() -> json_batch.JsonBatch:
    values = codec()
    return json_batch.JsonBatch(values.strict, values.arrow)


def one_by_one(bodies: list[bytes]) -> pa.Array | None:
    """The per-record result, or None when some record does not decode."""
    try:
        values = codec()
        return values.column([values.decode(body, None) for body in bodies])
    except json_types.DoesNotFit:
        return None


def check(bodies: list[bytes]) -> pa.Array | None:
    """The batch's result, after checking it is the per-record one wherever it is given."""
    batch = batch_decoder().decode(pa.array(bodies, type=pa.binary()))
    if batch is not None:
        expected = one_by_one(bodies)
        assert expected is not None, f"the batch accepted what the per-record decode refuses: {bodies!r}"
        assert batch.type == expected.type
        assert batch.to_pylist() == expected.to_pylist(), bodies
    return batch


def decode(bodies: list[bytes]) -> pa.Array | None:
    return batch_decoder().decode(pa.array(bodies, type=pa.binary()))


stamps = st.datetimes(
    min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30), timezones=st.none()
)
ZONES = [
    datetime.UTC,
    datetime.timezone(datetime.timedelta(hours=2)),
    datetime.timezone(-datetime.timedelta(hours=5, minutes=30)),
]


@st.composite
def stamp_text(draw: st.DrawFn) -> str:
    moment = draw(stamps)
    zone = draw(st.sampled_from([None, *ZONES]))
    text = (moment if zone is None else moment.replace(tzinfo=zone)).isoformat(
        sep=draw(st.sampled_from(["T", " "])),
        timespec=draw(st.sampled_from(["minutes", "seconds", "milliseconds", "microseconds"])),
    )
    return text.replace("+00:00", "Z") if draw(st.booleans()) else text


# (a string with NaN or Inf where a value could start declines its batch: see json_batch's docstring)
names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8).filter(
    lambda text: re.search(json_batch._NON_FINITE_TOKEN, text) is None
)
conforming = st.fixed_dictionaries(
    {"id": st.integers(-(2**63), 2**63 - 1), "name": names},
    optional={
        "price": st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**60), 2**60),
        "paid": st.booleans(),
        "at": stamp_text(),
        "day": st.dates(min_value=datetime.date(1, 1, 1)).map(datetime.date.isoformat),
        "tags": st.lists(names, max_size=3),
        "address": st.none()
        | st.fixed_dictionaries({"city": names}, optional={"zip": st.integers(0, 99999), "extra": names}),
        "lines": st.lists(
            st.fixed_dictionaries({"sku": names}, optional={"qty": st.none() | st.integers(0, 9)}), max_size=3
        ),
        "added_by_a_newer_writer": st.lists(st.integers(), max_size=2),
    },
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
KEYS = list(SCHEMA["properties"])  # type: ignore[call-overload]


@st.composite
def anything_in_a_field(draw: st.DrawFn) -> dict[str, Any]:
    record = draw(conforming)
    record[draw(st.sampled_from(KEYS))] = draw(json_values)
    return record


def dumps(value: Any) -> bytes:
    """The standard library's encoder: it writes integers beyond 64 bits and Infinity too."""
    return json.dumps(value, ensure_ascii=False).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(conforming, min_size=1, max_size=8))
def test_conforming_records_decode_as_a_batch_to_the_per_record_values(records: list[dict[str, Any]]) -> None:
    bodies = [dumps(r) for r in records]
    assert check(bodies) is not None, "a batch of conforming records was declined"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(anything_in_a_field() | conforming, min_size=1, max_size=6))
def test_values_of_any_shape_give_the_per_record_result_or_a_declined_batch(
    records: list[dict[str, Any]],
) -> None:
    check([dumps(r) for r in records])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(conforming, min_size=1, max_size=4), st.data())
def test_bodies_cut_or_spliced_give_the_per_record_result_or_a_declined_batch(
    records: list[dict[str, Any]], data: st.DataObject
) -> None:
    bodies = [dumps(r) for r in records]
    index = data.draw(st.integers(0, len(bodies) - 1))
    body = bodies[index]
    at = data.draw(st.integers(0, len(body)))
    insert = data.draw(
        st.sampled_from([b"", b"}", b"{", b"}\n{", b",", b" null", b"NaN", b"\xff", b'"', b"\n", b"[", b"]"])
    )
    cut = data.draw(st.integers(0, 3))
    bodies[index] = body[:at] + insert + body[at + cut :]
    check(bodies)


@pytest.mark.parametrize(
    "bodies",
    [
        [b"null"],  # a root null first crashes Arrow's reader: never given to it
        [b'{"id": 1, "name": "a"}', b"null"],
        [b'{"id": 1, "name": "a"} {"id": 2, "name": "b"}', b" "],  # two values in one body, none in the other
        [b'{"id": 1, "name": "a"}{"id": 2, "name": "b"}', b'{"id": 3, "name": "c"}'],
        [b'{"id": 1, "name": "a", "price": NaN}'],
        [b'{"id": 1, "name": "a", "price": -Infinity}'],
        [b'{"id": 1, "name": "a", "extra": NaN}'],  # in a field the schema lacks: Arrow skips it, orjson not
        [b'{"id": 1, "name": "a", "extra": [Inf]}'],
        [b'{"id": 1, "name": "\xff"}'],  # invalid UTF-8
        [b'\xef\xbb\xbf{"id": 1, "name": "a"}'],  # a byte-order mark
        [b'{"id": 1, "name": "a", "id": 2}'],  # a key twice: orjson keeps the last
        [b'{"id": 1}'],  # a required field missing
        [b'{"id": 1, "name": "a", "address": {"zip": 1}}'],  # required under a parent that is there
        [b'{"id": 1, "name": "a", "lines": [{"qty": 1}]}'],  # required in an array's element
        [b'{"id": 1.0, "name": "a"}'],
        [b'{"id": 18446744073709551615, "name": "a"}'],
        [b'{"id": 1, "name": "a", "at": "2024-02-30T00:00:00Z"}'],
        [b'{"id": 1, "name": "a", "at": "2024-01-01T00:00:00.1234567Z"}'],  # read one by one
        [b'{"id": 1, "name": "a", "at": "20240101T000000"}'],
        [b'{"id": 1, "name": "a", "day": "2023-02-29"}'],
        [b'{"id": 1, "name": "a", "day": "0000-01-01", "at": "0000-01-01T00:00:00Z"}'],  # Arrow has a year 0
        [b'{\n  "id": 1,\n  "name": "a"\n}', b'{"id": 2, "name": "b"}'],  # a body over several lines
        [b'{"id": 1, "name": "a", "address": null, "lines": null, "tags": [null]}'],
    ],
)
def test_where_arrow_is_laxer_or_stricter_the_batch_is_the_per_record_result_or_declined(
    bodies: list[bytes],
) -> None:
    check(bodies)


def test_what_is_declined_and_what_is_not() -> None:
    assert decode([b"null"]) is None
    assert decode([b'{"id": 1, "name": "a", "price": NaN}']) is None
    assert decode([b'{"id": 1, "name": "a", "extra": {"x": -Inf}}']) is None
    assert decode([b'{"id": 1, "name": "a, Info"}']) is None  # (a pattern: only slower, the same values)
    read = decode([b'{"id": 1, "name": "NaNa", "userInfo": "Inf"}'])  # (not where a value starts)
    assert read is not None and read.to_pylist()[0]["name"] == "NaNa"
    assert decode([b'{"id": 1, "name": "\xff"}']) is None
    assert decode([b'{"id": 1, "name": "a"}{"id": 2, "name": "b"}', b'{"id": 3, "name": "c"}']) is None
    assert decode([b'{"id": 1, "name": "a", "address": {"zip": 1}}']) is None
    assert decode([b'{"id": 1, "name": "a", "lines": [{"qty": 1}]}']) is None
    # A parent that is null does not need its required fields; a body over several lines is one row.
    read = decode([b'{"id": 1, "name": "a", "address": null}', b'{\n "id": 2,\n "name": "b"\n}'])
    assert read is not None and read.to_pylist()[1]["id"] == 2
    # Timestamps in a form Arrow's cast does not take are read one by one, still in the batch.
    read = decode([b'{"id": 1, "name": "a", "at": "2024-01-01T00:00:00.1234567+01:00"}'])
    assert read is not None
    assert read.to_pylist()[0]["at"] == datetime.datetime(2023, 12, 31, 23, 0, 0, 123456, tzinfo=datetime.UTC)


def _iso_text(moment: datetime.datetime, parts: int, sep: str, digits: int, zone: str | None) -> str:
    """`moment` written as a date, or with hours and minutes, seconds, a fraction of `digits` digits
    (up to 7, one more than Python keeps), and a zone."""
    m = moment
    text = f"{m.year:04d}-{m.month:02d}-{m.day:02d}"  # (strftime writes year 5 as "5" here)
    if parts == 0:
        return text
    text += f"{sep}{m.hour:02d}:{m.minute:02d}"
    if parts >= 2:
        text += f":{m.second:02d}"
    if parts >= 3:
        text += "." + f"{moment.microsecond:06d}{moment.microsecond % 10}"[:digits]
    return text + (zone or "")


# Well-formed dates and times in every shape ISO-8601 allows here (most examples), and any text of
# that shape, impossible dates included (the rest).
WELL_FORMED = st.builds(
    _iso_text,
    st.datetimes(min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30)),
    st.integers(0, 3),
    st.sampled_from("T "),
    st.integers(1, 7),
    st.one_of(st.none(), st.just("Z"), st.from_regex(r"\A[+-](0[0-9]|1[0-3]):[0-5][0-9]\Z")),
)
ISO_TEXTS = st.one_of(
    WELL_FORMED,
    WELL_FORMED,
    WELL_FORMED,
    st.from_regex(
        r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,7})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?\Z"
    ),
)
COMPARED: list[str] = []  # the examples whose batch reading was compared (not declined)


@settings(max_examples=300, deadline=None)
@given(ISO_TEXTS)
def test_arrow_reads_a_date_or_time_as_fromisoformat_does_or_not_at_all(text: str) -> None:
    def per_record(kind: Any) -> Any:
        try:
            return json_types.fit(text, kind, "v")
        except json_types.DoesNotFit:
            return None

    for kind, spark in (
        (pa.timestamp("us", tz="UTC"), json_types.TimestampType()),
        (pa.date32(), json_types.DateType()),
    ):
        try:
            read = json_batch._finish(pa.array([text]), spark, None)
        except json_batch.Declined:
            continue
        assert read.type == kind
        assert read.to_pylist() == [per_record(spark)]
        COMPARED.append(text)


def test_the_date_property_compares_most_of_its_examples() -> None:
    """(Run after the property: pytest keeps file order.) A property whose examples the batch reader
    mostly declines would compare nothing."""
    assert len(COMPARED) >= 100, f"{len(COMPARED)} of 600 readings compared"  # (was 12, of 300 examples)


def framed(body: bytes) -> bytes:
    return bytes([3, 0]) + uuid.UUID(int=5).bytes + body


def test_glue_values_decode_json_a_batch_at_once_beside_null_and_headerless_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    definition = orjson.dumps(SCHEMA).decode()
    values = GlueValues(
        definition, lambda _v: definition, on_error=COLUMN, without_header=PASS, data_format="JSON"
    )
    calls: list[int] = []
    decode = values.batch.decode  # type: ignore[union-attr]
    monkeypatch.setattr(values.batch, "decode", lambda bodies: calls.append(len(bodies)) or decode(bodies))
    data = pa.array(
        [framed(b'{"id": 1, "name": "a"}'), None, b"plain", framed(b'{"id": 2, "name": "b", "tags": ["x"]}')],
        type=pa.binary(),
    )
    decoded = values.decode(data, str)
    assert calls == [2]  # one call for the batch's two framed bodies
    rows = decoded.values.to_pylist()
    assert [r and r["id"] for r in rows] == [1, None, None, 2]
    assert rows[3]["tags"] == ["x"]
    assert decoded.errors is not None and decoded.errors.to_pylist() == [None] * 4
    # A record that does not decode sends the batch record by record, which names it.
    bad = pa.array([framed(b'{"id": 1, "name": "a"}'), framed(b'{"id": "x", "name": "b"}')], type=pa.binary())
    errors = values.decode(bad, str).errors
    assert errors is not None and errors.to_pylist()[0] is None and "value.id" in errors.to_pylist()[1]


def test_framed_records_are_unframed_by_arrow_kernels_when_all_are_plain() -> None:
    plain = [framed(b'{"id": 1, "name": "a"}'), framed(b"{}")]
    bodies = glue_wire.plain_bodies(pa.array(plain, type=pa.binary()))
    assert bodies is not None and bodies.to_pylist() == [b'{"id": 1, "name": "a"}', b"{}"]
    compressed = glue_wire.frame(str(uuid.UUID(int=5)), b"{}", compress=True)
    for other in (None, compressed, b"\x03", bytes([2, 0]) + bytes(16) + b"{}"):
        assert glue_wire.plain_bodies(pa.array([*plain, other], type=pa.binary())) is None, other


def test_a_batch_with_a_compressed_record_decodes_the_same_as_one_without() -> None:
    definition = orjson.dumps(SCHEMA).decode()
    values = GlueValues(definition, lambda _v: definition, data_format="JSON")
    bodies = [
        b'{"id": 1, "name": "a", "at": "2024-01-01T00:00:00Z"}',
        b'{"id": 2, "name": "b", "day": "2024-02-29"}',
    ]
    plain = pa.array([framed(b) for b in bodies], type=pa.binary())
    mixed = pa.array(
        [framed(bodies[0]), glue_wire.frame(str(uuid.UUID(int=5)), bodies[1], compress=True)],
        type=pa.binary(),
    )
    per_record = codec()
    expected = per_record.column([per_record.decode(b, None) for b in bodies]).to_pylist()
    assert values.decode(plain, str).values.to_pylist() == expected
    assert values.decode(mixed, str).values.to_pylist() == expected


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"id": 1, "name": "a", "price": NaN}', "NaN or Inf where a value starts"),
        (b'{"id": 1, "name": "a", "extra": -Infinity}', "NaN or Inf where a value starts"),
        (b'{"name": "a"}', "id is required"),
        (b'{"id": 1, "name": "a", "address": {"zip": 1}}', "city is required"),
        (b'{"id": 1, "name": "a", "day": "2024-02-30"}', "a date or time Arrow does not read"),
        (b'{"id": 1, "name": "a", "day": "yesterday"}', "a date or time fromisoformat does not read"),
        (b'{"id": "one", "name": "a"}', "Arrow's ArrowInvalid"),
    ],
)
def test_a_declined_batch_says_why_in_the_debug_log(body: bytes, why: str, caplog) -> None:
    """(A batch decoded record by record costs about ten times more: the log tells an operator why.)"""
    with caplog.at_level(logging.DEBUG, logger=json_batch.__name__):
        assert decode([b'{"id": 1, "name": "x"}', body]) is None
    assert [r.getMessage() for r in caplog.records] == [f"2 JSON bodies decoded record by record: {why}"]


def test_a_batch_with_a_missing_body_is_declined_without_a_word() -> None:
    bodies = pa.array([b'{"id": 1, "name": "a"}', None], type=pa.binary())
    assert batch_decoder().decode(bodies) is None
    assert batch_decoder().decode(pa.array([], type=pa.binary())) is None
