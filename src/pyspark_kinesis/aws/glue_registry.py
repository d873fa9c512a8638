"""The AWS Glue Schema Registry, as the connector uses it: the reader's schema version when a query is
planned, and each writer's version (named by the UUID in a record's header) once per executor process;
for the sink, the version of a schema whose definition the options give, registered when asked to be
(as the registry's own serializers do with auto-registration).

Schema versions are immutable once registered, so a version fetched is kept for the process's life;
a UUID the registry does not know is an error naming it (a record framed for another registry or
account), never retried forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from ..config.aws_settings import AwsSettings
from ..errors import SchemaVersionNotFoundError, StreamAccessError
from .client import glue_client
from .error_kinds import error_code

T = TypeVar("T")
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
        hint = (
            "the credentials may not read it (glue:GetSchemaVersion, glue:GetSchemaByDefinition; to "
            "register: glue:GetSchema, glue:CreateSchema, glue:RegisterSchemaVersion)"
        )
    else:
        hint = f"the registry did not answer ({exc})"
    message = f"AWS Glue Schema Registry in region '{settings.region}': {what}: {hint}"
    return (
        SchemaVersionNotFoundError(message)
        if code == "EntityNotFoundException"
        else StreamAccessError(message)
    )


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


@dataclass(frozen=True)
class SchemaName:
    """A schema by its registry and name (what a definition is looked up and registered under)."""

    registry: str
    schema: str

    def schema_id(self) -> dict[str, str]:
        return {"RegistryName": self.registry, "SchemaName": self.schema}

    def describe(self) -> str:
        return f"schema '{self.schema}' in registry '{self.registry}'"


def _not_found(exc: ClientError) -> bool:
    return error_code(exc) == "EntityNotFoundException"


def _unless_missing(call: Callable[[], T], name: SchemaName, settings: AwsSettings) -> T | None:
    """`call`'s answer, or None when the registry has no such schema (or version)."""
    try:
        return call()
    except ClientError as exc:
        if _not_found(exc):
            return None
        raise _failure(exc, name.describe(), settings) from None
    except BotoCoreError as exc:
        raise _failure(exc, name.describe(), settings) from None


def version_by_definition(
    settings: AwsSettings, endpoint_url: str | None, name: SchemaName, definition: str
) -> RegisteredSchema | None:
    """The version of `name` whose definition is `definition`, once available; None when no version
    of it has that definition (or the schema does not exist)."""
    client = glue_client(settings, endpoint_url)
    found = _unless_missing(
        lambda: client.get_schema_by_definition(SchemaId=name.schema_id(), SchemaDefinition=definition),
        name,
        settings,
    )
    if found is None:
        return None
    return _available(settings, endpoint_url, found["SchemaVersionId"], found.get("Status"), name)


def schema_format(settings: AwsSettings, endpoint_url: str | None, name: SchemaName) -> str | None:
    """The DataFormat of schema `name`; None when the registry has no such schema."""
    client = glue_client(settings, endpoint_url)
    found = _unless_missing(lambda: client.get_schema(SchemaId=name.schema_id()), name, settings)
    return None if found is None else str(found["DataFormat"])


@dataclass(frozen=True)
class NewSchema:
    """How a schema the sink creates is registered (its first version is the definition written)."""

    data_format: str  # AVRO | JSON | PROTOBUF
    compatibility: str  # the registry's compatibility mode for later versions


class RegistrationRefused(Exception):
    """The registry did not take the definition as a version (its compatibility check refused it)."""


def register_version(
    settings: AwsSettings,
    endpoint_url: str | None,
    name: SchemaName,
    definition: str,
    create: NewSchema | None,
    wait_s: float = 60.0,
) -> RegisteredSchema:
    """`definition` registered as a version of `name` (with `create`, the schema created with it as
    its first version), once the registry has checked it: the registry returns an existing version
    with the same definition, so two writers registering at once get the same one."""
    client = glue_client(settings, endpoint_url)
    try:
        if create is not None:
            try:
                made = client.create_schema(
                    RegistryId={"RegistryName": name.registry},
                    SchemaName=name.schema,
                    DataFormat=create.data_format,
                    Compatibility=create.compatibility,
                    SchemaDefinition=definition,
                )
                return _available(
                    settings,
                    endpoint_url,
                    made["SchemaVersionId"],
                    made.get("SchemaVersionStatus"),
                    name,
                    wait_s,
                )
            except ClientError as exc:
                if error_code(exc) != "AlreadyExistsException":
                    raise
                # Another writer created the schema meanwhile: register beside it.
        made = client.register_schema_version(SchemaId=name.schema_id(), SchemaDefinition=definition)
    except (ClientError, BotoCoreError) as exc:
        raise _failure(exc, name.describe(), settings) from None
    return _available(settings, endpoint_url, made["SchemaVersionId"], made.get("Status"), name, wait_s)


def _available(
    settings: AwsSettings,
    endpoint_url: str | None,
    version_id: str,
    status: str | None,
    name: SchemaName,
    wait_s: float = 60.0,
) -> RegisteredSchema:
    """The version once the registry has made it AVAILABLE: a new version is PENDING while the
    registry checks its compatibility, then AVAILABLE or FAILURE."""
    deadline = time.monotonic() + wait_s
    client = glue_client(settings, endpoint_url)
    while status == "PENDING" and time.monotonic() < deadline:
        time.sleep(1.0)
        try:
            status = client.get_schema_version(SchemaVersionId=version_id).get("Status")
        except (ClientError, BotoCoreError) as exc:
            raise _failure(exc, f"schema version {version_id}", settings) from None
    if status not in (None, "AVAILABLE"):
        raise RegistrationRefused(
            f"{name.describe()}: version {version_id} is {status}"
            + (
                f" after {wait_s:.0f} s"
                if status == "PENDING"
                else " (the registry refused it: not compatible with the earlier versions under the "
                "schema's compatibility mode, or not a valid definition of its data format)"
            )
        )
    return schema_version(settings, endpoint_url, version_id)
