"""Protobuf schemas as Spark types and the registry's message index (src/pyspark_kinesis/values/
protobuf_types.py), beside test_glue_protobuf.py's records: every refusal word for word with the path
of the field it names, the nesting bound, and the scalar and well-known types' edge values."""

from __future__ import annotations

import datetime
import decimal

import pytest
from google.protobuf import message_factory
from pyspark.sql.types import DecimalType, StructField, StructType

from pyspark_kinesis.values import protobuf_types
from pyspark_kinesis.values.avro_types import UnsupportedSchema
from pyspark_kinesis.values.protobuf_types import MAX_DEPTH, compile_proto, message_index, spark_type

SHOP = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Empty {}
message Node { Node next = 1; }
message Holder {
  Empty single = 1;
  repeated Empty many = 2;
  map<string, Empty> keyed = 3;
}
message Scalars {
  enum State { NEW = 0; PAID = 1; }
  fixed64 f64 = 1;
  uint64 u64 = 2;
  State state = 3;
  map<string, State> states = 4;
  google.protobuf.Timestamp at = 5;
  repeated int32 numbers = 6;
}
"""


def compiled():
    return compile_proto(SHOP)


def test_a_message_nested_deeper_than_the_bound_is_refused_naming_the_path():
    with pytest.raises(UnsupportedSchema) as refused:
        spark_type(compiled().message("Node"))
    assert str(refused.value) == (
        f"value{'.next' * (MAX_DEPTH + 1)}: nested deeper than {MAX_DEPTH} levels (a recursive message?)"
    )


@pytest.mark.parametrize("field", ["single", "many", "keyed"])
def test_a_message_without_fields_is_refused_wherever_it_is(field):
    where = {"single": "value.single", "many": "value.many[]", "keyed": "value.keyed{}"}[field]
    one = SHOP.replace(
        "  Empty single = 1;\n  repeated Empty many = 2;\n  map<string, Empty> keyed = 3;\n",
        {
            "single": "  Empty single = 1;\n",
            "many": "  repeated Empty many = 2;\n",
            "keyed": "  map<string, Empty> keyed = 3;\n",
        }[field],
    )
    with pytest.raises(UnsupportedSchema) as refused:
        spark_type(compile_proto(one).message("Holder"))
    assert str(refused.value) == f"{where}: a message without fields has no Spark type"
    with pytest.raises(UnsupportedSchema, match=r"^value: a message without fields has no Spark type$"):
        spark_type(compiled().message("Empty"))


def test_a_message_not_declared_is_refused_listing_those_there_are():
    with pytest.raises(UnsupportedSchema) as refused:
        compiled().message("Nope")
    assert str(refused.value) == (
        "the .proto declares no message 'Nope' (it has shop.Empty, shop.Holder, shop.Holder.KeyedEntry, shop.Node, "
        "shop.Scalars, shop.Scalars.StatesEntry)"
    )
    with pytest.raises(UnsupportedSchema) as none:
        compile_proto('syntax = "proto3";\nenum Only { A = 0; }\n').message(None)
    assert str(none.value) == "the .proto declares no message"
    unpackaged = compile_proto('syntax = "proto3";\nmessage Top { int32 a = 1; }\n')
    assert unpackaged.message("Top").full_name == "Top"


def test_scalars_their_edges_and_well_known_types_decode():
    schema = compiled()
    descriptor = schema.message("Scalars")
    fields = {f.name: f.dataType for f in spark_type(descriptor).fields}
    assert fields["f64"] == fields["u64"] == DecimalType(20, 0)
    cls = message_factory.GetMessageClass(descriptor)
    record = cls(f64=2**64 - 1, u64=2**64 - 2, state=7, numbers=[1, 2])
    record.states["a"] = 1
    record.states["b"] = 9  # (a number the reader's enum does not name: kept as its number)
    record.at.seconds, record.at.nanos = 86_400, 1_999
    index = schema.indexed.index("shop.Scalars")
    values = protobuf_types.ProtobufValues(schema, "Scalars")
    got = values.decode(bytes([index]) + record.SerializeToString(), schema)
    assert got["f64"] == decimal.Decimal(2**64 - 1) and got["u64"] == decimal.Decimal(2**64 - 2)
    assert got["state"] == "7" and sorted(got["states"]) == [("a", "PAID"), ("b", "9")]
    assert got["at"] == datetime.datetime(1970, 1, 2, 0, 0, 0, 1, tzinfo=datetime.UTC)
    assert got["numbers"] == [1, 2]
    empty = values.decode(bytes([index]), schema)
    assert (empty["numbers"], empty["states"], empty["at"]) == ((), (), None)  # (defaults: empty)
    assert (
        isinstance(spark_type(descriptor), StructType)
        and StructField("f64", DecimalType(20, 0)) in spark_type(descriptor).fields
    )


def test_a_record_whose_index_the_writer_does_not_have_is_refused():
    schema = compiled()
    values = protobuf_types.ProtobufValues(schema, "Scalars")
    count = len(schema.indexed)
    with pytest.raises(ValueError) as refused:
        values.decode(bytes([count]), schema)
    assert str(refused.value) == f"message index {count}, and the writer's .proto has {count} messages"
    with pytest.raises(
        ValueError, match=r"^the record is a shop.Node, and the reader's message is shop.Scalars$"
    ):
        values.decode(bytes([schema.indexed.index("shop.Node")]), schema)


@pytest.mark.parametrize(
    ("body", "index", "at"),
    [
        (b"\x00rest", 0, 1),
        (b"\x7f", 127, 1),
        (b"\x80\x01", 128, 2),
        (b"\xff\xff\xff\xff\x0f", 2**32 - 1, 5),  # five bytes: the longest a 32-bit index takes
    ],
)
def test_the_message_index_is_a_varint(body, index, at):
    assert message_index(body) == (index, at)


@pytest.mark.parametrize("body", [b"", b"\x80", b"\xff\xff\xff\xff\xff\x01"])
def test_a_body_without_a_message_index_is_refused(body):
    with pytest.raises(ValueError) as refused:
        message_index(body)
    assert str(refused.value) == "the body does not start with a message index (a varint)"


def test_without_protoc_the_message_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "grpc_tools", None)  # (an import of it fails)
    with pytest.raises(ImportError) as missing:
        protobuf_types.require_protoc()
    assert str(missing.value) == (
        "valueFormat=glue with Protobuf schemas needs protoc (grpcio-tools): pip install "
        "'pyspark-kinesis[glue-protobuf]'"
    )
