"""`valueFormat=glue`: records framed by the AWS Glue Schema Registry's serializers (a header naming
the schema version, then Avro, JSON or Protobuf), decoded into a registered schema on read and
encoded with one on write (`values` holds the codecs, `aws.glue_registry` the registry's API).

Reading: the reader's schema is looked up where Spark asks for the schema (`.load()`) and again where
it makes the reader; the two must agree (a "latest version" registered in between would give the
tasks another shape than the plan), or the query fails with a clear error (`source.value_columns`
compares them). The reader's definition then travels to the executors inside the config: every task
decodes into one version, writer versions looked up once per executor process.

Writing: the schema version rows are encoded with is looked up (or, with schemaAutoRegistration,
registered) once at query start, the `value` column checked against it; executors build its encoder
once per process.

The registry's modules load only when a query uses this format.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import DataType, StringType, StructField, StructType

from ..config.aws_settings import AwsSettings
from ..config.value_format import ValueFormat
from ..errors import OptionError
from .glue_options import (
    COLUMN,
    FLATTEN,
    READ_OPTIONS,
    WRITE_OPTIONS,
    GlueSettings,
    SchemaToWrite,
    parse_glue,
)

if TYPE_CHECKING:
    from ..aws.glue_registry import RegisteredSchema
    from ..values.glue_encode import GlueEncoder
    from ..values.glue_values import GlueValues

READS = ("AVRO", "JSON", "PROTOBUF")  # the registry's data formats the source decodes


class GlueCodec:
    """The Glue Schema Registry's framing (see the module docstring)."""

    payload_column = "value"
    read_options = READ_OPTIONS
    write_options = WRITE_OPTIONS

    def settings(self, opts: Mapping[str, str], *, writing: bool) -> GlueSettings:
        return parse_glue(opts, writing=writing)

    # -- reading ---------------------------------------------------------------------------------
    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat:
        """The reader's schema looked up (once: a value that has it is returned as it is)."""
        g = _glue(value)
        if g.reader_definition is not None:
            return value
        from ..aws import glue_registry
        from ..values.avro_types import UnsupportedSchema

        ref = glue_registry.RegistryRef(g.version_id, g.registry, g.schema, g.version_number)
        found = glue_registry.reader_schema(aws, g.endpoint_url, ref)
        option = "schemaVersionId" if g.version_id else "schemaName"
        if found.data_format not in READS:
            raise OptionError(
                option,
                f"{ref.describe()} is a {found.data_format} schema; the connector decodes AVRO, JSON and PROTOBUF",
                "Read the records with valueFormat=raw and decode data yourself.",
            )
        if g.message is not None and found.data_format != "PROTOBUF":
            raise OptionError(
                "protobufMessageName",
                f"applies to Protobuf schemas, and {ref.describe()} is {found.data_format}",
                "Remove it.",
            )
        resolved = replace(g, reader_definition=found.definition, data_format=found.data_format)
        try:
            _reader_type(resolved)
        except UnsupportedSchema as exc:
            raise OptionError(
                option, f"{ref.describe()}: {exc}", "Change the schema, or read with valueFormat=raw."
            ) from None
        return replace(value, settings=resolved)

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]:
        """The record (one struct column `value`, or its fields with valueColumns=flatten), then
        `valueError` with onDecodeError=column. `taken`: the Kinesis columns' names, in lower case."""
        g = _glue(value)
        decoded = _reader_type(g)
        fields: list[StructField] = []
        if g.columns == FLATTEN and isinstance(decoded, StructType):
            clash = [f.name for f in decoded.fields if f.name.lower() in taken | {"valueerror"}]
            if clash:
                raise OptionError(
                    "valueColumns",
                    f"flatten: the record's field {clash[0]} has the name of a Kinesis column",
                    "Use valueColumns=struct (the record in one column `value`).",
                )
            fields += decoded.fields
        else:
            fields.append(StructField("value", decoded))
        if g.on_error == COLUMN:
            fields.append(StructField("valueError", StringType()))
        return fields

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]:
        """The added columns of a batch of Kinesis columns, in `added_fields` order."""
        g = _glue(value)
        decoder = _decoder(g, aws)
        names, shards, seqs = (batch.column(n) for n in ("streamName", "shardId", "sequenceNumber"))

        def where(i: int) -> str:
            return f"Kinesis stream '{names[i]}', shard {shards[i]}, sequence number {seqs[i]}"

        decoded = decoder.decode(batch.column("data"), where)
        values = decoded.values
        arrays = values.flatten() if g.columns == FLATTEN and isinstance(values, pa.StructArray) else [values]
        if decoded.errors is not None:
            arrays.append(decoded.errors)
        return arrays

    # -- writing ---------------------------------------------------------------------------------
    def check_columns(self, fields: dict[str, DataType]) -> None:
        if "value" not in fields or not isinstance(fields["value"], StructType):
            raise OptionError(
                "valueFormat",
                "glue writes column 'value' (a struct of the schema's fields), and the DataFrame has "
                + (
                    "no 'value' column"
                    if "value" not in fields
                    else f"'value' as {fields['value'].simpleString()}"
                ),
                "Select the record as a struct: F.struct(...).alias('value').",
            )
        if "data" in fields:
            raise OptionError(
                "valueFormat",
                "glue writes column 'value', and the DataFrame has a 'data' column too",
                "Drop 'data'.",
            )

    def for_writing(self, value: ValueFormat, aws: AwsSettings, schema: StructType) -> ValueFormat:
        """The schema version the options name, looked up (or, with schemaAutoRegistration,
        registered) once at query start with the sink's region and credentials, so that every task
        writes the same version; the `value` column's fields checked against it."""
        from ..values.avro_types import UnsupportedSchema
        from ..values.glue_encode import ENCODERS

        g = _glue(value)
        if g.write is not None:
            found = _version_of_definition(g, aws, g.write, schema)
            option, described = (
                "schemaDefinition",
                f"the version of schema '{g.schema}' with schemaDefinition",
            )
        else:
            from ..aws.glue_registry import RegistryRef, reader_schema

            ref = RegistryRef(g.version_id, g.registry, g.schema, g.version_number)
            found = reader_schema(aws, g.endpoint_url, ref)
            option = "schemaVersionId" if g.version_id else "schemaName"
            described = ref.describe()
        if found.data_format not in ENCODERS:
            raise OptionError(
                option,
                f"{described} is a {found.data_format} schema; the sink writes "
                f"{' and '.join(sorted(ENCODERS))} schemas only",
                "Name an Avro, JSON or Protobuf schema version, or write bytes you encoded yourself with valueFormat=raw.",
            )
        resolved = replace(
            g,
            reader_definition=found.definition,
            version_id=found.version_id,
            data_format=found.data_format,
        )
        try:
            encoder = _encoder(resolved)
        except UnsupportedSchema as exc:
            raise OptionError(
                option, f"{described}: {exc}", "Change the schema, or write with valueFormat=raw."
            ) from None
        _fields_fit(schema, encoder, str(resolved.version_id))
        return replace(value, settings=resolved)

    def encoder(self, value: ValueFormat) -> GlueEncoder:
        """The encoder of the version looked up at query start, built once per executor process."""
        return _encoder(_glue(value))


