"""Glue Schema Registry records: the wire format, Avro schemas as Spark/Arrow types, and records written
with two schema versions decoded into the reader's. Records are framed here by hand (the header as the
registry's serializers write it) and encoded by fastavro, independently of the code under test."""

from __future__ import annotations

import io
import uuid
import zlib

import fastavro
import orjson
import pyarrow as pa
import pytest

from pyspark_kinesis.errors import CorruptRecordError
from pyspark_kinesis.values import avro_types, glue_wire
from pyspark_kinesis.values.glue_values import GlueValues
from tests.unit.parser_words import orjson_words

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
V2 = {  # backward compatible: an optional field with a default added
    "type": "record",
    "name": "Order",
    "fields": [*V1["fields"], {"name": "qty", "type": ["null", "int"], "default": None}],
}
V1_ID, V2_ID = str(uuid.uuid4()), str(uuid.uuid4())
DEFINITIONS = {V1_ID: orjson.dumps(V1).decode(), V2_ID: orjson.dumps(V2).decode()}


def framed(version_id: str, schema: dict, record: dict, compress: bool = False) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    payload = zlib.compress(body.getvalue()) if compress else body.getvalue()
    return bytes([3, 5 if compress else 0]) + uuid.UUID(version_id).bytes + payload


def where(index: int) -> str:
    return f"stream 'orders', shard shardId-000000000000, row {index}"


def decoder(reader=V2_ID, **policy) -> GlueValues:
    return GlueValues(DEFINITIONS[reader], DEFINITIONS.__getitem__, **policy)


# -- the wire format ---------------------------------------------------------------------------------
def test_the_header_names_the_writer_version_and_zlib_bodies_inflate():
    body = b"\x02\x06abc"
    for compress in (False, True):
        payload = glue_wire.frame(V1_ID, body, compress=compress)
        assert payload[:2] == bytes([3, 5 if compress else 0]) and glue_wire.unframe(payload) == (V1_ID, body)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"\x03\x00short", "shorter than the 18-byte header"),
        (bytes([2, 0]) + bytes(16) + b"x", "header version 2"),
        (bytes([3, 7]) + bytes(16) + b"x", "compression byte 7"),
        (bytes([3, 5]) + bytes(16) + b"not zlib", "does not inflate"),
        (bytes([3, 5]) + bytes(16) + zlib.compress(bytes(range(200)))[:-7], "cut short"),
        (bytes([3, 5]) + bytes(16) + zlib.compress(b"\x02\x06abc") + b"more", "4 bytes follow the end"),
    ],
)
def test_payloads_not_framed_by_the_registry_are_refused(payload, words):
    with pytest.raises(glue_wire.WireError, match=words):
        glue_wire.unframe(payload)


# -- Avro schemas as column types ----------------------------------------------------------------------
def test_an_avro_record_maps_to_a_spark_struct():
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "double"}},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A"]}},
            {
                "name": "next",
                "type": ["null", {"type": "record", "name": "N", "fields": [{"name": "x", "type": "int"}]}],
            },
            {"name": "again", "type": ["null", "N"]},
        ],
    }
    spark = avro_types.spark_type(avro_types.parse(schema))
    assert spark.simpleString() == (
        "struct<at:timestamp,day:date,price:decimal(9,2),tags:array<string>,attrs:map<string,double>,"
        "kind:string,next:struct<x:int>,again:struct<x:int>>"
    )
    arrow = avro_types.AvroValues(avro_types.parse(schema)).arrow
    assert arrow.field("at").type == pa.timestamp("us", tz="UTC")


def test_a_union_of_several_types_is_an_error_naming_the_field():
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "either", "type": ["null", "int", "string"]}],
    }
    with pytest.raises(avro_types.UnsupportedSchema, match=r"value.either: a union of int, string"):
        avro_types.spark_type(avro_types.parse(schema))


# -- decoding across versions --------------------------------------------------------------------------
def test_records_of_two_versions_decode_into_the_readers_schema():
    data = pa.array(
        [
            framed(V1_ID, V1, {"id": 1, "item": "a"}),
            framed(V2_ID, V2, {"id": 2, "item": "b", "qty": 3}, compress=True),
        ],
        type=pa.binary(),
    )
    newer = decoder(V2_ID).decode(data, where)
    assert newer.values.to_pylist() == [{"id": 1, "item": "a", "qty": None}, {"id": 2, "item": "b", "qty": 3}]
    older = decoder(V1_ID).decode(data, where)  # a reader on the older version skips the added field
    assert older.values.to_pylist() == [{"id": 1, "item": "a"}, {"id": 2, "item": "b"}]
    assert newer.errors is None


