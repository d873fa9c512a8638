"""Protobuf, as the Glue Schema Registry holds it (the text of a `.proto` file), mapped onto Spark
types, and record bodies decoded into them.

The registry's serializers write, after the header, the message's index as an unsigned varint, then
the message's bytes. The index numbers every message type of the writer's `.proto` (nested ones and
map entries too) in the order of their full names: the writer's version says which message it is.
The body is parsed with the reader's message of that name, so evolution is Protobuf's own: fields
are matched by number, fields the reader does not know are skipped, fields the writer did not set
read as absent (null where the field has presence, its default otherwise).

A `.proto` text is compiled by protoc (the `grpcio-tools` package, `[glue-protobuf]` extra) into
descriptors once per schema version and process; the well-known types it ships (timestamp, wrappers,
...) can be imported. `google.protobuf.Timestamp` fields become Spark timestamps; enums their value
names; 64-bit unsigned integers decimal(20,0) (Spark has no unsigned long); maps Spark maps.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..spark_features import arrow_type
from .avro_types import UnsupportedSchema

MAX_DEPTH = 32
FILE_NAME = "registered.proto"
PROTOC_TIMEOUT_S = 60
_TIMESTAMP = "google.protobuf.Timestamp"


def require_protoc() -> None:
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        raise ImportError(
            "valueFormat=glue with Protobuf schemas needs protoc (grpcio-tools): "
            "pip install 'pyspark-kinesis[glue-protobuf]'"
        ) from None


@dataclass(frozen=True)
class CompiledSchema:
    """One registered `.proto`: its message types by full name, and by the registry's index."""

    pool: Any  # google.protobuf.descriptor_pool.DescriptorPool
    file: Any  # its FileDescriptor
    indexed: tuple[str, ...]  # full names in the registry's order: what a record's index points at

    def message(self, name: str | None) -> Any:
        """The descriptor of `name` (a full name, or one without the package), or of the file's
        first top-level message."""
        if name is None:
            declared = list(self.file.message_types_by_name.values())
            if not declared:
                raise UnsupportedSchema("the .proto declares no message")
            return declared[0]
        package = self.file.package
        for candidate in (name, f"{package}.{name}" if package else name):
            if candidate in self.indexed:
                return self.pool.FindMessageTypeByName(candidate)
        raise UnsupportedSchema(f"the .proto declares no message '{name}' (it has {', '.join(self.indexed)})")


def _indexed(file: Any) -> tuple[str, ...]:
    """Every message type, nested ones included (breadth first), sorted by full name: the numbering
    the registry's serializers put in front of each body."""
    queue, names = list(file.message_types_by_name.values()), []
    while queue:
        message = queue.pop(0)
        names.append(message.full_name)
        queue.extend(message.nested_types)
    return tuple(sorted(names))


@functools.lru_cache(maxsize=64)
def compile_proto(definition: str) -> CompiledSchema:
    """A `.proto` text compiled by protoc (in a child process, so that its messages can be shown),
    once per text and process. UnsupportedSchema with protoc's words when it does not compile."""
    require_protoc()
    import grpc_tools
    from google.protobuf import descriptor_pb2, descriptor_pool

    includes = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="kinesis-proto-") as work:
        with open(os.path.join(work, FILE_NAME), "w", encoding="utf-8") as handle:
            handle.write(definition)
        out = os.path.join(work, "set.pb")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{work}",
                f"-I{includes}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                FILE_NAME,
            ],
            capture_output=True,
            text=True,
            timeout=PROTOC_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            words = " ".join((done.stderr or done.stdout).split())[:500]
            raise UnsupportedSchema(f"protoc does not compile the registered .proto: {words}")
        with open(out, "rb") as handle:
            files = descriptor_pb2.FileDescriptorSet.FromString(handle.read())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:  # dependencies first (--include_imports orders them so)
        pool.Add(proto)
    file = pool.FindFileByName(FILE_NAME)
    return CompiledSchema(pool, file, _indexed(file))


def _scalar_types() -> dict[int, DataType]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {
        F.TYPE_DOUBLE: DoubleType(),
        F.TYPE_FLOAT: FloatType(),
        F.TYPE_INT64: LongType(),
        F.TYPE_SINT64: LongType(),
        F.TYPE_SFIXED64: LongType(),
        F.TYPE_UINT64: DecimalType(20, 0),
        F.TYPE_FIXED64: DecimalType(20, 0),
        F.TYPE_INT32: IntegerType(),
        F.TYPE_SINT32: IntegerType(),
        F.TYPE_SFIXED32: IntegerType(),
        F.TYPE_UINT32: LongType(),
        F.TYPE_FIXED32: LongType(),
        F.TYPE_BOOL: BooleanType(),
        F.TYPE_STRING: StringType(),
        F.TYPE_BYTES: BinaryType(),
        F.TYPE_ENUM: StringType(),
    }


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _repeated(field: Any) -> bool:
    return bool(field.is_repeated)


def _single_type(field: Any, where: str, depth: int) -> DataType:
    if field.message_type is None:
        return _scalar_types()[field.type]
    if field.message_type.full_name == _TIMESTAMP:
        return TimestampType()
    return spark_type(field.message_type, where, depth + 1)


