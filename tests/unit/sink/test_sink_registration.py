"""The sink's schemaDefinition options, parsed at query start, and the registry's answer to a new
version waited for: PENDING while the registry checks compatibility, then AVAILABLE, or FAILURE (moto's
registry makes every version AVAILABLE at once, so a scripted registry plays the other answers; the
integration test test_glue_registration runs the rest against moto)."""

from __future__ import annotations

from typing import Any

import pytest

from pyspark_kinesis.aws import glue_registry
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.formats.glue_options import SchemaToWrite
from pyspark_kinesis.sink.options import parse_sink_options

BASE = {
    "streamName": "s",
    "region": "us-east-1",
    "valueFormat": "glue",
    "schemaRegistryName": "r",
    "schemaName": "payments",
}
AVRO = '{"type": "record", "name": "P", "fields": [{"name": "id", "type": "long"}]}'


def test_a_definition_with_registration_parses_with_its_defaults() -> None:
    config = parse_sink_options({**BASE, "schemaDefinition": AVRO, "schemaAutoRegistration": "true"})
    assert config.value.settings.write == SchemaToWrite(
        AVRO, register=True, data_format=None, compatibility="BACKWARD"
    )
    config = parse_sink_options(
        {
            **BASE,
            "schemaDefinition": AVRO,
            "schemaAutoRegistration": "true",
            "schemaDataFormat": "json",
            "schemaCompatibility": "full_all",
        }
    )
    assert config.value.settings.write == SchemaToWrite(AVRO, True, "JSON", "FULL_ALL")
    assert parse_sink_options(BASE).value.settings.write is None


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"schemaAutoRegistration": "true"}, "schemaDefinition", "schemaAutoRegistration needs it"),
        ({"schemaDefinition": "  "}, "schemaDefinition", "missing or empty"),
        ({"schemaDefinition": AVRO, "schemaVersionNumber": "2"}, "schemaDefinition", "cannot be combined"),
        (
            {"schemaDefinition": AVRO, "schemaDataFormat": "JSON"},
            "schemaDataFormat",
            "schemaAutoRegistration=true only",
        ),
        (
            {"schemaDefinition": AVRO, "schemaCompatibility": "FULL"},
            "schemaCompatibility",
            "schemaAutoRegistration=true only",
        ),
        (
            {"schemaDefinition": AVRO, "schemaAutoRegistration": "true", "schemaDataFormat": "XML"},
            "schemaDataFormat",
            "'XML' is not one of",
        ),
        (
            {"schemaDefinition": AVRO, "schemaAutoRegistration": "true", "schemaCompatibility": "SOME"},
            "schemaCompatibility",
            "not one of",
        ),
        ({"schemaDefinition": AVRO, "schemaAutoRegistration": "maybe"}, "schemaAutoRegistration", ""),
        ({"valueFormat": "raw", "schemaDefinition": AVRO}, "schemaRegistryName", "valueFormat=glue only"),
    ],
)
def test_bad_registration_options_are_refused_naming_the_option(
    options: dict[str, str], option: str, words: str
) -> None:
    with pytest.raises(OptionError) as caught:
        parse_sink_options({**BASE, **options})
    assert f"'{option}'" in str(caught.value) and words in str(caught.value)


class ScriptedRegistry:
    """Answers GetSchemaVersion with the statuses given, one per call, then the version itself."""

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses
        self.calls = 0

    def get_schema_version(self, SchemaVersionId: str) -> dict[str, Any]:
        self.calls += 1
        status = self.statuses.pop(0) if self.statuses else "AVAILABLE"
        return {
            "SchemaVersionId": SchemaVersionId,
            "Status": status,
            "DataFormat": "AVRO",
            "SchemaDefinition": AVRO,
        }


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch):
    def install(statuses: list[str]) -> ScriptedRegistry:
        registry = ScriptedRegistry(statuses)
        monkeypatch.setattr(glue_registry, "glue_client", lambda *_a, **_k: registry)
        monkeypatch.setattr(glue_registry.time, "sleep", lambda _s: None)
        monkeypatch.setattr(glue_registry, "_versions", {})
        return registry

    return install


NAME = glue_registry.SchemaName("r", "payments")
SETTINGS = AwsSettings(region="us-east-1")


def test_a_pending_version_is_waited_for_until_available(scripted) -> None:
    registry = scripted(["PENDING", "PENDING", "AVAILABLE"])
    found = glue_registry._available(SETTINGS, None, "v-1", "PENDING", NAME)
    assert found.version_id == "v-1" and found.definition == AVRO
    assert registry.calls == 4  # three polls, then the version's definition


def test_a_version_the_registry_refuses_is_an_error_naming_why(scripted) -> None:
    scripted(["FAILURE"])
    with pytest.raises(glue_registry.RegistrationRefused) as caught:
        glue_registry._available(SETTINGS, None, "v-2", "PENDING", NAME)
    assert "version v-2 is FAILURE" in str(caught.value) and "not compatible" in str(caught.value)


def test_a_version_pending_past_the_wait_is_an_error(scripted) -> None:
    scripted(["PENDING"] * 5)
    with pytest.raises(glue_registry.RegistrationRefused) as caught:
        glue_registry._available(SETTINGS, None, "v-3", "PENDING", NAME, wait_s=0.0)
    assert "version v-3 is PENDING after 0 s" in str(caught.value)
