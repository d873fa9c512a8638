"""Every default is declared once: a config dataclass field that an option fills starts from that
option's declared default (the docs' tables are generated from the declarations, so a default of the
dataclass's own would make them say one thing while the code does another)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pyspark_kinesis.config.aws_settings import AWS_OPTIONS, AwsSettings
from pyspark_kinesis.config.declared import Option
from pyspark_kinesis.formats.glue_options import READ_OPTIONS, WRITE_OPTIONS, GlueSettings, SchemaToWrite
from pyspark_kinesis.sink.options import SinkConfig, sink_options
from pyspark_kinesis.source.options import SourceConfig, known_options


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _declared_for(name: str, options: list[Option]) -> Option | None:
    for option in options:
        if (option.field or _snake(option.key)) == name:
            return option
    return None


@pytest.mark.parametrize(
    ("config", "options", "least"),
    [
        (AwsSettings, list(AWS_OPTIONS), 3),
        (SourceConfig, list(known_options().values()), 3),
        (SinkConfig, list(sink_options().values()), 3),
        (GlueSettings, list(READ_OPTIONS), 3),
        (SchemaToWrite, list(WRITE_OPTIONS), 2),
    ],
    ids=["AwsSettings", "SourceConfig", "SinkConfig", "GlueSettings", "SchemaToWrite"],
)
def test_a_fields_default_is_its_options_declared_default(config, options, least):
    checked = 0
    for field in dataclasses.fields(config):
        if field.default is dataclasses.MISSING:
            continue
        option = _declared_for(field.name, options)
        if option is None or option.default is None:
            continue  # (no option fills it, or the option has no default: None means "not given")
        assert field.default == option.default, (config.__name__, field.name, field.default, option.default)
        checked += 1
    assert checked >= least, f"{config.__name__}: too few fields matched their options ({checked})"


def test_a_shard_reads_default_limits_are_the_options_defaults():
    """ShardLimits (the executor's per-read limits) starts from the same defaults the options declare,
    for a read made without a config (the tests' and the simulation's reads)."""
    from pyspark_kinesis.source.executor.cutting import ShardLimits

    limits = ShardLimits(max_records=1, max_bytes=1)
    assert limits.bytes_per_second == known_options()["shardReadBytesPerSecond"].default
    assert limits.push_wait_s * 1000 == known_options()["idlePollIntervalMs"].default
