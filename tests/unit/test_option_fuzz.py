"""Fuzzing the options (hypothesis): whatever a user writes, parsing ends in a valid config or in one
OptionError that names an option, never another exception (a raw stack trace through Py4J) or a
hang, and never echoes a secret value."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_kinesis.config.stream_specs import ENTRY_KEYS
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.sink.options import SINK_OPTIONS, SinkConfig, parse_sink_options
from pyspark_kinesis.source.options import KNOWN_OPTIONS, SourceConfig, parse_options

SECRET_KEYS = ("awsSecretKey", "sessionToken", "externalId", "metadataStorageOptions")
values = st.one_of(
    st.text(max_size=40),
    st.integers(-(10**12), 10**12).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "LATEST",
            "trim_horizon",
            "AT_TIMESTAMP:2026-01-01T00:00:00Z",
            "AT_TIMESTAMP:",
            "true",
            "maybe",
            "http://127.0.0.1:1",
            "arn:aws:kinesis:us-east-1:123456789012:stream/s",
            "arn:aws:iam::123456789012:role/r",
            "arn:aws:kinesis:x",
            "-1",
            "0",
            "1e9",
            "balanced",
            "no.such:fn",
            "a,b",
            ",",
        ]
    ),
)
keys = st.one_of(
    st.sampled_from(sorted(KNOWN_OPTIONS)).map(lambda k: k if len(k) % 2 else k.lower()),
    st.text(min_size=1, max_size=15),
)
# Secret options, in either spelling Spark may hand them over, with values long and odd enough to be
# recognised if any message or repr echoed them.
secrets = st.dictionaries(
    st.sampled_from(
        [k for name in ("awsSecretKey", "sessionToken", "externalId") for k in (name, name.lower())]
    ),
    st.text(min_size=0, max_size=30).map(lambda s: f"S3CR3T-{s}-VALUE"),
    max_size=3,
)
entry = st.one_of(
    values,
    st.dictionaries(
        st.one_of(st.sampled_from(ENTRY_KEYS), st.text(max_size=10)),
        st.one_of(values, st.integers()),
        max_size=5,
    ),
    st.integers(),
    st.none(),
)
streams_json = st.one_of(st.lists(entry, max_size=4).map(json.dumps), st.text(max_size=30))


def secret_values(options: dict[str, str]) -> list[str]:
    """The values given for secret options, whatever the case of their keys (Spark may lower-case them)."""
    names = {name.lower() for name in SECRET_KEYS}
    return [v for k, v in options.items() if k.lower() in names and len(v) >= 8]


def check(parse, options: dict[str, str], ok_type: type) -> None:
    try:
        config = parse(options)
    except OptionError as exc:
        message = str(exc)
        assert message.startswith("Kinesis option '") and len(message) < 2000
        for secret in secret_values(options):
            assert secret not in message, f"a secret leaked into: {message}"
        return
    assert isinstance(config, ok_type)
    for secret in secret_values(options):
        assert secret not in repr(config), "a secret leaked into the config's repr"


def test_the_leak_check_catches_a_leak_whatever_the_key_case():
    """The fuzz's own assertion can fail: a parser that echoes a lower-cased secret key's value is caught."""

    def leaky(options: dict[str, str]) -> None:
        raise OptionError("awsSecretKey", f"bad value {options['awssecretkey']}", "Fix it.")

    with pytest.raises(AssertionError, match="leaked"):
        check(leaky, {"awssecretkey": "S3CR3T--VALUE"}, SourceConfig)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=8), secrets, st.booleans(), st.one_of(st.none(), streams_json))
def test_source_options_end_in_a_config_or_a_clear_error(options, secret_options, streaming, streams):
    options = {**options, **secret_options}
    if streams is not None:
        options = dict(options, streams=streams)
    check(lambda o: parse_options(o, streaming=streaming), options, SourceConfig)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.one_of(st.sampled_from(sorted(SINK_OPTIONS)), st.text(min_size=1, max_size=15)), values, max_size=8
    ),
    secrets,
)
def test_sink_options_end_in_a_config_or_a_clear_error(options, secret_options):
    check(parse_sink_options, {**options, **secret_options}, SinkConfig)
