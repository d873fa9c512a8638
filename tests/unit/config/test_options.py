from __future__ import annotations

import json

import pytest

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.model import AFTER, TIMESTAMP, TRIM, Position
from pyspark_kinesis.source.options import known_options, parse_options

BASE = {"streamName": "orders", "region": "eu-west-1", "metadataPath": "/tmp/m"}


def test_defaults_and_case_folding():
    config = parse_options(
        {"STREAMNAME": "orders", "region": "eu-west-1", "metadatapath": "/m"}, streaming=True
    )
    assert [s.name for s in config.streams] == ["orders"]
    assert config.streams[0].aws.region == "eu-west-1"
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
    assert config.streams[0].aws.secret_key == "s3cr3t"


def test_the_docs_option_table_is_the_declarations():
    """docs/options.md's table is what the declarations say, row for row (regenerate it with
    `pyspark-kinesis options --markdown`)."""
    from pathlib import Path

    from pyspark_kinesis.config.declared import markdown_table

    page = (Path(__file__).resolve().parents[3] / "docs" / "options.md").read_text()
    assert markdown_table(known_options().values()) in page


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

    from pyspark_kinesis.config.declared import markdown_table
    from pyspark_kinesis.sink.options import sink_options

    page = (Path(__file__).resolve().parents[3] / "docs" / "sink.md").read_text()
    assert markdown_table(sink_options().values()) in page


ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"


def test_sink_stream_arn_sets_the_region_and_is_written_by_arn():
    from dataclasses import replace

    from pyspark_kinesis.aws.kinesis import sink_target
    from pyspark_kinesis.sink.options import parse_sink_options

    config = parse_sink_options({"streamName": ARN})
    assert config.aws.region == "eu-west-1"
    spec = sink_target(replace(config.aws, region="us-east-1"), ARN)
    assert spec.aws.region == "eu-west-1" and spec.api_args() == {"StreamARN": ARN}
    spec = sink_target(config.aws, "plain")
    assert spec.aws is config.aws and spec.api_args() == {"StreamName": "plain"}
    with pytest.raises(OptionError, match="'region': 'us-west-2' disagrees with the region 'eu-west-1'"):
        parse_sink_options({"streamName": ARN, "region": "us-west-2"})


def test_stream_lists_arns_and_per_stream_overrides():
    names = parse_options(BASE | {"streamName": f"orders, clicks,{ARN}"}, streaming=True)
    assert [(s.name, s.aws.region, s.by_arn) for s in names.streams] == [
        ("orders", "eu-west-1", False),
        ("clicks", "eu-west-1", False),
        ("orders", "eu-west-1", True),
    ]
    assert names.streams[2].api_args() == {"StreamARN": ARN}
    entries = [
        "orders",
        {
            "streamName": "orders",
            "region": "us-west-2",
            "roleArn": "arn:aws:iam::210987654321:role/reader",
            "externalId": "x-secret-id",
            "startingPosition": "TRIM_HORIZON",
        },
        {"STREAMNAME": ARN.replace("eu-west-1", "ap-south-1"), "endpointUrl": "http://127.0.0.1:1"},
    ]
    config = parse_options(
        {k: v for k, v in BASE.items() if k != "streamName"} | {"streams": json.dumps(entries)},
        streaming=True,
    )
    first, second, third = config.streams
    assert (first.aws.region, first.starting_position, first.aws.role_arn) == (
        "eu-west-1",
        Position.latest(),
        None,
    )
    assert (second.aws.region, second.starting_position.kind, second.aws.role_arn) == (
        "us-west-2",
        TRIM,
        "arn:aws:iam::210987654321:role/reader",
    )
    assert "x-secret-id" not in repr(config)
    assert (third.aws.region, third.aws.endpoint_url, third.by_arn) == (
        "ap-south-1",
        "http://127.0.0.1:1",
        True,
    )


