"""DynamoDB attribute values as plain values: exact numbers, binary, sets, nesting, and what is refused."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pybase64
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_kinesis.values.dynamodb_images import MAX_DEPTH, item_json, item_plain, number_text, plain

# Numbers as DynamoDB holds them: up to 38 significant digits, exponents from -130 to +125.
numbers = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
    lambda d: len(d.as_tuple().digits) <= 38 and -130 <= d.adjusted() <= 125
)
scalars = st.one_of(
    st.text(max_size=8).map(lambda s: {"S": s}),
    numbers.map(lambda d: {"N": str(d)}),
    st.binary(max_size=8).map(lambda b: {"B": b}),
    st.booleans().map(lambda b: {"BOOL": b}),
    st.just({"NULL": True}),
    st.lists(st.text(max_size=4), min_size=1, max_size=3, unique=True).map(lambda v: {"SS": v}),
    st.lists(numbers.map(str), min_size=1, max_size=3, unique=True).map(lambda v: {"NS": v}),
    st.lists(st.binary(max_size=4), min_size=1, max_size=3, unique=True).map(lambda v: {"BS": v}),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda v: {"L": v}),
        st.dictionaries(st.text(max_size=4), inner, max_size=3).map(lambda v: {"M": v}),
    ),
    max_leaves=12,
)
items = st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=4)


def as_json_reads(value: Any) -> Any:
    """What JSON text of `plain(value)` reads back as: bytes as base64 text, numbers as Decimal."""
    if isinstance(value, bytes):
        return pybase64.b64encode(value).decode()
    if isinstance(value, list):
        return [as_json_reads(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json_reads(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(items)
def test_the_json_text_reads_back_as_the_plain_values_with_every_digit(item):
    text = item_json(item)
    assert text is not None
    read = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    assert read == as_json_reads(item_plain(item))


@settings(max_examples=300, deadline=None)
@given(numbers)
def test_a_number_keeps_its_value_exactly(number):
    assert Decimal(number_text(str(number))) == number
    assert plain({"N": str(number)}) == number


def test_numbers_past_a_floats_precision_are_not_rounded():
    digits = "12345678901234567890123456789012345678"  # 38 digits: DynamoDB's most
    assert item_json({"n": {"N": digits}}) == '{"n":' + digits + "}"
    assert item_json({"n": {"N": "1E+2"}}) == '{"n":1E+2}'  # JSON as written: kept
    for written, read in ((".5", "0.5"), ("+7", "7"), ("007", "7"), ("1.", "1"), ("1.e400", "1E+400")):
        assert item_json({"n": {"N": written}}) == '{"n":' + read + "}"  # not JSON: its value, in JSON
    assert item_json({"n": {"N": "1.5E+100"}}) == '{"n":1.5E+100}'
    assert item_json({"n": {"N": "-0.000001"}}) == '{"n":-0.000001}'


def test_each_type_in_json():
    item = {
        "s": {"S": 'a"b'},
        "b": {"B": b"\x00\xff"},
        "t": {"BOOL": True},
        "z": {"NULL": True},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"a"]},
        "l": {"L": [{"N": "1"}, {"S": "x"}]},
        "m": {"M": {"k": {"BOOL": False}}},
    }
    assert item_json(item) == (
        '{"s":"a\\"b","b":"AP8=","t":true,"z":null,"ss":["x","y"],"ns":[1,2.5],"bs":["YQ=="],'
        '"l":[1,"x"],"m":{"k":false}}'
    )
    assert item_json(None) is None
    assert item_json({}) == "{}"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"X": "1"}, "unknown DynamoDB attribute type 'X'"),
        ({"N": "one"}, "not a DynamoDB number: 'one'"),
        ({"N": "NaN"}, "not a DynamoDB number: 'NaN'"),
        ({"N": "Infinity"}, "not a DynamoDB number"),
        ({"S": "a", "N": "1"}, "not a DynamoDB attribute value: dict"),
        ("a", "not a DynamoDB attribute value: str"),
    ],
)
def test_what_is_not_an_attribute_value_is_refused_by_name(value, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        item_json({"a": value})
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        plain(value)


def test_nesting_past_what_dynamodb_allows_is_refused_not_a_recursion_error():
    deep: dict[str, Any] = {"N": "1"}
    for _ in range(MAX_DEPTH + 1):
        deep = {"L": [deep]}
    with pytest.raises(ValueError, match="nested deeper"):
        item_json({"a": deep})
    with pytest.raises(ValueError, match="nested deeper"):
        plain(deep)
    shallow: dict[str, Any] = {"N": "1"}
    for _ in range(32):  # DynamoDB's own limit: read
        shallow = {"M": {"x": shallow}}
    assert item_json({"a": shallow}) is not None and plain(shallow) is not None
