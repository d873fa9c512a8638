"""GetRecords bodies scanned straight into Arrow arrays, without a Python object per record.

msgspec (get_records.py) parses a body fast, but into one object, three strings and one bytes per
record, which the task then copies into Arrow column by column. For small records those per-record
objects are most of the cost (see docs/performance.md). A GetRecords body has a fixed, flat shape, so
it can be read with a few vectorised passes instead:

1. numpy finds every double quote; without backslashes in the body (no escapes), quotes pair up into
   strings, and a string followed by ':' is a member name.
2. Names are told apart by length and three of their bytes. Servers write every record's members in
   one order, so the records' names form a grid, checked in one comparison (records in differing
   orders are left to msgspec). The values of the four record members are the strings (or, for the
   timestamp, the number) right after their names, cut out of the body with one Arrow `take` per
   column.
3. All base64 payloads are decoded in one pybase64 call over their concatenation (each payload's
   base64 is whole 4-character groups, so groups never straddle two payloads; padding is turned into
   zero bits and the padded bytes are left out by the offsets).

Anything the scan does not fully recognise (escapes, whitespace between tokens, members it does not
know such as a closed shard's ChildShards, a body cut short, invalid base64 or UTF-8) makes `scan` return None, and
the caller decodes the body with msgspec instead, so the scan only ever has to be right, never
complete. Its results are checked against msgspec's on generated bodies (tests/unit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pybase64

from .arrow_arrays import empty, int32_array

_QUOTE, _COLON, _COMMA, _OPEN_BRACE = ord('"'), ord(":"), ord(","), ord("{")
_PAD, _ZERO_BITS = ord("="), ord("A")


def _code(name: bytes) -> int:
    """A member name's fingerprint: its length and its first, second and last bytes."""
    return ((len(name) * 256 + name[0]) * 256 + name[1]) * 256 + name[-1]


_DATA, _KEY, _SEQ, _ARRIVAL, _ENCRYPTION = (
    b"Data",
    b"PartitionKey",
    b"SequenceNumber",
    (b"ApproximateArrivalTimestamp"),
    b"EncryptionType",
)
_RECORDS, _NEXT, _BEHIND = b"Records", b"NextShardIterator", b"MillisBehindLatest"
_CHILDREN = b"ChildShards"  # read here only as null (some servers send it so); a closed shard's is msgspec's
_NAMES = {
    _code(n): n for n in (_DATA, _KEY, _SEQ, _ARRIVAL, _ENCRYPTION, _RECORDS, _NEXT, _BEHIND, _CHILDREN)
}
assert len(_NAMES) == 9  # the fingerprints tell the known names apart
_RECORD_NAMES = (_DATA, _KEY, _SEQ, _ARRIVAL, _ENCRYPTION)
_RECORD_MEMBERS = {_code(n) for n in _RECORD_NAMES}
_REQUIRED_MEMBERS = {_code(n) for n in (_DATA, _KEY, _SEQ, _ARRIVAL)}
_LONGEST_NAME = 64  # longer names are none of the known ones (and keep the fingerprints in int32)

# After the last member of the last record: its value, the record's '}', the array's ']', then more
# members or the document's end. A body cut off right after a record's '}' fails here.
_RECORDS_END = re.compile(rb':(?:"[^"]*"|[^\s,\]}"]+)\s*\}\s*\]\s*(?:,\s*|\}\s*$)')
_NO_RECORDS = re.compile(rb":\[\s*\]\s*(?:,\s*|\}\s*$)")
_NUMBER = re.compile(rb":(-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*[,}]")
_NUMBER_TRIM = ",{}[] \t\r\n"  # what may follow a timestamp before the next member


@dataclass(frozen=True, slots=True)
class Scanned:
    data: pa.BinaryArray
    keys: pa.StringArray
    seqs: pa.StringArray
    arrivals: pa.DoubleArray  # epoch seconds, as Kinesis sends them
    next_iterator: str | None
    millis_behind: int | None