def spark_type(message: Any, where: str = "value", depth: int = 0) -> StructType:
    """The Spark struct of a message descriptor; UnsupportedSchema naming the field otherwise."""
    if depth > MAX_DEPTH:
        raise UnsupportedSchema(f"{where}: nested deeper than {MAX_DEPTH} levels (a recursive message?)")
    fields = []
    for field in message.fields:
        at = f"{where}.{field.name}"
        if _is_map(field):
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            kind: DataType = MapType(_single_type(key, at, depth), _single_type(value, f"{at}{{}}", depth))
        elif _repeated(field):
            kind = ArrayType(_single_type(field, f"{at}[]", depth))
        else:
            kind = _single_type(field, at, depth)
        fields.append(StructField(field.name, kind))
    if not fields:
        raise UnsupportedSchema(f"{where}: a message without fields has no Spark type")
    return StructType(fields)


def _timestamp(value: Any) -> datetime.datetime:
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return epoch + datetime.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


Convert = Callable[[Any], Any] | None  # None: the value as the protobuf runtime gives it


def _same(value: Any) -> Any:
    return value


def _items(item: Convert) -> Callable[[Any], list[Any]]:
    """A repeated field's values as a list."""
    if item is None:
        return list
    convert = item
    return lambda items: [convert(v) for v in items]


def _entries(key: Convert, value: Convert) -> Callable[[Any], list[tuple[Any, Any]]]:
    """A map field's entries as the (key, value) pairs an Arrow map takes."""
    if key is None and value is None:
        return lambda entries: list(entries.items())
    k, v = key or _same, value or _same
    return lambda entries: [(k(a), v(b)) for a, b in entries.items()]


def _single(field: Any) -> Convert:
    """How one value of `field` becomes what its Spark type's Arrow column takes."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.message_type is not None:
        if field.message_type.full_name == _TIMESTAMP:
            return _timestamp
        return converter(field.message_type)
    if field.type == F.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number, str(number))
    if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return decimal.Decimal
    return None


class Converter:
    """A parsed message as the values of its Spark struct, decided once per message type: every
    field starts at what an unset field reads as (null where the field has presence, its default
    otherwise, empty when repeated), and only the fields the message has set (`ListFields`, in C)
    are converted, so a record costs Python work for the values it carries only."""

    def __init__(self, descriptor: Any) -> None:
        self.defaults: dict[str, Any] = {}
        self.convert: dict[str, Convert] = {}
        for field in descriptor.fields:
            if _is_map(field):
                entry = field.message_type.fields_by_name
                self.convert[field.name] = _entries(_single(entry["key"]), _single(entry["value"]))
                self.defaults[field.name] = ()
            elif _repeated(field):
                self.convert[field.name] = _items(_single(field))
                self.defaults[field.name] = ()
            else:
                convert = self.convert[field.name] = _single(field)
                if field.has_presence:
                    self.defaults[field.name] = None
                else:
                    default = field.default_value
                    self.defaults[field.name] = default if convert is None else convert(default)

    def __call__(self, message: Any) -> dict[str, Any]:
        out = dict(self.defaults)
        convert = self.convert
        for field, value in message.ListFields():
            how = convert[field.name]
            out[field.name] = value if how is None else how(value)
        return out


_converters: dict[Any, Converter] = {}


def converter(descriptor: Any) -> Converter:
    """The converter of a message type, made once per process (a recursive type would not end: its
    Spark type is refused first, see `spark_type`)."""
    found = _converters.get(descriptor)
    if found is None:
        found = _converters[descriptor] = Converter(descriptor)
    return found


def message_index(body: bytes) -> tuple[int, int]:
    """The registry's message index in front of a body, and where the message's bytes start."""
    index, shift, at = 0, 0, 0
    while True:
        if at >= len(body) or shift > 28:
            raise ValueError("the body does not start with a message index (a varint)")
        byte = body[at]
        index |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return index, at
        shift += 7


class ProtobufValues:
    """Decodes Protobuf record bodies, written with any version of the schema, into the reader's
    message. The writer's version (`decode`'s `writer`: its CompiledSchema) says which message a
    body is; the reader's message of that name parses it."""

    def __init__(self, reader: CompiledSchema, message: str | None = None) -> None:
        from google.protobuf import message_factory

        self.reader = reader
        self.descriptor = reader.message(message)
        self.message_class = message_factory.GetMessageClass(self.descriptor)
        self.spark = spark_type(self.descriptor)
        self.arrow = arrow_type(self.spark)
        self.convert = converter(self.descriptor)

    def decode(self, body: bytes, writer: CompiledSchema) -> Any:
        index, at = message_index(body)
        if index >= len(writer.indexed):
            raise ValueError(
                f"message index {index}, and the writer's .proto has {len(writer.indexed)} messages"
            )
        name = writer.indexed[index]
        if name != self.descriptor.full_name:
            raise ValueError(
                f"the record is a {name}, and the reader's message is {self.descriptor.full_name}"
            )
        return self.convert(self.message_class.FromString(body[at:]))

    def column(self, values: Sequence[Any]) -> pa.Array:
        return pa.array(values, type=self.arrow)