def test_the_readers_own_version_is_decoded_without_schema_resolution():
    """fastavro skips resolution only when writer and reader are the very same object: the decoder
    must hand it its own reader schema for records of the reader's version (not an equal copy)."""
    values = decoder(V2_ID)
    assert values._writer(V2_ID) is values.codec.reader
    assert values._writer(V1_ID) is not values.codec.reader
    assert values._writer(V1_ID) is values._writer(V1_ID)  # parsed once per process


def test_a_version_the_reader_cannot_take_fails_naming_the_record_or_goes_to_the_error_column():
    other_id = str(uuid.uuid4())
    other = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "item", "type": "string"}],
    }  # no id, no default
    DEFINITIONS[other_id] = orjson.dumps(other).decode()
    data = pa.array([framed(other_id, other, {"item": "x"}), framed(V1_ID, V1, {"id": 5, "item": "y"})])
    with pytest.raises(CorruptRecordError, match=rf"row 0: written with schema version {other_id}"):
        decoder().decode(data, where)
    kept = decoder(on_error="column").decode(data, where)
    assert kept.values.to_pylist() == [None, {"id": 5, "item": "y", "qty": None}]
    errors = kept.errors.to_pylist()
    assert other_id in errors[0] and errors[1] is None


def test_a_registry_that_fails_for_a_while_fails_the_task_and_a_missing_version_is_the_records_error():
    """With onDecodeError=column, only a record's own content is a decode error. A registry that is
    throttling (or unreachable, or refusing a credentials refresh) for the moment fails the batch's task
    (Spark retries it, and the record then decodes); a version the registry does not have is the
    record's error, kept in valueError."""
    from pyspark_kinesis.errors import SchemaVersionNotFoundError, StreamAccessError

    unknown_id = str(uuid.uuid4())
    answers = {"throttled": True}

    def registry(version_id: str) -> str:
        if version_id == unknown_id:
            raise SchemaVersionNotFoundError(f"schema version {version_id}: it is not registered there")
        if answers["throttled"]:
            raise StreamAccessError(
                "AWS Glue Schema Registry: the registry did not answer (ThrottlingException)"
            )
        return DEFINITIONS[version_id]

    values = GlueValues(DEFINITIONS[V2_ID], registry, on_error="column")
    data = pa.array(
        [framed(V1_ID, V1, {"id": 5, "item": "y"}), framed(unknown_id, V1, {"id": 6, "item": "z"})]
    )
    with pytest.raises(StreamAccessError, match="ThrottlingException"):
        values.decode(data, where)
    answers["throttled"] = False  # the task's retry
    kept = values.decode(data, where)
    assert kept.values.to_pylist() == [{"id": 5, "item": "y", "qty": None}, None]
    errors = kept.errors.to_pylist()
    assert errors[0] is None and "not registered there" in errors[1]


