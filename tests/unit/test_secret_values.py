"""No secret option's value reaches an error message or a log line, whatever JSON type it was given
as: each secret option of the source (top level and in `streams` entries) and of the sink gets bad
values of every kind, and every message and log record is searched for them."""

from __future__ import annotations

import json
import logging

import pytest

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.sink.options import parse_sink_options, sink_options
from pyspark_kinesis.source.options import known_options, parse_options

# The options declared secret (`config.declared.Option.secret`), the source's and the sink's.
SECRET_OPTIONS = {o.key for o in (*known_options().values(), *sink_options().values()) if o.secret}

# Each value is found by a search for its text: numbers of many digits, strings that occur nowhere else.
VALUES = [
    98765432101234,
    -1234567.891011,
    ["SeCrEt-in-a-list-9f2"],
    {"k": "SeCrEt-in-an-object-7c1"},
    "SeCrEt-plain-string-4a8",
    "98765432101234",
    '{"not": "SeCrEt-json-text-3b5"',
    True,
    None,
]
SPELLINGS = ["98765432101234", "1234567.891011", "9f2", "7c1", "4a8", "3b5"]


def text_of(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def outcome(parse, options: dict[str, str], caplog) -> str:
    """Every word the parse showed: its error's message, or nothing, and the log records."""
    caplog.clear()
    try:
        parse(options)
        message = ""
    except OptionError as exc:
        message = str(exc)
    return message + "\n" + "\n".join(r.getMessage() for r in caplog.records)


def test_the_secrets_are_the_credentials_the_role_s_external_id_and_the_storage_options():
    assert {
        "awsAccessKeyId",
        "awsSecretKey",
        "sessionToken",
        "externalId",
        "metadataStorageOptions",
    } == SECRET_OPTIONS


def assert_hidden(words: str) -> None:
    for spelling in SPELLINGS:
        assert spelling not in words, f"a secret's value ({spelling}) was shown: {words}"


@pytest.mark.parametrize("value", VALUES, ids=repr)
@pytest.mark.parametrize("option", sorted(SECRET_OPTIONS))
def test_top_level_secret_options_never_show_their_value(option, value, caplog):
    caplog.set_level(logging.DEBUG)
    base = {"streamName": "orders", "metadataPath": "/m", "awsAccessKeyId": "A", "awsSecretKey": "B"}
    options = base | {option: text_of(value)}
    assert_hidden(outcome(lambda o: parse_options(o, streaming=True), options, caplog))
    if option != "metadataStorageOptions":
        sink = {"streamName": "out", "awsAccessKeyId": "A", "awsSecretKey": "B", option: text_of(value)}
        assert_hidden(outcome(parse_sink_options, sink, caplog))


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_streams_entrys_external_id_never_shows_its_value(value, caplog):
    """The entry is JSON, so the value arrives with its own type (a number was echoed before)."""
    caplog.set_level(logging.DEBUG)
    entry = {"streamName": "orders", "roleArn": "arn:aws:iam::123456789012:role/r", "externalId": value}
    options = {"streams": json.dumps([entry]), "metadataPath": "/m"}
    words = outcome(lambda o: parse_options(o, streaming=True), options, caplog)
    assert_hidden(words)
    if not isinstance(value, str):
        assert "streams[0].externalId" in words and "not a string" in words
