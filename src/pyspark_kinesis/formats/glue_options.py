"""`valueFormat=glue`'s own options and the settings parsed from them, without the network: where the
schema is registered, how the record becomes columns on read, and (sink) which definition to write
with. Declared here, beside the format, so that the source and the sink know them only through the
format registry (`formats.value_options`); the look-ups they name happen in `formats.glue`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..config.declared import BOOL, Option, by_key
from ..config.option_values import int_option
from ..config.value_format import choice
from ..errors import OptionError

STRUCT, FLATTEN = "struct", "flatten"
FAIL, COLUMN, PASS = "fail", "column", "pass"
DATA_FORMATS = ("AVRO", "JSON", "PROTOBUF")
COMPATIBILITIES = (
    "BACKWARD",
    "NONE",
    "DISABLED",
    "BACKWARD_ALL",
    "FORWARD",
    "FORWARD_ALL",
    "FULL",
    "FULL_ALL",
)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _schema_options(reading: bool) -> tuple[Option, ...]:
    """The registry's schema options, which the source reads records into and the sink writes them
    with; their doc lines say which way records go."""
    way, short = ("read records into", "read into") if reading else ("write records with", "write with")
    return (
        Option("schemaRegistryName", f"glue: the registry of the schema to {way} (with schemaName)."),
        Option("schemaName", f"glue: the schema to {way} (with schemaRegistryName)."),
        Option("schemaVersionNumber", f"glue: the version of schemaName to {short}.", shown="(the latest)"),
        Option("schemaVersionId", f"glue: the schema version (a UUID) to {short}, instead of a name."),
        Option(
            "schemaRegistryEndpointUrl",
            "glue: the Glue API endpoint (tests, VPC endpoints).",
            shown="(AWS's)",
        ),
        Option(
            "protobufMessageName",
            f"glue, Protobuf schemas: the message of the .proto to {way} (its full name or its name).",
            shown="(the first declared)",
        ),
    )


READ_OPTIONS: tuple[Option, ...] = (
    *_schema_options(reading=True),
    Option(
        "valueColumns",
        "glue: struct (one column `value`) | flatten (the record's fields as top-level columns).",
        default=STRUCT,
        choices=(STRUCT, FLATTEN),
        field="columns",
    ),
    Option(
        "onDecodeError",
        "glue: fail (the task fails naming the record) | column (value null, the reason in valueError).",
        default=FAIL,
        choices=(FAIL, COLUMN),
        field="on_error",
    ),
    Option(
        "recordsWithoutHeader",
        "glue: fail | pass (a record without the registry's header: value null).",
        default=FAIL,
        choices=(FAIL, PASS),
        field="without_header",
    ),
)
_READING = by_key(READ_OPTIONS)
_REGISTRATION: tuple[Option, ...] = (
    Option(
        "schemaDefinition",
        "glue: the schema's text (Avro schema, JSON Schema or .proto) to write with: the version of "
        "schemaName with this definition, instead of schemaVersionNumber/schemaVersionId.",
    ),
    Option(
        "schemaAutoRegistration",
        "glue, with schemaDefinition: register the definition as a new version of schemaName (creating "
        "the schema) when no version has it yet; the registry's compatibility check applies.",
        default=False,
        kind=BOOL,
        field="register",
    ),
    Option(
        "schemaDataFormat",
        "glue, schemaAutoRegistration: the data format of a schema the sink creates (AVRO | JSON | PROTOBUF).",
        shown="AVRO",
    ),
    Option(
        "schemaCompatibility",
        "glue, schemaAutoRegistration: the compatibility mode of a schema the sink creates (NONE | "
        "DISABLED | BACKWARD | BACKWARD_ALL | FORWARD | FORWARD_ALL | FULL | FULL_ALL).",
        default=COMPATIBILITIES[0],
        choices=COMPATIBILITIES,
        field="compatibility",
    ),
)
_WRITING = by_key(_REGISTRATION)
WRITE_OPTIONS: tuple[Option, ...] = (*_schema_options(reading=False), *_REGISTRATION)


@dataclass(frozen=True)
class SchemaToWrite:
    """valueFormat=glue with schemaDefinition: rows are written with the version of schemaName whose
    definition this is, looked up (or registered) once at query start. Why by definition: a producer
    owns its schema as code, as the registry's own serializers assume; naming a version number would
    make every schema change a registry change made by hand first."""

    definition: str
    register: bool = False
    data_format: str | None = None  # schemaDataFormat, when given: the format of a schema created
    compatibility: str = _WRITING["schemaCompatibility"].default


@dataclass(frozen=True)
class GlueSettings:
    """Where the schema is registered and what to do with records; `reader_definition`,
    `data_format` and (sink) `version_id` are filled by the look-up at `.load()` / query start."""

    registry: str | None = None
    schema: str | None = None
    version_number: int | None = None
    version_id: str | None = None
    endpoint_url: str | None = None
    # (the defaults: the options' declarations above)
    columns: str = _READING["valueColumns"].default
    on_error: str = _READING["onDecodeError"].default
    without_header: str = _READING["recordsWithoutHeader"].default
    reader_definition: str | None = None  # the schema's definition, once looked up
    data_format: str = "AVRO"  # the registered schema's DataFormat (AVRO | JSON | PROTOBUF), once looked up
    message: str | None = None  # Protobuf: the message (protobufMessageName)
    write: SchemaToWrite | None = None  # sink, schemaDefinition: the definition to write with


def parse_glue(opts: Mapping[str, str], *, writing: bool) -> GlueSettings:
    """glue's settings from the folded options (the source's when not `writing`, else the sink's)."""
    version_id = (opts.get("schemaVersionId") or "").strip() or None
    registry = (opts.get("schemaRegistryName") or "").strip() or None
    schema = (opts.get("schemaName") or "").strip() or None
    if version_id is not None:
        if not _UUID.match(version_id):
            raise OptionError(
                "schemaVersionId",
                f"'{version_id}' is not a UUID",
                "Give the SchemaVersionId as Glue shows it.",
            )
        if registry or schema or "schemaVersionNumber" in opts:
            raise OptionError(
                "schemaVersionId",
                "cannot be combined with schemaRegistryName/schemaName/schemaVersionNumber",
                "Name the reader's schema one way: a version id, or a registry and schema name.",
            )
    elif not (registry and schema):
        raise OptionError(
            "schemaName" if registry else "schemaRegistryName",
            "missing: valueFormat=glue decodes records into a registered schema",
            "Set schemaRegistryName and schemaName (and schemaVersionNumber to pin a version), or schemaVersionId.",
        )
    endpoint = (opts.get("schemaRegistryEndpointUrl") or "").strip() or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise OptionError(
            "schemaRegistryEndpointUrl",
            f"'{endpoint}' is not an http(s) URL",
            "Write it like https://glue.eu-west-1.amazonaws.com.",
        )
    settings = GlueSettings(
        registry=registry,
        schema=schema,
        version_number=int_option(opts, "schemaVersionNumber", None, 1),
        version_id=version_id.lower() if version_id else None,
        endpoint_url=endpoint,
        columns=_READING["valueColumns"].parse(opts),
        on_error=_READING["onDecodeError"].parse(opts),
        without_header=_READING["recordsWithoutHeader"].parse(opts),
        message=(opts.get("protobufMessageName") or "").strip() or None,
    )
    if not writing:
        return settings
    return replace(settings, write=_schema_to_write(opts, settings))


