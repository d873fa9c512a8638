"""DynamoDB's typed attribute values (a stream record's `Keys`, `NewImage`, `OldImage`) as plain values.

A DynamoDB item is a map of typed values (`{"N": "1.50"}`, `{"SS": ["a", "b"]}`, `{"M": {...}}`).
What a reader wants is the item as it would write it: JSON text of plain values by default, numbers
exact. A DynamoDB number has up to 38 significant digits: a float would round it, so numbers are
written as the service's own text (it is a JSON number already, or is made one through `Decimal`,
never through a float), and read back by `plain` as `Decimal`. Binary becomes base64 text in JSON
(bytes in `plain`); a set becomes a JSON array in the service's order (a set has no order of its own,
and a replay of the same record gives the same order, which is what an exact replay needs).

Input is what botocore parses from the service (binary as bytes) or what a change's payload keeps
(binary as the wire's base64 text: `aws.dynamodb_streams.change`). A value this
module does not know (a type DynamoDB adds later, or a malformed record) raises `ValueError` naming
the type: the caller decides what a record it cannot decode does to the batch.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import orjson
import pybase64
from pyspark.sql import types as T

MAX_DEPTH = 64  # DynamoDB nests at most 32 levels: deeper is not an item the service wrote
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def number_text(text: str) -> str:
    """A DynamoDB number as JSON number text, digit for digit where it is one already."""
    if _JSON_NUMBER.fullmatch(text):
        return text
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a DynamoDB number: {text[:40]!r}") from None
    if not value.is_finite():
        raise ValueError(f"not a DynamoDB number: {text[:40]!r}")
    # (plain digits near 1, an exponent far from it: both are JSON number text)
    return format(value, "f") if -30 < value.adjusted() < 30 else format(value, "E")


def _base64(value: bytes | str) -> str:
    """Binary as JSON base64 text: bytes as botocore gives them, or the wire's base64 text as a
    payload keeps it (checked: text that is not base64 is no binary the service sent)."""
    if isinstance(value, str):
        try:
            pybase64.b64decode(value, validate=True)
        except ValueError:
            raise ValueError("a binary attribute value that is not base64") from None
        return '"' + value + '"'
    return '"' + pybase64.b64encode(value).decode() + '"'


def _bytes(value: bytes | str) -> bytes:
    if isinstance(value, str):
        try:
            return pybase64.b64decode(value, validate=True)
        except ValueError:
            raise ValueError("a binary attribute value that is not base64") from None
    return value


def _kind(value: Any, depth: int) -> tuple[str, Any]:
    if depth > MAX_DEPTH:
        raise ValueError(f"an attribute value nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"not a DynamoDB attribute value: {type(value).__name__}")
    ((kind, inner),) = value.items()
    return kind, inner


def _write(value: Any, out: list[str], depth: int) -> None:
    kind, inner = _kind(value, depth)
    if kind == "S":
        out.append(orjson.dumps(inner).decode())
    elif kind == "N":
        out.append(number_text(inner))
    elif kind == "B":
        out.append(_base64(inner))
    elif kind == "BOOL":
        out.append("true" if inner else "false")
    elif kind == "NULL":
        out.append("null")
    elif kind == "SS":
        out.append(orjson.dumps(list(inner)).decode())
    elif kind == "NS":
        out.append("[" + ",".join(number_text(n) for n in inner) + "]")
    elif kind == "BS":
        out.append("[" + ",".join(_base64(b) for b in inner) + "]")
    elif kind == "L":
        out.append("[")
        for index, item in enumerate(inner):
            if index:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    elif kind == "M":
        _write_map(inner, out, depth + 1)
    else:
        raise ValueError(f"unknown DynamoDB attribute type {kind[:20]!r}")


def _write_map(attributes: dict[str, Any], out: list[str], depth: int) -> None:
    out.append("{")
    for index, (name, item) in enumerate(attributes.items()):
        if index:
            out.append(",")
        out.append(orjson.dumps(name).decode())
        out.append(":")
        _write(item, out, depth)
    out.append("}")


def item_json(item: dict[str, Any] | None) -> str | None:
    """An item (or its keys) as JSON text of plain values; None for no item (an INSERT has no old image,
    a REMOVE no new one, a KEYS_ONLY stream neither)."""
    if item is None:
        return None
    out: list[str] = []
    _write_map(item, out, 1)
    return "".join(out)


def plain(value: Any, depth: int = 1) -> Any:
    """One attribute value as a Python value: str, Decimal, bytes, bool, None, list (L and the sets),
    dict (M)."""
    kind, inner = _kind(value, depth)
    if kind in ("S", "BOOL"):
        return inner
    if kind == "B":
        return _bytes(inner)
    if kind == "N":
        return Decimal(number_text(inner))
    if kind == "NULL":
        return None
    if kind == "SS":
        return list(inner)
    if kind == "BS":
        return [_bytes(b) for b in inner]
    if kind == "NS":
        return [Decimal(number_text(n)) for n in inner]
    if kind == "L":
        return [plain(item, depth + 1) for item in inner]
    if kind == "M":
        return {name: plain(item, depth + 1) for name, item in inner.items()}
    raise ValueError(f"unknown DynamoDB attribute type {kind[:20]!r}")


def item_plain(item: dict[str, Any]) -> dict[str, Any]:
    """An item as a dict of Python values (see `plain`)."""
    return {name: plain(value) for name, value in item.items()}


def change_row(payload: bytes) -> tuple[str, str | None, str | None, str | None, bool, int | None, str]:
    """A change's payload (`aws.dynamodb_streams.change`) as (eventName, keys, newImage, oldImage as
    JSON text of plain values, whether Time to Live deleted the item, SizeBytes, eventID)."""
    try:
        name, keys, new, old, by_ttl, size, event_id = orjson.loads(payload)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        raise ValueError("not a DynamoDB Streams change") from None
    return str(name), item_json(keys), item_json(new), item_json(old), bool(by_ttl), size, str(event_id)


def fitted(value: Any, kind: Any, where: str) -> Any:
    """A plain value (`plain`) as a value of the Spark type `kind`, exactly, or `ValueError` naming
    `where` (a number with a fraction is no integer, one past a decimal's precision does not fit: a
    typed image never holds a rounded number). Missing struct fields are null, extra ones left out
    (an item's attributes vary; the schema names those the reader wants)."""
    if value is None:
        return None
    if isinstance(kind, T.StructType):
        if not isinstance(value, dict):
            raise ValueError(f"{where} is {type(value).__name__}, not a map")
        return {f.name: fitted(value.get(f.name), f.dataType, f"{where}.{f.name}") for f in kind.fields}
    if isinstance(kind, T.ArrayType):
        if not isinstance(value, list):
            raise ValueError(f"{where} is {type(value).__name__}, not a list or a set")
        return [fitted(item, kind.elementType, f"{where}[{n}]") for n, item in enumerate(value)]
    if isinstance(value, Decimal):
        return _number(value, kind, where)
    wanted = {T.StringType: str, T.BinaryType: bytes, T.BooleanType: bool}
    for spark_type, python_type in wanted.items():
        if isinstance(kind, spark_type) and isinstance(value, python_type):
            return value
    raise ValueError(f"{where} is {type(value).__name__}, which does not fit {kind.simpleString()}")


def _number(value: Decimal, kind: Any, where: str) -> Any:
    if isinstance(kind, T.DecimalType):
        with localcontext() as exact_context:
            exact_context.prec = 200  # (DynamoDB's 38 digits and exponents to 126: no rounding here)
            exact = value.quantize(Decimal(1).scaleb(-kind.scale))
        if exact != value or len(exact.as_tuple().digits) > kind.precision:
            raise ValueError(f"{where} = {value} does not fit {kind.simpleString()} exactly")
        return exact
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        bits = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}[type(kind)]
        if value != value.to_integral_value() or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError(f"{where} = {value} does not fit {kind.simpleString()} exactly")
        return int(value)
    if isinstance(kind, T.DoubleType | T.FloatType):
        return float(value)  # (asked for: a double rounds past 15-17 digits, as the type says)
    if isinstance(kind, T.StringType):
        return str(value)
    raise ValueError(f"{where} is a number, which does not fit {kind.simpleString()}")
