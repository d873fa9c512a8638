"""The AWS Glue Schema Registry, as the connector uses it: the reader's schema version when a query is
planned, and each writer's version (named by the UUID in a record's header) once per executor process.

Schema versions are immutable once registered, so a version fetched is kept for the process's life;
a UUID the registry does not know is an error naming it (a record framed for another registry or
account), never retried forever.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..config.aws_settings import AwsSettings
from ..errors import StreamAccessError
from .client import glue_client
from .errors import error_code

_lock = threading.Lock()
_versions: dict[tuple[AwsSettings, str | None, str], RegisteredSchema] = {}


@dataclass(frozen=True)
class RegisteredSchema:
    """One registered schema version."""

    version_id: str  # the SchemaVersionId (a UUID): what record headers name
    data_format: str  # AVRO | JSON | PROTOBUF
    definition: str
    version_number: int = 0


@dataclass(frozen=True)
class RegistryRef:
    """How the options name the reader's schema: a version id, or a registry and schema name (with a
    version number, or the latest version)."""

    version_id: str | None = None
    registry: str | None = None
    schema: str | None = None
    version_number: int | None = None

    def describe(self) -> str:
        if self.version_id:
            return f"schema version {self.version_id}"
        which = f"version {self.version_number}" if self.version_number else "the latest version"
        return f"{which} of schema '{self.schema}' in registry '{self.registry}'"


def _answer(response: dict[str, Any]) -> RegisteredSchema:
    return RegisteredSchema(
        version_id=response["SchemaVersionId"],
        data_format=response.get("DataFormat", "AVRO"),
        definition=response["SchemaDefinition"],
        version_number=int(response.get("VersionNumber") or 0),
    )


def _failure(exc: Exception, what: str, settings: AwsSettings) -> StreamAccessError:
    code = error_code(exc) if isinstance(exc, ClientError) else ""
    if code == "EntityNotFoundException":
        hint = "it is not registered there (another registry, region or account?)"
    elif code in ("AccessDeniedException", "UnrecognizedClientException"):
        hint = "the credentials may not read it (glue:GetSchemaVersion, glue:GetSchemaByDefinition)"
    else:
        hint = f"the registry did not answer ({exc})"
    return StreamAccessError(f"AWS Glue Schema Registry in region '{settings.region}': {what}: {hint}")


def schema_version(settings: AwsSettings, endpoint_url: str | None, version_id: str) -> RegisteredSchema:
    """The version a record header names, fetched once per process."""
    key = (settings, endpoint_url, version_id)
    with _lock:
        found = _versions.get(key)
    if found is not None:
        return found
    try:
        found = _answer(glue_client(settings, endpoint_url).get_schema_version(SchemaVersionId=version_id))
    except (ClientError, BotoCoreError) as exc:
        raise _failure(exc, f"schema version {version_id}", settings) from None
    with _lock:
        _versions[key] = found
    return found


def reader_schema(settings: AwsSettings, endpoint_url: str | None, ref: RegistryRef) -> RegisteredSchema:
    """The reader's schema version as the options name it (the latest one is asked for anew)."""
    if ref.version_id:
        return schema_version(settings, endpoint_url, ref.version_id)
    number: dict[str, Any] = (
        {"VersionNumber": ref.version_number} if ref.version_number else {"LatestVersion": True}
    )
    try:
        response = glue_client(settings, endpoint_url).get_schema_version(
            SchemaId={"RegistryName": ref.registry, "SchemaName": ref.schema}, SchemaVersionNumber=number
        )
    except (ClientError, BotoCoreError) as exc:
        raise _failure(exc, ref.describe(), settings) from None
    return _answer(response)
