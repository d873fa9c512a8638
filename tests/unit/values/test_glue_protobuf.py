"""valueFormat=glue with Protobuf: a registered .proto compiled into a Spark type, records of two
versions (written here with the protobuf runtime's own message classes, framed by hand as the
registry's serializers frame them: header, message index varint, message bytes) decoded into the
reader's message, and records of another message or a broken body refused, never dropped."""

from __future__ import annotations

import datetime
import decimal
import uuid

import pyarrow as pa
import pytest
from google.protobuf import message_factory
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_kinesis.errors import CorruptRecordError
from pyspark_kinesis.values import protobuf_types
from pyspark_kinesis.values.avro_types import UnsupportedSchema
from pyspark_kinesis.values.glue_values import GlueValues

V1 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Audit { string who = 1; }
message Order {
  enum State { NEW = 0; PAID = 1; }
  message Line { string sku = 1; int32 qty = 2; }
  int64 id = 1;
  string item = 2;
  State state = 3;
  repeated Line lines = 4;
  map<string, int64> counts = 5;
  map<uint64, State> states = 11;
  google.protobuf.Timestamp at = 6;
  optional string note = 7;
  uint64 big = 8;
  bytes blob = 9;
}
"""
# Version 2: a field added (a reader of version 1 skips it), one removed (number 9 reserved).
V2 = V1.replace("  bytes blob = 9;\n", "  reserved 9;\n  string channel = 10;\n")
V1_ID, V2_ID = str(uuid.uuid4()), str(uuid.uuid4())
DEFINITIONS = {V1_ID: V1, V2_ID: V2}


def message_class(definition: str, name: str):
    compiled = protobuf_types.compile_proto(definition)
    return message_factory.GetMessageClass(compiled.pool.FindMessageTypeByName(name))


def framed(version_id: str, message, index: int) -> bytes:
    """Header version 3, no compression, the version's UUID, the index as a varint (< 128 here)."""
    return bytes([3, 0]) + uuid.UUID(version_id).bytes + bytes([index]) + message.SerializeToString()


def where(index: int) -> str:
    return f"stream 'orders', shard shardId-000000000000, row {index}"


def decoder(reader: str, **policy) -> GlueValues:
    return GlueValues(DEFINITIONS[reader], DEFINITIONS.__getitem__, data_format="PROTOBUF", **policy)


def order_v1():
    order = message_class(V1, "shop.Order")(id=7, item="pen", state=1, big=2**64 - 1, blob=b"\x00\x01")
    order.lines.add(sku="a", qty=2)
    order.counts["x"] = 3
    order.states[2**64 - 2] = 1
    order.at.FromDatetime(datetime.datetime(2026, 11, 25, 10, 0, 1, 500000))
    return order


def test_the_registrys_message_index_numbers_messages_by_full_name():
    compiled = protobuf_types.compile_proto(V1)
    assert compiled.indexed == (
        "shop.Audit",
        "shop.Order",
        "shop.Order.CountsEntry",
        "shop.Order.Line",
        "shop.Order.StatesEntry",
    )
    assert compiled.message(None).full_name == "shop.Audit"  # the first declared
    assert compiled.message("Order").full_name == compiled.message("shop.Order").full_name == "shop.Order"
    with pytest.raises(UnsupportedSchema, match="declares no message 'Nope'"):
        compiled.message("Nope")


def test_a_message_maps_to_a_spark_struct():
    compiled = protobuf_types.compile_proto(V1)
    assert protobuf_types.spark_type(compiled.message("Order")) == StructType(
        [
            StructField("id", LongType()),
            StructField("item", StringType()),
            StructField("state", StringType()),
            StructField(
                "lines",
                ArrayType(StructType([StructField("sku", StringType()), StructField("qty", IntegerType())])),
            ),
            StructField("counts", MapType(StringType(), LongType())),
            StructField("states", MapType(DecimalType(20, 0), StringType())),
            StructField("at", TimestampType()),
            StructField("note", StringType()),
            StructField("big", DecimalType(20, 0)),
            StructField("blob", BinaryType()),
        ]
    )


def test_records_of_two_versions_decode_into_the_readers_message():
    older = order_v1()
    newer = message_class(V2, "shop.Order")(id=8, item="ink", channel="web", note="gift")
    data = pa.array([framed(V1_ID, older, 1), framed(V2_ID, newer, 1), None], type=pa.binary())
    values = decoder(V1_ID, message="Order").decode(data, where).values.to_pylist()
    assert values[0] == {
        "id": 7,
        "item": "pen",
        "state": "PAID",
        "lines": [{"sku": "a", "qty": 2}],
        "counts": [("x", 3)],
        "at": datetime.datetime(2026, 11, 25, 10, 0, 1, 500000, tzinfo=datetime.UTC),
        "note": None,  # optional, unset: null (presence)
        "big": decimal.Decimal(2**64 - 1),
        "blob": b"\x00\x01",
        "states": [(decimal.Decimal(2**64 - 2), "PAID")],
    }
    # Version 2's record into version 1: `channel` skipped, `blob` (removed) at its default.
    assert values[1]["id"] == 8 and values[1]["note"] == "gift" and values[1]["blob"] == b""
    assert values[1]["at"] is None and values[1]["lines"] == [] and values[2] is None
    into_newer = decoder(V2_ID, message="shop.Order").decode(data[:1], where).values.to_pylist()
    assert into_newer[0]["channel"] == "" and "blob" not in into_newer[0] and into_newer[0]["id"] == 7


