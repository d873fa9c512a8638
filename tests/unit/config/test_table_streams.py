"""A stream ARN belongs to the options' entry that names it, or to the DynamoDB table named by name
whose stream it is (a table's stream disabled and enabled again is a new stream with a new ARN)."""

from __future__ import annotations

from pyspark_kinesis.config.table_streams import owner_of, spec_of
from pyspark_kinesis.source.options import parse_options

FIRST = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"
LATER = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-03-01T00:00:00.000"


def specs(**options: str):
    base = {"service": "dynamodb", "region": "us-east-1", "metadataPath": "/m"}
    return parse_options({**base, **options}, streaming=True).streams


def test_a_later_stream_of_a_table_named_by_name_is_that_entrys_with_its_own_arn():
    (table,) = specs(streamName="orders")
    resolved = table.__class__(**{**table.__dict__, "arn": FIRST, "created_ms": 5})
    assert owner_of([resolved], LATER) is resolved
    later = spec_of([resolved], LATER)
    assert later is not None and later.arn == LATER and later.created_ms is None and later.name == "orders"
    assert spec_of([resolved], FIRST) is resolved  # its own ARN: as resolved at the query's start
    assert spec_of([table], LATER) is not None  # (before the start resolved it, too)


def test_a_stream_of_another_table_region_or_account_or_a_stream_named_by_arn_is_nobodys():
    (table,) = specs(streamName="orders")
    resolved = table.__class__(**{**table.__dict__, "arn": FIRST})
    for other in (
        LATER.replace("table/orders/", "table/payments/"),
        LATER.replace("us-east-1", "eu-west-1"),
        LATER.replace("123456789012", "210987654321"),
        "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
    ):
        assert owner_of([resolved], other) is None, other
    (by_arn,) = specs(streamName=FIRST)
    assert owner_of([by_arn], FIRST) is by_arn and owner_of([by_arn], LATER) is None


def test_a_kinesis_stream_follows_no_other():
    (stream,) = parse_options(
        {"streamName": "orders", "region": "us-east-1", "metadataPath": "/m"}, streaming=True
    ).streams
    resolved = stream.__class__(**{**stream.__dict__, "arn": "arn:aws:kinesis:us-east-1:1:stream/orders"})
    assert owner_of([resolved], "arn:aws:kinesis:us-east-1:1:stream/orders2") is None
