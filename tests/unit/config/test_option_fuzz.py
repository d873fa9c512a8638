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
from pyspark_kinesis.sink.options import SinkConfig, parse_sink_options, sink_options
from pyspark_kinesis.source.options import SourceConfig, known_options, parse_options

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
    st.sampled_from(sorted(known_options())).map(lambda k: k if len(k) % 2 else k.lower()),
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
        st.one_of(st.sampled_from(sorted(sink_options())), st.text(min_size=1, max_size=15)),
        values,
        max_size=8,
    ),
    secrets,
)
def test_sink_options_end_in_a_config_or_a_clear_error(options, secret_options):
    check(parse_sink_options, {**options, **secret_options}, SinkConfig)


# -- mostly valid configurations -------------------------------------------------------------------
# Values each option accepts, and one it refuses, so that a generated configuration is usually valid
# (the checks above then run on real configs: the secret-in-repr check, the parse of every option) and
# sometimes wrong in exactly one option (the error must name that option).
VALID: dict[str, list[str]] = {
    "startingPosition": ["LATEST", "TRIM_HORIZON", "trim_horizon", "AT_TIMESTAMP:2026-01-01T00:00:00Z"],
    "maxRecordsPerBatch": ["1", "500", "1000000"],
    "maxBytesPerBatch": ["1", "1048576"],
    "maxRecordsPerShard": ["1", "10000"],
    "maxBytesPerShard": ["1024", "67108864"],
    "maxFetchTimeMs": ["100", "10000"],
    "shardAssigner": ["balanced", "hash_range", "hash_mod"],
    "targetTasks": ["1", "8"],
    "maxShardsPerTask": ["1", "4"],
    "shardReadBytesPerSecond": ["0", "2000000"],
    "idlePollIntervalMs": ["0", "500"],
    "shardDiscoveryIntervalMs": ["1000", "60000"],
    "consumerType": ["polling", "efo"],
    "fanOutRelay": ["true", "false"],
    "failOnDataLoss": ["true", "false"],
    "onCorruptAggregate": ["passThrough", "fail"],
    "retryMode": ["legacy", "standard", "adaptive"],
    "maxAttempts": ["1", "10"],
    "connectTimeoutMs": ["1000", "5000"],
    "readTimeoutMs": ["1000", "30000"],
    "awsSecretKey": ["S3CR3T-abcdefgh-VALUE"],
    "sessionToken": ["S3CR3T-token-VALUE"],
    "roleArn": ["arn:aws:iam::123456789012:role/r"],
    "externalId": ["S3CR3T-external-VALUE"],
}
INVALID: dict[str, str] = {
    "startingPosition": "AT_TIMESTAMP:yesterday",
    "maxRecordsPerBatch": "-5",
    "shardAssigner": "nearest",
    "consumerType": "push",
    "fanOutRelay": "maybe",
    "failOnDataLoss": "perhaps",
    "retryMode": "eager",
    "maxAttempts": "0",
    "idlePollIntervalMs": "soon",
}
DRAWN: dict[str, int] = {"valid": 0, "wrong": 0}


@pytest.fixture(scope="module")
def drawn():
    """After the fuzz below: it really built valid configurations most of the time (a generator that
    ends in an error for nearly every example checks nearly nothing), and wrong ones too."""
    yield DRAWN
    total = DRAWN["valid"] + DRAWN["wrong"]
    assert total >= 100 and DRAWN["valid"] >= 0.6 * total and DRAWN["wrong"] >= 0.05 * total, DRAWN


BASE = {
    "streamName": "orders",
    "region": "eu-west-1",
    "endpointUrl": "http://127.0.0.1:1",
    "metadataPath": "/m",
}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(VALID)), st.integers(0, 3), max_size=10),
    st.one_of(st.none(), st.none(), st.none(), st.sampled_from(sorted(INVALID))),
)
def test_valid_configurations_parse_and_one_wrong_option_is_named(drawn, picks, wrong):
    """Drawn from values each option accepts, a configuration parses (with the options that go together
    given together); with one option given a value it refuses, the error names that option."""
    options = dict(BASE) | {k: VALID[k][i % len(VALID[k])] for k, i in picks.items()}
    if "awsSecretKey" in options or "sessionToken" in options:  # (the options that go together)
        options |= {"awsAccessKeyId": "AKIDEXAMPLE", "awsSecretKey": VALID["awsSecretKey"][0]}
    if "externalId" in options:
        options["roleArn"] = VALID["roleArn"][0]
    if wrong is not None:
        drawn["wrong"] += 1
        options[wrong] = INVALID[wrong]
        with pytest.raises(OptionError, match=f"Kinesis option '{wrong}'"):
            parse_options(options, streaming=True)
        check(lambda o: parse_options(o, streaming=True), options, SourceConfig)
        return
    config = parse_options(options, streaming=True)
    drawn["valid"] += 1
    assert isinstance(config, SourceConfig)
    for secret in secret_values(options):
        assert secret not in repr(config)