def test_the_registrys_not_found_answer_is_the_only_record_level_failure():
    from botocore.exceptions import ClientError, EndpointConnectionError

    from pyspark_kinesis.aws.glue_registry import _failure
    from pyspark_kinesis.config.aws_settings import AwsSettings
    from pyspark_kinesis.errors import SchemaVersionNotFoundError

    settings = AwsSettings("eu-west-1")

    def client_error(code: str) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "m"}}, "GetSchemaVersion")

    assert isinstance(
        _failure(client_error("EntityNotFoundException"), "v", settings), SchemaVersionNotFoundError
    )
    for exc in (
        client_error("ThrottlingException"),
        client_error("AccessDeniedException"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ):
        assert not isinstance(_failure(exc, "v", settings), SchemaVersionNotFoundError)


def test_records_without_the_header_fail_or_pass_as_asked():
    data = pa.array([b'{"plain": "json"}', framed(V1_ID, V1, {"id": 1, "item": "a"})])
    with pytest.raises(CorruptRecordError, match="row 0: no Glue Schema Registry header"):
        decoder().decode(data, where)
    passed = decoder(without_header="pass").decode(data, where)
    assert passed.values.to_pylist() == [None, {"id": 1, "item": "a", "qty": None}]


# -- the sink's side ---------------------------------------------------------------------------------
def test_the_encoder_frames_what_fastavro_and_the_decoder_read_back():
    from pyspark_kinesis.values.glue_encode import ValueDoesNotFit, encoder

    encoder = encoder("AVRO", DEFINITIONS[V2_ID], V2_ID)
    assert encoder.field_names == ["id", "item", "qty"]
    payload = encoder.encode({"id": 7, "item": "x", "qty": None})
    assert payload[:2] == bytes([3, 0]) and str(uuid.UUID(bytes=payload[2:18])) == V2_ID
    body = fastavro.schemaless_reader(io.BytesIO(payload[18:]), fastavro.parse_schema(V2))
    assert body == {"id": 7, "item": "x", "qty": None}
    older = decoder(V1_ID).decode(pa.array([payload], type=pa.binary()), where)  # read into version 1
    assert older.values.to_pylist() == [{"id": 7, "item": "x"}]
    with pytest.raises(ValueDoesNotFit, match="id"):
        encoder.encode({"id": "seven", "item": "x", "qty": None})
    with pytest.raises(ValueDoesNotFit, match="no value and no default for item"):
        encoder.encode({"id": 1})


def test_a_record_that_does_not_decode_is_named_with_its_version_and_the_policy_to_keep_it():
    other_id = str(uuid.uuid4())
    other = {"type": "record", "name": "Order", "fields": [{"name": "item", "type": "string"}]}
    DEFINITIONS[other_id] = orjson.dumps(other).decode()
    data = pa.array([None, framed(other_id, other, {"item": "x"})])
    with pytest.raises(CorruptRecordError) as failed:
        decoder().decode(data, where)
    text = str(failed.value)
    assert text.startswith(
        f"{where(1)}: written with schema version {other_id}, it does not decode into the reader's schema ("
    )
    assert text.endswith(
        "). Set onDecodeError=column to keep such records as raw bytes with the reason in valueError."
    )
    kept = decoder(on_error="column").decode(data, where)
    assert kept.errors is not None and kept.errors.to_pylist()[0] is None
    assert kept.errors.to_pylist()[1] == text[len(where(1)) + 2 : text.index(". Set onDecodeError")]


def test_a_registered_definition_that_does_not_parse_is_the_records_error():
    broken_id = str(uuid.uuid4())
    values = GlueValues(
        DEFINITIONS[V2_ID], {**DEFINITIONS, broken_id: "{not json"}.__getitem__, on_error="column"
    )
    kept = values.decode(pa.array([framed(broken_id, V1, {"id": 1, "item": "a"})]), where)
    assert kept.values.to_pylist() == [None]
    (error,) = kept.errors.to_pylist()
    assert error == orjson_words("{not json")  # (the parser's words)


def test_the_error_column_is_text_even_when_every_record_decodes():
    kept = decoder(on_error="column").decode(pa.array([framed(V1_ID, V1, {"id": 1, "item": "a"})]), where)
    assert kept.errors is not None and kept.errors.type == pa.string() and kept.errors.to_pylist() == [None]
    assert decoder().decode(pa.array([framed(V1_ID, V1, {"id": 1, "item": "a"})]), where).errors is None


def test_avro_is_the_default_format():
    assert isinstance(GlueValues(DEFINITIONS[V1_ID], DEFINITIONS.__getitem__).codec, avro_types.AvroValues)


def test_json_records_with_nulls_and_unframed_ones_decode_as_one_batch_in_their_rows():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    version = str(uuid.uuid4())
    lookup = {version: orjson.dumps(schema).decode()}.__getitem__
    values = GlueValues(lookup(version), lookup, on_error="column", without_header="pass", data_format="JSON")

    def json_framed(doc: dict) -> bytes:
        return bytes([3, 0]) + uuid.UUID(version).bytes + orjson.dumps(doc)

    data = pa.array([json_framed({"n": 1}), None, b'{"n": 9}', json_framed({"n": 3})], type=pa.binary())
    kept = values.decode(data, where)
    assert kept.values.to_pylist() == [{"n": 1}, None, None, {"n": 3}]
    assert kept.errors is not None and kept.errors.type == pa.string()
    assert kept.errors.to_pylist() == [None] * 4
