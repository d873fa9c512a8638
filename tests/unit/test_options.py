from __future__ import annotations

import pytest

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.options import KNOWN_OPTIONS, parse_options
from pyspark_kinesis.positions import AFTER, TIMESTAMP, TRIM, Position

BASE = {"streamName": "orders", "region": "eu-west-1", "metadataPath": "/tmp/m"}


def test_defaults_and_case_folding():
    config = parse_options(
        {"STREAMNAME": "orders", "region": "eu-west-1", "metadatapath": "/m"}, streaming=True
    )
    assert config.stream_name == "orders"
    assert config.starting_position == Position.latest()
    assert config.max_records_per_batch is None
    assert config.idle_poll_interval_ms == 500


def test_positions():
    assert (
        parse_options(BASE | {"startingPosition": "trim_horizon"}, streaming=True).starting_position.kind
        == TRIM
    )
    ts = parse_options(BASE | {"startingPosition": "AT_TIMESTAMP:2026-01-31T12:00:00Z"}, streaming=True)
    assert ts.starting_position.kind == TIMESTAMP
    assert ts.starting_position.ts_ms == 1769860800000
    naive = parse_options(BASE | {"startingPosition": "AT_TIMESTAMP:2026-01-31T12:00:00"}, streaming=True)
    assert naive.starting_position.ts_ms == 1769860800000  # naive means UTC


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"startingPosition": "FIRST"}, "startingPosition"),
        ({"maxRecordsPerBatch": "0"}, "maxRecordsPerBatch"),
        ({"maxBytesPerShard": "1.5"}, "maxBytesPerShard"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"retryMode": "forever"}, "retryMode"),
        ({"streamNme": "x"}, "streamNme"),
        ({"awsAccessKeyId": "AKID"}, "awsSecretKey"),
        ({"endingPosition": "TRIM_HORIZON"}, "endingPosition"),
        ({"shardAssigner": "round_robin"}, "shardAssigner"),
        ({"shardAssigner": "no.such.module:fn"}, "shardAssigner"),
        ({"targetTasks": "0"}, "targetTasks"),
        ({"maxShardsPerTask": "-1"}, "maxShardsPerTask"),
    ],
)
def test_invalid_values_name_the_option(options, option):
    with pytest.raises(OptionError) as info:
        parse_options(BASE | options, streaming=False)
    assert info.value.option == option
    assert f"'{option}'" in str(info.value)


def test_secrets_are_not_in_repr():
    config = parse_options(
        BASE | {"awsAccessKeyId": "AKIDSECRETID", "awsSecretKey": "s3cr3t", "sessionToken": "tok3n"},
        streaming=True,
    )
    text = repr(config)
    assert "s3cr3t" not in text and "tok3n" not in text and "AKIDSECRETID" not in text
    assert config.aws.secret_key == "s3cr3t"


def test_every_option_is_documented_in_the_readme():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "options.md").read_text()
    for name, (default, _text) in KNOWN_OPTIONS.items():
        assert f"`{name}` | {default} |" in readme, f"option {name} is missing from docs/options.md"


def test_position_round_trip():
    for position in [
        Position.trim_horizon(),
        Position.at_timestamp(123),
        Position.after("4968"),
        Position.inside("4968", 3),
        Position.shard_end(),
    ]:
        assert Position.from_json(position.to_json()) == position
    assert Position.after("5").iterator_args()["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert Position.inside("5", 2).iterator_args()["ShardIteratorType"] == "AT_SEQUENCE_NUMBER"
    assert Position.inside("5", 2).skips("5", 2) and not Position.inside("5", 2).skips("5", 3)
    assert Position(AFTER, seq="5").skips("5", 0) is False


def test_every_sink_option_is_documented():
    from pathlib import Path

    from pyspark_kinesis.sink_options import SINK_OPTIONS

    page = (Path(__file__).resolve().parents[2] / "docs" / "sink.md").read_text()
    for name, (default, _text) in SINK_OPTIONS.items():
        assert f"`{name}` | {default} |" in page, f"sink option {name} is missing from docs/sink.md"
