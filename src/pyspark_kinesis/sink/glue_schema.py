"""valueFormat=glue on write: the schema version rows are encoded with, looked up (or registered) once
at query start, and the `value` column checked against it; executors build its encoder once per
process (`value_encoder`)."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql.types import StructType

from ..aws.glue_registry import (
    NewSchema,
    RegisteredSchema,
    RegistrationRefused,
    RegistryRef,
    SchemaName,
    reader_schema,
    register_version,
    schema_format,
    version_by_definition,
)
from ..errors import OptionError
from ..values.avro_types import UnsupportedSchema
from ..values.glue_encode import ENCODERS, GlueEncoder, encoder
from .options import SchemaToWrite, SinkConfig


def check_value_schema(schema: StructType, config: SinkConfig) -> None:
    """valueFormat=glue, once the schema version is known: the `value` struct has the record's fields."""
    if not config.value.decoded:
        return
    _fields_fit(schema, value_encoder(config), str(config.value.version_id))


def _fields_fit(schema: StructType, wanted: GlueEncoder, version: str) -> None:
    given = [f.name for f in schema["value"].dataType.fields]  # type: ignore[attr-defined]
    missing = [n for n in wanted.field_names if n not in given]
    extra = [n for n in given if n not in wanted.field_names]
    if missing or extra:
        raise OptionError(
            "valueFormat",
            f"column 'value' does not have the fields of {version}"
            + (f": missing {', '.join(missing)}" if missing else "")
            + (f"; not in the schema: {', '.join(extra)}" if extra else ""),
            "Build the struct with exactly the schema's fields (null for optional ones).",
        )


_ENCODERS: dict[tuple[str, str, str | None], GlueEncoder] = {}  # per process: (version, definition, message)


def value_encoder(config: SinkConfig) -> GlueEncoder:
    """The encoder of the version looked up at query start, built once per executor process."""
    value = config.value
    assert value.reader_definition is not None and value.version_id is not None, "looked up at query start"
    key = (value.version_id, value.reader_definition, value.message)
    if key not in _ENCODERS:
        _ENCODERS[key] = encoder(value.data_format, value.reader_definition, value.version_id, value.message)
    return _ENCODERS[key]


def with_schema_version(config: SinkConfig, schema: StructType) -> SinkConfig:
    """valueFormat=glue: the schema version the options name, looked up (or, with
    schemaAutoRegistration, registered) once at query start with the sink's region and credentials,
    so that every task writes the same version."""
    value = config.value
    if not value.decoded:
        return config
    if config.write_schema is not None:
        found = _version_of_definition(config, config.write_schema, schema)
        option, described = (
            "schemaDefinition",
            f"the version of schema '{value.schema}' with schemaDefinition",
        )
    else:
        ref = RegistryRef(value.version_id, value.registry, value.schema, value.version_number)
        found = reader_schema(config.aws, value.endpoint_url, ref)
        option = "schemaVersionId" if value.version_id else "schemaName"
        described = ref.describe()
    if found.data_format not in ENCODERS:
        raise OptionError(
            option,
            f"{described} is a {found.data_format} schema; the sink writes "
            f"{' and '.join(sorted(ENCODERS))} schemas only",
            "Name an Avro, JSON or Protobuf schema version, or write bytes you encoded yourself with valueFormat=raw.",
        )
    resolved = replace(
        config,
        value=replace(
            value,
            reader_definition=found.definition,
            version_id=found.version_id,
            data_format=found.data_format,
        ),
    )
    try:
        value_encoder(resolved)
    except UnsupportedSchema as exc:
        raise OptionError(
            option, f"{described}: {exc}", "Change the schema, or write with valueFormat=raw."
        ) from None
    return resolved


_UNREGISTERED = "00000000-0000-0000-0000-000000000000"  # a definition checked before it has a version


def _version_of_definition(config: SinkConfig, wanted: SchemaToWrite, schema: StructType) -> RegisteredSchema:
    """The version of schemaName whose definition is schemaDefinition; with schemaAutoRegistration,
    registered first when no version has it (the definition, and the `value` column's fields against
    it, are checked here before the registry sees it: what the sink could not write is never
    registered)."""
    value = config.value
    assert value.registry and value.schema, "parse_value_format requires them beside schemaDefinition"
    name = SchemaName(value.registry, value.schema)
    found = version_by_definition(config.aws, value.endpoint_url, name, wanted.definition)
    if found is not None:
        return found
    if not wanted.register:
        raise OptionError(
            "schemaDefinition",
            f"no version of {name.describe()} has this definition",
            "Register it, or let the sink register it (schemaAutoRegistration=true), or name a "
            "registered version with schemaVersionNumber.",
        )
    existing = schema_format(config.aws, value.endpoint_url, name)
    if existing and wanted.data_format and existing != wanted.data_format:
        raise OptionError(
            "schemaDataFormat",
            f"{name.describe()} exists with data format {existing}, not {wanted.data_format}",
            "Remove schemaDataFormat, or write to another schemaName.",
        )
    data_format = existing or wanted.data_format or "AVRO"
    try:
        local = encoder(data_format, wanted.definition, _UNREGISTERED, value.message)
    except (UnsupportedSchema, ValueError, KeyError) as exc:
        raise OptionError(
            "schemaDefinition",
            f"not a {data_format} schema the sink can write ({exc}); nothing was registered",
            "Fix the definition" + ("" if existing else ", or set schemaDataFormat to its format") + ".",
        ) from None
    _fields_fit(schema, local, "schemaDefinition (nothing was registered)")
    create = None if existing else NewSchema(data_format, wanted.compatibility)
    try:
        return register_version(config.aws, value.endpoint_url, name, wanted.definition, create)
    except RegistrationRefused as exc:
        raise OptionError(
            "schemaDefinition",
            str(exc),
            "Change the definition to one the schema's compatibility mode accepts (e.g. add optional "
            "fields with defaults), or write to another schemaName.",
        ) from None
