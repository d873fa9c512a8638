"""Which rows the sink refuses before sending them, and why (Kinesis would refuse them)."""

from __future__ import annotations

import pytest

from pyspark_kinesis.sink.producing import invalid_reason


@pytest.mark.parametrize("hash_key", ["0", "42", str(2**128 - 1), "100"])
def test_ascii_decimal_hash_keys_below_2_to_the_128_are_valid(hash_key):
    assert invalid_reason(b"x", "k", hash_key) is None


@pytest.mark.parametrize(
    "hash_key",
    # Leading zeros too: the service's pattern is 0|([1-9]\d{0,38}), and it refuses the whole call.
    [
        "",
        "-1",
        "1e5",
        " 5",
        "5 ",
        "0x10",
        str(2**128),
        "²",
        "١٢٣",
        "１２",
        "1" * 40,
        "000123",
        "00",
        "0" * 39,
    ],
)
def test_other_hash_keys_are_bad_rows_not_raw_errors(hash_key):
    assert "explicitHashKey" in (invalid_reason(b"x", "k", hash_key) or "")