def _segments(buf: pa.Buffer, starts: np.ndarray, ends: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The byte ranges [starts[i], ends[i]) of `buf` (ascending, not overlapping) as one contiguous
    array: the ranges and the gaps between them, read as alternate elements of one array over the
    buffer, of which every other element is taken."""
    n = len(starts)
    if n == 0:
        return empty(kind)
    offsets = np.empty(2 * n, np.int32)
    offsets[0::2], offsets[1::2] = starts, ends
    spread = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(offsets), buf])
    return spread.take(int32_array(np.arange(0, 2 * n - 1, 2, dtype=np.int32)))


def scan(body: bytes) -> Scanned | None:
    """The body's records as Arrow arrays, or None when the body is not one the scan recognises."""
    if b"\\" in body or len(body) >= 2**31 - 1:
        return None
    text = body.strip()
    if not (text.startswith(b"{") and text.endswith(b"}")):
        return None
    raw = np.frombuffer(body, np.uint8)
    quotes = np.flatnonzero(raw == _QUOTE).astype(np.int32)
    if len(quotes) < 2 or len(quotes) % 2:
        return None
    opens, closes = quotes[0::2], quotes[1::2]
    if closes[-1] + 1 >= len(body):
        return None
    names = np.flatnonzero(raw[closes + 1] == _COLON)
    name_open, name_close = opens[names], closes[names]
    length = name_close - name_open - 1
    if len(names) == 0 or length.max() > _LONGEST_NAME:
        return None
    code = ((length * 256 + raw[name_open + 1]) * 256 + raw[name_open + 2]) * 256 + raw[name_close - 1]
    found = _members(body, raw, opens, closes, names, code)
    if found is None:
        return None  # msgspec reads it
    none = names[:0]
    data_k, key_k, seq_k, arrival_k = (found.get(n, none) for n in (_DATA, _KEY, _SEQ, _ARRIVAL))
    encryption_k = found.get(_ENCRYPTION, none)
    count = len(data_k)
    if (
        len(found.get(_RECORDS, ())) != 1
        or len(found.get(_NEXT, ())) > 1
        or len(found.get(_BEHIND, ())) > 1
        or len(found.get(_CHILDREN, ())) > 1
        or (_CHILDREN in found and not body.startswith(b":null", int(closes[found[_CHILDREN][0]]) + 1))
        or not len(key_k) == len(seq_k) == len(arrival_k) == count
        or len(encryption_k) not in (0, count)
    ):
        return None
    # Every string that is not a member name is the value of one of these string members.
    string_valued = np.concatenate([data_k, key_k, seq_k, encryption_k])
    next_k = found.get(_NEXT)
    next_is_string = next_k is not None and body[closes[next_k[0]] + 1 : closes[next_k[0]] + 3] == b':"'
    if next_is_string:
        string_valued = np.concatenate([string_valued, next_k])
    if len(opens) - len(names) != len(string_valued):
        return None
    if len(string_valued) and not np.all(
        opens[np.minimum(string_valued + 1, len(opens) - 1)] == closes[string_valued] + 2
    ):
        return None
    if not _records_complete(
        body,
        opens,
        closes,
        found[_RECORDS][0],
        count,
        (data_k, key_k, seq_k, arrival_k, encryption_k),
        arrival_k,
    ):
        return None

    buf = pa.py_buffer(body)
    following = np.append(opens[1:], len(body)).astype(np.int32)
    try:
        keys = _segments(buf, opens[key_k + 1] + 1, closes[key_k + 1], pa.string())
        seqs = _segments(buf, opens[seq_k + 1] + 1, closes[seq_k + 1], pa.string())
        keys.validate(full=True)
        seqs.validate(full=True)
        numbers = _segments(buf, closes[arrival_k] + 2, following[arrival_k], pa.string())
        arrivals = pc.cast(pc.utf8_rtrim(numbers, characters=_NUMBER_TRIM), pa.float64())
    except (pa.ArrowInvalid, ValueError):
        return None
    data = _payloads(buf, opens[data_k + 1] + 1, closes[data_k + 1])
    if data is None:
        return None
    next_iterator = None
    if next_is_string and next_k is not None:
        value = next_k[0] + 1
        next_iterator = body[opens[value] + 1 : closes[value]].decode()
    millis_behind = None
    if _BEHIND in found:
        match = _NUMBER.match(body, int(closes[found[_BEHIND][0]]) + 1)
        if match is None:
            return None
        millis_behind = int(float(match.group(1)))
    return Scanned(data, keys, seqs, arrivals, next_iterator, millis_behind)


def _members(
    body: bytes, raw: np.ndarray, opens: np.ndarray, closes: np.ndarray, names: np.ndarray, code: np.ndarray
) -> dict[bytes, np.ndarray] | None:
    """The member names' string indices, by name; None if the body is not of the shape the scan reads.

    That shape: every record lists the same members in the same order (as a server's serializer writes
    them), so the records' names form an (n, m) grid, checked in one comparison, and each member's
    names are a strided view of it. Each grid row must be exactly one record object: its first name
    right after the object's '{', the others each right after a ','. So a record with a member missing
    or repeated cannot shift the rows unnoticed. Records written in differing orders go to msgspec."""
    head = code[:4].tolist()  # at most three top-level members come before Records
    if _code(_RECORDS) not in head:
        return None
    at = head.index(_code(_RECORDS))
    start = at + 1
    first: list[int] = []
    for fingerprint in code[start : start + len(_RECORD_MEMBERS)].tolist():
        if fingerprint not in _RECORD_MEMBERS or fingerprint in first:
            break
        first.append(fingerprint)
    width = len(first)
    rows = (len(names) - start) // width if width else 0
    end = start + rows * width
    found: dict[bytes, np.ndarray] = {_RECORDS: names[at : at + 1]}
    if rows:
        if not set(first) >= _REQUIRED_MEMBERS:
            return None
        if not (code[start:end].reshape(rows, width) == np.array(first, code.dtype)).all():
            return None
        name_starts = opens[names[start:end]]
        before = raw[name_starts - 1].reshape(rows, width)
        if not ((before[:, 0] == _OPEN_BRACE).all() and (before[:, 1:] == _COMMA).all()):
            return None
        if body[closes[names[at]] + 1 : name_starts[0]] != b":[{":
            return None
        found.update({_NAMES[fp]: names[start + j : end : width] for j, fp in enumerate(first)})
    for index in [*range(at), *range(end, len(names))]:  # the other top-level members
        name = _NAMES.get(int(code[index]))
        if name is None or name in found or name in _RECORD_NAMES:
            return None  # unknown (ChildShards with content, a new field), repeated, or out of place
        found[name] = names[index : index + 1]
    return found


def _records_complete(
    body: bytes,
    opens: np.ndarray,
    closes: np.ndarray,
    records_k: int,
    count: int,
    members: tuple[np.ndarray, ...],
    arrival_k: np.ndarray,
) -> bool:
    """Whether the Records array is closed after its last record (a cut-off body is not)."""
    if count == 0:
        return _NO_RECORDS.match(body, int(closes[records_k]) + 1) is not None
    last = int(max(int(m[-1]) for m in members if len(m)))
    # The string after the last member: its value (string members) or the next member (a number's).
    after = last + (1 if last == int(arrival_k[-1]) else 2)
    end = int(opens[after]) if after < len(opens) else len(body)
    return _RECORDS_END.fullmatch(body, int(closes[last]) + 1, end) is not None


def _payloads(buf: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.BinaryArray | None:
    """The base64 values [starts, ends) of `buf`, decoded in one call; None if any is not valid base64."""
    encoded = _segments(buf, starts, ends, pa.binary())
    n = len(encoded)
    if n == 0:
        return empty(pa.binary())
    bounds = np.frombuffer(encoded.buffers()[1], np.int32, n + 1)
    lengths = np.diff(bounds)
    if np.any(lengths & 3):
        return None
    chars = np.frombuffer(encoded.buffers()[2], np.uint8, int(bounds[-1]))
    last = bounds[1:]
    filled = lengths > 0
    pad1 = np.zeros(n, np.int32)
    pad2 = np.zeros(n, np.int32)
    pad1[filled] = chars[last[filled] - 1] == _PAD
    pad2[filled] = chars[last[filled] - 2] == _PAD
    pads = pad1 + pad2
    # '=' only as the last one or two characters of a value (the second only with the first).
    if np.any(pad2 > pad1) or np.count_nonzero(chars == _PAD) != int(pads.sum()):
        return None
    # Padding becomes 'A' (zero bits), in place: the column is a fresh copy this function owns.
    padded = chars if chars.flags.writeable else chars.copy()
    padded[last[pad1 > 0] - 1] = _ZERO_BITS
    padded[last[pad2 > 0] - 2] = _ZERO_BITS
    try:
        decoded = pybase64.b64decode(padded.data, validate=True)
    except ValueError:
        return None
    first = bounds[:-1] // 4 * 3
    return _segments(pa.py_buffer(decoded), first, first + lengths // 4 * 3 - pads, pa.binary())