def test_a_record_of_another_message_or_a_broken_body_is_refused_naming_it():
    audit = message_class(V1, "shop.Audit")(who="me")
    broken = bytes([3, 0]) + uuid.UUID(V1_ID).bytes + bytes([1]) + b"\x0a\xff"
    data = pa.array([framed(V1_ID, audit, 0), framed(V1_ID, order_v1(), 9), broken], type=pa.binary())
    kept = decoder(V1_ID, message="Order", on_error="column").decode(data, where)
    assert kept.values.to_pylist() == [None, None, None]
    errors = kept.errors.to_pylist()
    assert "the record is a shop.Audit, and the reader's message is shop.Order" in errors[0]
    assert "message index 9, and the writer's .proto has 5 messages" in errors[1]
    assert f"written with schema version {V1_ID}" in errors[2]
    with pytest.raises(CorruptRecordError, match="row 0: written with schema version"):
        decoder(V1_ID, message="Order").decode(data, where)


def test_a_proto_that_does_not_compile_is_refused_with_protocs_words():
    with pytest.raises(UnsupportedSchema, match=r"protoc does not compile the registered \.proto: .*Tpye"):
        protobuf_types.compile_proto('syntax = "proto3"; message M { Tpye x = 1; }')


def test_the_message_index_is_a_varint():
    assert protobuf_types.message_index(bytes([0x05, 0xAA])) == (5, 1)
    assert protobuf_types.message_index(bytes([0x81, 0x01, 0xAA])) == (129, 2)
    with pytest.raises(ValueError, match="message index"):
        protobuf_types.message_index(b"\x80")


# -- the sink's side ---------------------------------------------------------------------------------
def test_the_protobuf_encoder_writes_what_the_runtime_and_both_versions_read_back():
    from pyspark_kinesis.values.glue_encode import encoder

    writer = encoder("PROTOBUF", V2, V2_ID, message="Order")
    assert writer.field_names[:3] == ["id", "item", "state"] and "channel" in writer.field_names
    at = datetime.datetime(2026, 11, 25, 10, 0, 1, 500000, tzinfo=datetime.UTC)
    value = {
        "id": 7,
        "item": "pen",
        "state": "PAID",
        "lines": [{"sku": "a", "qty": 2}],
        "counts": [("x", 3)],
        "states": [(decimal.Decimal(2**64 - 2), "NEW")],
        "at": at,
        "note": None,
        "big": decimal.Decimal(2**64 - 1),
        "channel": "web",
    }
    payload = writer.encode(value)
    assert payload[:2] == bytes([3, 0]) and str(uuid.UUID(bytes=payload[2:18])) == V2_ID
    assert payload[18] == 1  # shop.Order's index among the .proto's messages
    parsed = message_class(V2, "shop.Order").FromString(payload[19:])  # the runtime alone
    assert (parsed.id, parsed.item, parsed.state, parsed.channel, parsed.big) == (
        7,
        "pen",
        1,
        "web",
        2**64 - 1,
    )
    assert parsed.lines[0].qty == 2 and dict(parsed.counts) == {"x": 3} and not parsed.HasField("note")
    assert parsed.at.ToDatetime(tzinfo=datetime.UTC) == at
    data = pa.array([payload], type=pa.binary())
    (newer,) = decoder(V2_ID, message="Order").decode(data, where).values.to_pylist()
    assert {k: newer[k] for k in value} == value
    (older,) = decoder(V1_ID, message="Order").decode(data, where).values.to_pylist()
    assert older["id"] == 7 and older["state"] == "PAID" and "channel" not in older


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"id": "seven"}, "TypeError"),
        ({"state": "LOST"}, "state: 'LOST' is not a value of shop.Order.State"),
        ({"lines": [{"sku": 5}]}, "TypeError"),
    ],
)
def test_the_protobuf_encoder_refuses_a_value_the_message_does_not_take(value, words):
    from pyspark_kinesis.values.glue_encode import ValueDoesNotFit, encoder

    with pytest.raises(ValueDoesNotFit) as caught:
        encoder("PROTOBUF", V1, V1_ID, message="Order").encode(value)
    assert words in str(caught.value)
