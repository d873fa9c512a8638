"""Other connectors' option names reach the same setting as ours (docs/migration.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_kinesis.config.aliases import ALIASES
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.sink.options import parse_sink_options
from pyspark_kinesis.source.options import known_options, parse_options

BASE = {"streamName": "orders", "region": "eu-west-1", "metadataPath": "/tmp/m"}
# For each canonical option: (the value given to the alias, the same setting given under our name).
SAMPLES = {
    "streamName": ("arn:aws:kinesis:eu-west-1:123456789012:stream/clicks",) * 2,
    "region": ("ap-south-1",) * 2,
    "endpointUrl": ("http://127.0.0.1:4568",) * 2,
    "startingPosition": ("TRIM_HORIZON",) * 2,
    "failOnDataLoss": ("false",) * 2,
    "maxRecordsPerShard": ("1234",) * 2,
    "metadataPath": ("/tmp/elsewhere",) * 2,
    "roleArn": ("arn:aws:iam::123456789012:role/reader",) * 2,
    "roleSessionName": ("etl-session",) * 2,
    "stsEndpointUrl": ("http://127.0.0.1:9999",) * 2,
    "awsAccessKeyId": ("AKIDEXAMPLE",) * 2,
    "awsSecretKey": ("secret-example",) * 2,
    "externalId": ("ext-1",) * 2,
    "maxShardsPerTask": ("3",) * 2,
    "consumerType": ("efo",) * 2,
    "consumerName": ("etl",) * 2,
}
CONVERTED = {
    "kinesis.maxFetchTimePerShardSec": ("12", "12000"),
    "kinesis.describeShardInterval": ("2s", "2000"),
    "maxFetchDuration": ("1500ms", "1500"),
    "shardFetchInterval": ("1 minute", "60000"),
    "maxFetchRate": ("1.5", "1500000"),
    "kinesis.consumerType": ("SubscribeToShard", "efo"),
}


def needs(canonical: str) -> dict[str, str]:
    """Options some settings need beside them (a role needs its ARN, a key its secret)."""
    extra = {
        "externalId": {"roleArn": SAMPLES["roleArn"][1]},
        "roleSessionName": {"roleArn": SAMPLES["roleArn"][1]},
        "stsEndpointUrl": {"roleArn": SAMPLES["roleArn"][1]},
        "awsAccessKeyId": {"awsSecretKey": SAMPLES["awsSecretKey"][1]},
        "awsSecretKey": {"awsAccessKeyId": SAMPLES["awsAccessKeyId"][1]},
        "consumerName": {"consumerType": "efo"},
    }
    return extra.get(canonical, {})


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_each_alias_reaches_the_same_setting(alias):
    canonical = ALIASES[alias].canonical
    given, ours = CONVERTED.get(alias) or SAMPLES[canonical]
    base = {k: v for k, v in BASE.items() if k != canonical} | needs(canonical)
    if canonical == "streamName":
        base.pop("region")  # an ARN names its region
    via_alias = parse_options(base | {alias: given}, streaming=True)
    direct = parse_options(base | {canonical: ours}, streaming=True)
    assert via_alias == direct
    # ...and that setting is not what the options give without it: the alias was not ignored.
    without = {k: v for k, v in base.items() if k not in needs(canonical)}
    baseline = parse_options(without if "streamName" in without else BASE, streaming=False)
    assert direct != baseline


def test_aliases_are_case_insensitive_and_work_for_the_sink():
    config = parse_options(
        {"KINESIS.STREAMNAME": "orders", "kinesis.region": "eu-west-1", "kinesis.metadatapath": "/m"},
        streaming=True,
    )
    assert config.streams[0].name == "orders" and config.metadata_path == "/m"
    sink = parse_sink_options({"kinesis.streamName": "out", "kinesis.region": "eu-west-1"})
    assert sink.stream_name == "out" and sink.aws.region == "eu-west-1"


def test_an_option_given_twice_with_two_values_is_refused():
    with pytest.raises(OptionError) as info:
        parse_options(BASE | {"kinesis.streamName": "other"}, streaming=True)
    assert "'streamName'" in str(info.value) and "Give only one of them" in str(info.value)
    same = parse_options(BASE | {"kinesis.streamName": "orders"}, streaming=True)  # same value: fine
    assert same.streams[0].name == "orders"


@pytest.mark.parametrize(
    ("alias", "value"),
    [("maxFetchDuration", "10"), ("maxFetchRate", "fast"), ("kinesis.consumerType", "EFO")],
)
def test_bad_values_of_converted_aliases_name_the_alias(alias, value):
    with pytest.raises(OptionError) as info:
        parse_options(BASE | {alias: value}, streaming=True)
    assert info.value.option == alias


def test_a_misspelt_alias_gets_a_suggestion():
    with pytest.raises(OptionError) as info:
        parse_options(BASE | {"kinesis.maxFetchRecordPerShard": "5"}, streaming=True)
    assert "maxRecordsPerShard" in str(info.value)


def test_awslabs_timestamp_spelling():
    config = parse_options(
        BASE | {"kinesis.startingPosition": "AT_TIMESTAMP 2026-01-31T12:00:00Z"}, streaming=True
    )
    assert config.starting_position.ts_ms == 1769860800000


def test_every_alias_is_in_the_migration_table_and_points_at_a_real_option():
    page = (Path(__file__).resolve().parents[3] / "docs" / "migration.md").read_text()
    for alias, target in ALIASES.items():
        assert target.canonical in known_options()
        assert f"| `{alias}` | `{target.canonical}` |" in page, f"{alias} is missing from docs/migration.md"
