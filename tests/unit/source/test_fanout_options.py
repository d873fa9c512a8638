"""Enhanced fan-out options: which consumer each stream uses, and clear errors for what cannot work."""

from __future__ import annotations

import json

import pytest

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.options import (
    default_consumer_name,
    parse_options,
    refuse_fan_out_for_batch_reads,
)

BASE = {"streamName": "orders", "region": "eu-west-1", "metadataPath": "/data/meta/orders-etl"}
ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/etl:1700000000"


def test_polling_is_the_default_and_names_no_consumer():
    config = parse_options(BASE, streaming=True)
    assert not config.fan_out
    assert config.streams[0].consumer_name is None and config.streams[0].consumer_arn is None


def test_efo_defaults_to_a_name_stable_per_query_and_distinct_between_queries():
    first = parse_options(BASE | {"consumerType": "EFO"}, streaming=True)
    again = parse_options(BASE | {"consumerType": "efo"}, streaming=True)
    other = parse_options(BASE | {"consumerType": "efo", "metadataPath": "/data/meta/other"}, streaming=True)
    assert first.fan_out
    name = first.streams[0].consumer_name
    assert name == again.streams[0].consumer_name == default_consumer_name("/data/meta/orders-etl")
    assert name != other.streams[0].consumer_name
    assert name.startswith("pyspark-kinesis-") and len(name) <= 128


def test_streams_entries_name_their_own_consumers_over_the_top_level_one():
    streams = json.dumps(
        [
            {"streamName": "orders", "consumerArn": ARN},
            {"streamName": "clicks", "consumerName": "clicks-etl"},
            "payments",
        ]
    )
    config = parse_options(
        {
            "streams": streams,
            "region": "eu-west-1",
            "metadataPath": "/m",
            "consumerType": "efo",
            "consumerName": "shared",
        },
        streaming=True,
    )
    specs = {s.name: (s.consumer_name, s.consumer_arn) for s in config.streams}
    assert specs == {"orders": (None, ARN), "clicks": ("clicks-etl", None), "payments": ("shared", None)}


@pytest.mark.parametrize(
    ("options", "option", "text"),
    [
        ({"consumerType": "push"}, "consumerType", "is not polling or efo"),
        ({"consumerName": "etl"}, "consumerName", "consumerType is polling"),
        ({"consumerType": "efo", "consumerName": "bad name"}, "consumerName", "is not a consumer name"),
        (
            {"consumerType": "efo", "consumerArn": "arn:aws:kinesis:x"},
            "consumerArn",
            "is not a Kinesis stream consumer ARN",
        ),
        (
            {"consumerType": "efo", "consumerArn": ARN.replace("stream/orders", "stream/clicks")},
            "consumerArn",
            "belongs to stream 'clicks'",
        ),
        (
            {"consumerType": "efo", "consumerArn": ARN, "consumerName": "etl"},
            "consumerArn",
            "cannot be combined",
        ),
    ],
)
def test_bad_consumer_options_name_the_option(options, option, text):
    with pytest.raises(OptionError) as info:
        parse_options(BASE | options, streaming=True)
    assert info.value.option == option and text in str(info.value)


def test_efo_is_refused_for_batch_reads():
    config = parse_options(BASE | {"consumerType": "efo"}, streaming=False)  # schema(): not known yet
    with pytest.raises(OptionError) as info:
        refuse_fan_out_for_batch_reads(config)
    assert info.value.option == "consumerType" and "streaming reads only" in str(info.value)


def test_a_position_subscribes_where_it_would_poll():
    assert Position.trim_horizon().starting_position() == {"Type": "TRIM_HORIZON"}
    assert Position.after("42").starting_position() == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "42",
    }
    assert Position.at_timestamp(1_700_000_000_123).starting_position() == {
        "Type": "AT_TIMESTAMP",
        "Timestamp": 1_700_000_000.123,
    }
