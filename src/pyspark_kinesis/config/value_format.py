"""The `valueFormat` options, parsed without the network: `raw` (the bytes, in `data`), `glue` (framed by
the AWS Glue Schema Registry's serializers, decoded into a registered schema) or a format registered
with `formats.register_format`. What a format does with them is the format's (`formats`): glue's
reader schema version is looked up when the query is planned and then travels to the executors as its
definition, so every task decodes into the same version whatever the registry learns meanwhile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import OptionError
from .declared import Option
from .option_values import int_option

RAW, GLUE = "raw", "glue"
FORMAT_NAMES: list[str] = [RAW, GLUE]  # valueFormat's values (`formats.register_format` adds to it)
STRUCT, FLATTEN = "struct", "flatten"
FAIL, COLUMN, PASS = "fail", "column", "pass"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def schema_options(reading: bool) -> tuple[Option, ...]:
    """The registry's schema options, which the source reads records into and the sink writes them
    with (`parse_value_format` parses both); their doc lines say which way records go."""
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


VALUE_OPTIONS: tuple[Option, ...] = (
    Option(
        "valueFormat",
        "raw (the payload in data) | glue (AWS Glue Schema Registry framed records decoded into typed columns).",
        shown="raw",
    ),
    *schema_options(reading=True),
    Option(
        "valueColumns",
        "glue: struct (one column `value`) | flatten (the record's fields as top-level columns).",
        shown="struct",
    ),
    Option(
        "onDecodeError",
        "glue: fail (the task fails naming the record) | column (value null, the reason in valueError).",
        shown="fail",
    ),
    Option(
        "recordsWithoutHeader",
        "glue: fail | pass (a record without the registry's header: value null).",
        shown="fail",
    ),
)


@dataclass(frozen=True)
class ValueFormat:
    """The payload's format and, for glue, where its reader schema is registered."""

    format: str = RAW
    registry: str | None = None
    schema: str | None = None
    version_number: int | None = None
    version_id: str | None = None
    endpoint_url: str | None = None
    columns: str = STRUCT
    on_error: str = FAIL
    without_header: str = FAIL
    reader_definition: str | None = None  # the reader's schema, once looked up (see the module doc)
    data_format: str = "AVRO"  # the registered schema's DataFormat (AVRO | JSON | PROTOBUF), once looked up
    message: str | None = None  # Protobuf: the reader's message (protobufMessageName)


@dataclass(frozen=True)
class SchemaToWrite:
    """valueFormat=glue with schemaDefinition: rows are written with the version of schemaName whose
    definition this is, looked up (or registered) once at query start. Why by definition: a producer
    owns its schema as code, as the registry's own serializers assume; naming a version number would
    make every schema change a registry change made by hand first."""

    definition: str
    register: bool = False
    data_format: str | None = None  # schemaDataFormat, when given: the format of a schema created
    compatibility: str = "BACKWARD"


def choice(opts: Mapping[str, str], name: str, allowed: tuple[str, ...], upper: bool = False) -> str:
    """The option's value among `allowed` (the first by default), in the case `allowed` is written in."""
    value = (opts.get(name) or allowed[0]).strip()
    value = value.upper() if upper else value.lower()
    if value not in allowed:
        raise OptionError(
            name, f"'{value}' is not one of {', '.join(allowed)}", f"Use {' or '.join(allowed)}."
        )
    return value


def parse_value_format(opts: Mapping[str, str]) -> ValueFormat:
    fmt = choice(opts, "valueFormat", tuple(FORMAT_NAMES))
    glue_only = [o.key for o in VALUE_OPTIONS if o.key != "valueFormat" and o.key in opts]
    if fmt != GLUE:
        if glue_only:
            raise OptionError(
                glue_only[0], "applies to valueFormat=glue only", "Set valueFormat=glue, or remove it."
            )
        return ValueFormat(format=fmt)
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
    return ValueFormat(
        format=GLUE,
        registry=registry,
        schema=schema,
        version_number=int_option(opts, "schemaVersionNumber", None, 1),
        version_id=version_id.lower() if version_id else None,
        endpoint_url=endpoint,
        columns=choice(opts, "valueColumns", (STRUCT, FLATTEN)),
        on_error=choice(opts, "onDecodeError", (FAIL, COLUMN)),
        without_header=choice(opts, "recordsWithoutHeader", (FAIL, PASS)),
        message=(opts.get("protobufMessageName") or "").strip() or None,
    )