def _glue(value: ValueFormat) -> GlueSettings:
    assert isinstance(value.settings, GlueSettings), "valueFormat=glue parses GlueSettings"
    return value.settings


_ENCODERS: dict[tuple[str, str, str | None], GlueEncoder] = {}  # per process: (version, definition, message)


def _encoder(g: GlueSettings) -> GlueEncoder:
    from ..values.glue_encode import encoder

    assert g.reader_definition is not None and g.version_id is not None, "looked up at query start"
    key = (g.version_id, g.reader_definition, g.message)
    if key not in _ENCODERS:
        _ENCODERS[key] = encoder(g.data_format, g.reader_definition, g.version_id, g.message)
    return _ENCODERS[key]


def _reader_type(g: GlueSettings) -> DataType:
    from ..values import json_types, protobuf_types
    from ..values.avro_types import parse, spark_type

    assert g.reader_definition is not None, "for_reading() first"
    if g.data_format == "JSON":
        return json_types.spark_type(json_types.parse(g.reader_definition))
    if g.data_format == "PROTOBUF":
        compiled = protobuf_types.compile_proto(g.reader_definition)
        return protobuf_types.spark_type(compiled.message(g.message))
    return spark_type(parse(g.reader_definition))


@functools.lru_cache(maxsize=8)
def _decoder(g: GlueSettings, aws: Any) -> GlueValues:
    """One decoder per reader schema and executor process (writer versions cached inside)."""
    from ..aws import glue_registry
    from ..values.glue_values import GlueValues

    assert g.reader_definition is not None
    return GlueValues(
        g.reader_definition,
        lambda version: glue_registry.schema_version(aws, g.endpoint_url, version).definition,
        g.on_error,
        g.without_header,
        g.data_format,
        g.message,
    )


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


_UNREGISTERED = "00000000-0000-0000-0000-000000000000"  # a definition checked before it has a version


def _version_of_definition(
    g: GlueSettings, aws: AwsSettings, wanted: SchemaToWrite, schema: StructType
) -> RegisteredSchema:
    """The version of schemaName whose definition is schemaDefinition; with schemaAutoRegistration,
    registered first when no version has it (the definition, and the `value` column's fields against
    it, are checked here before the registry sees it: what the sink could not write is never
    registered)."""
    from ..aws.glue_registry import (
        NewSchema,
        RegistrationRefused,
        SchemaName,
        register_version,
        schema_format,
        version_by_definition,
    )
    from ..values.avro_types import UnsupportedSchema
    from ..values.glue_encode import encoder

    assert g.registry and g.schema, "parse_glue requires them beside schemaDefinition"
    name = SchemaName(g.registry, g.schema)
    found = version_by_definition(aws, g.endpoint_url, name, wanted.definition)
    if found is not None:
        return found
    if not wanted.register:
        raise OptionError(
            "schemaDefinition",
            f"no version of {name.describe()} has this definition",
            "Register it, or let the sink register it (schemaAutoRegistration=true), or name a "
            "registered version with schemaVersionNumber.",
        )
    existing = schema_format(aws, g.endpoint_url, name)
    if existing and wanted.data_format and existing != wanted.data_format:
        raise OptionError(
            "schemaDataFormat",
            f"{name.describe()} exists with data format {existing}, not {wanted.data_format}",
            "Remove schemaDataFormat, or write to another schemaName.",
        )
    data_format = existing or wanted.data_format or "AVRO"
    try:
        local = encoder(data_format, wanted.definition, _UNREGISTERED, g.message)
    except (UnsupportedSchema, ValueError, KeyError) as exc:
        raise OptionError(
            "schemaDefinition",
            f"not a {data_format} schema the sink can write ({exc}); nothing was registered",
            "Fix the definition" + ("" if existing else ", or set schemaDataFormat to its format") + ".",
        ) from None
    _fields_fit(schema, local, "schemaDefinition (nothing was registered)")
    create = None if existing else NewSchema(data_format, wanted.compatibility)
    try:
        return register_version(aws, g.endpoint_url, name, wanted.definition, create)
    except RegistrationRefused as exc:
        raise OptionError(
            "schemaDefinition",
            str(exc),
            "Change the definition to one the schema's compatibility mode accepts (e.g. add optional "
            "fields with defaults), or write to another schemaName.",
        ) from None