@pytest.mark.parametrize(
    ("options", "option", "text"),
    [
        ({"streams": "[{'streamName': 'x'}]"}, "streams", "is not valid JSON"),
        ({"streams": "{}"}, "streams", "must be a non-empty JSON list"),
        ({"streams": "[3]"}, "streams[0]", "is a int, not a stream name or an object"),
        ({"streams": '[{"stream": "x"}]'}, "streams[0].stream", "Did you mean 'streamName'?"),
        ({"streams": '[{"region": "us-east-1"}]'}, "streams[0].streamName", "missing"),
        ({"streams": '["a", {"streamName": "b", "region": 5}]'}, "streams[1].region", "not a string"),
        ({"streams": '["a"]', "streamName": "b"}, "streams", "cannot be combined with streamName"),
        ({"streamName": "a,,b"}, "streamName", "has an empty name"),
        ({"streamName": "a,a"}, "streamName", "twice"),
        ({"streamName": "bad name"}, "streamName", "neither a stream name"),
        (
            {"streamName": "arn:aws:kinesis:eu-west-1:12:stream/x"},
            "streamName",
            "is not a Kinesis stream ARN",
        ),
        ({"streamName": ARN, "region": "us-east-1"}, "region", "disagrees with the region 'eu-west-1'"),
        (
            {"streams": json.dumps([{"streamName": ARN, "region": "us-east-1"}])},
            "streams[0].region",
            "disagrees with the region 'eu-west-1'",
        ),
        ({"roleArn": "reader"}, "roleArn", "is not an IAM role ARN"),
        ({"externalId": "abc"}, "externalId", "only applies with roleArn"),
        (
            {"streams": '[{"streamName": "a", "roleArn": "arn:aws:iam::1:role/r"}]'},
            "streams[0].roleArn",
            "is not an IAM role ARN",
        ),
        (
            {"streams": '[{"streamName": "a", "startingPosition": "FIRST"}]'},
            "streams[0].startingPosition",
            "unknown position",
        ),
    ],
)
def test_bad_stream_lists_name_the_entry(options, option, text):
    opts = {k: v for k, v in BASE.items() if k != "streamName" or "streams" not in options} | options
    with pytest.raises(OptionError) as info:
        parse_options(opts, streaming=True)
    assert info.value.option == option
    assert text in str(info.value)


@pytest.mark.parametrize("given", ["queryName", "queryname", "path", "checkpointLocation"])
def test_options_spark_itself_passes_are_accepted_and_ignored_by_source_and_sink(given):
    """`writeStream.queryName(...)` reaches a Python sink as the option `queryName` (Spark Declarative
    Pipelines name every sink flow that way); `load(path)`, `save(path)` and the checkpoint too."""
    from pyspark_kinesis.sink.options import parse_sink_options

    sink = parse_sink_options({"streamName": "s", given: "flow_1"})
    assert sink == parse_sink_options({"streamName": "s"})
    source = parse_options({"streamName": "s", "metadataPath": "/m", given: "flow_1"}, streaming=True)
    assert source == parse_options({"streamName": "s", "metadataPath": "/m"}, streaming=True)


def test_the_readmes_option_table_names_declared_options_with_their_declared_defaults():
    """README.md's short table is a chosen few rows in its own words, but its names and defaults are
    the declarations' (a row of one option shows `default_text`), so it cannot drift from them."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    head = readme.index("| option | default | meaning |")
    rows = [line for line in readme[head:].split("\n\n")[0].splitlines()[2:] if line.startswith("|")]
    assert len(rows) >= 10
    for row in rows:
        names_cell, default_cell = (cell.strip() for cell in row.split("|")[1:3])
        names = [name.strip().strip("`") for name in names_cell.split(",")]
        for name in names:
            assert name in known_options(), f"README names an option that is not declared: {name}"
        if len(names) == 1:
            declared = known_options()[names[0]].default_text
            assert default_cell.replace("`", "") == declared.replace("`", ""), (
                names[0],
                default_cell,
                declared,
            )


def test_a_tables_stream_looks_at_a_quiet_shard_less_often_unless_told():
    """A DynamoDB Streams look takes up to three GetRecords (empty pages mid-shard say nothing certain):
    every 500 ms that would pass the service's five reads per second of a shard."""
    table = BASE | {"service": "dynamodb"}
    assert parse_options(table, streaming=True).idle_poll_interval_ms == 1500
    assert parse_options(table | {"idlePollIntervalMs": "700"}, streaming=True).idle_poll_interval_ms == 700