def _schema_to_write(opts: Mapping[str, str], settings: GlueSettings) -> SchemaToWrite | None:
    given = [o.key for o in _REGISTRATION if o.key in opts]
    if not given:
        return None
    definition = opts.get("schemaDefinition") or ""
    if not definition.strip():
        raise OptionError(
            "schemaDefinition",
            f"missing or empty{f' ({given[0]} needs it)' if given[0] != 'schemaDefinition' else ''}",
            "Give the schema's text (an Avro schema, a JSON Schema or a .proto) to write with.",
        )
    if settings.version_id or settings.version_number:
        raise OptionError(
            "schemaDefinition",
            "cannot be combined with schemaVersionId/schemaVersionNumber: the definition names the version",
            "Name the version one way: remove schemaVersionId/schemaVersionNumber, or schemaDefinition.",
        )
    register = _WRITING["schemaAutoRegistration"].parse(opts)
    for name in ("schemaDataFormat", "schemaCompatibility"):
        if name in opts and not register:
            raise OptionError(
                name,
                "describes a schema the sink creates, and applies with schemaAutoRegistration=true only",
                "Set schemaAutoRegistration=true, or remove it.",
            )
    return SchemaToWrite(
        definition=definition,
        register=register,
        data_format=choice(opts, "schemaDataFormat", DATA_FORMATS, upper=True)
        if "schemaDataFormat" in opts
        else None,
        compatibility=choice(opts, "schemaCompatibility", COMPATIBILITIES, upper=True),  # (default first)
    )
