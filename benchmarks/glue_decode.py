"""Glue Schema Registry decode benchmark: the connector's `valueFormat=glue` decode of a batch's `data`
column against decoding the same bodies with the format's decoder alone (fastavro for Avro, orjson for
JSON, the protobuf runtime's parser for Protobuf), in MB of payload per CPU-second.

What the connector adds to the decoder: the header (version id, optional zlib), the writer schema
looked up per record (cached per process), the resolution into the reader's schema, and the Arrow
struct column Spark takes. Both sides decode the same records; the inputs are stated beside the
figures (small records of one schema with ten fields; a second run where half the records were
written with an older version, so fastavro resolves them; the same records as JSON Schema and as
Protobuf bodies of one version).
"""

from __future__ import annotations

import io
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from benchmarks.decode import _timings
from benchmarks.report import Spread, machine

REPEAT = 9
RECORDS = 20_000

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "paid", "type": "boolean"},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}


@dataclass
class GlueRow:
    case: str
    records: int
    payload_bytes: int
    fastavro: Spread  # CPU seconds: the decoder alone over the bodies (into dicts, or messages)
    connector: Spread  # CPU seconds: GlueValues.decode of the framed data column, into Arrow
    decoder: str = "fastavro"

    def mb(self, spread: Spread) -> str:
        return spread.show_rate(self.payload_bytes, 1e6, digits=1)


def _record(rng: random.Random, index: int, version: int) -> dict[str, Any]:
    value: dict[str, Any] = {
        "order_id": 10_000_000 + index,
        "customer": f"customer-{rng.randrange(100_000):06d}",
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(["EUR", "USD", "GBP"]),
        "quantity": rng.randrange(1, 20),
        "paid": rng.random() < 0.8,
        "created": 1_763_800_000_000 + index,
        "tags": [rng.choice(["gift", "express", "bulk", "promo"]) for _ in range(rng.randrange(0, 4))],
        "note": None if rng.random() < 0.7 else "leave at the door",
    }
    if version == 2:
        value["channel"] = rng.choice(["web", "app", "store"])
    return value


def run(records: int = RECORDS, repeat: int = REPEAT) -> list[GlueRow]:
    import fastavro

    from pyspark_kinesis.values.glue_values import GlueValues
    from pyspark_kinesis.values.glue_wire import frame

    rng = random.Random(7)
    parsed = {1: fastavro.parse_schema(V1), 2: fastavro.parse_schema(V2)}
    ids = {1: str(uuid.UUID(int=1)), 2: str(uuid.UUID(int=2))}
    definitions = {ids[1]: _json(V1), ids[2]: _json(V2)}
    rows = []
    for case, old_share in (("one version", 0.0), ("half written with the older version", 0.5)):
        bodies: list[tuple[int, bytes]] = []
        for index in range(records):
            version = 1 if rng.random() < old_share else 2
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed[version], _record(rng, index, version))
            bodies.append((version, buffer.getvalue()))
        framed = pa.array([frame(ids[v], body) for v, body in bodies], type=pa.binary())
        values = GlueValues(_json(V2), definitions.__getitem__)

        def alone(bodies: list[tuple[int, bytes]] = bodies) -> list[Any]:
            reader = parsed[2]
            return [fastavro.schemaless_reader(io.BytesIO(b), parsed[v], reader) for v, b in bodies]

        def connector(framed: pa.Array = framed, values: GlueValues = values) -> pa.Array:
            return values.decode(framed, lambda i: f"record {i}").values

        assert connector().to_pylist() == alone()  # the same records come out, typed
        fast, conn = _timings([alone, connector], repeat, clock=time.process_time)
        payload = sum(len(b) for _v, b in bodies)
        rows.append(GlueRow(f"Avro, {case}", records, payload, fast, conn))
    rows.append(_json_row(rng, records, repeat))
    rows.append(_protobuf_row(rng, records, repeat))
    return rows


JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "integer"},
        "customer": {"type": "string"},
        "amount": {"type": "number"},
        "currency": {"type": "string"},
        "quantity": {"type": "integer"},
        "paid": {"type": "boolean"},
        "created": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]},
        "channel": {"type": "string"},
    },
    "required": ["order_id", "customer"],
}

PROTO = """syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  int64 order_id = 1; string customer = 2; double amount = 3; string currency = 4; int32 quantity = 5;
  bool paid = 6; google.protobuf.Timestamp created = 7; repeated string tags = 8; optional string note = 9;
  string channel = 10;
}
"""


def _json_row(rng: random.Random, records: int, repeat: int) -> GlueRow:
    import datetime

    import orjson

    from pyspark_kinesis.values.glue_values import GlueValues
    from pyspark_kinesis.values.glue_wire import frame

    version = str(uuid.UUID(int=3))
    bodies = []
    for index in range(records):
        value = _record(rng, index, 2)
        value["created"] = datetime.datetime.fromtimestamp(value["created"] / 1000, datetime.UTC)
        bodies.append(
            orjson.dumps({k: v for k, v in value.items() if v is not None}, option=orjson.OPT_UTC_Z)
        )
    framed = pa.array([frame(version, b) for b in bodies], type=pa.binary())
    values = GlueValues(_json(JSON_SCHEMA), {version: _json(JSON_SCHEMA)}.__getitem__, data_format="JSON")

    def alone() -> list[Any]:
        return [orjson.loads(b) for b in bodies]

    def connector() -> pa.Array:
        return values.decode(framed, lambda i: f"record {i}").values

    assert [r["order_id"] for r in connector().to_pylist()] == [r["order_id"] for r in alone()]
    fast, conn = _timings([alone, connector], repeat, clock=time.process_time)
    return GlueRow("JSON Schema, one version", records, sum(map(len, bodies)), fast, conn, "orjson")


def _protobuf_row(rng: random.Random, records: int, repeat: int) -> GlueRow:
    from google.protobuf import message_factory
    from google.protobuf.json_format import MessageToDict

    from pyspark_kinesis.values.glue_values import GlueValues
    from pyspark_kinesis.values.glue_wire import frame
    from pyspark_kinesis.values.protobuf_types import compile_proto

    version = str(uuid.UUID(int=4))
    order = message_factory.GetMessageClass(compile_proto(PROTO).pool.FindMessageTypeByName("bench.Order"))
    bodies = []
    for index in range(records):
        value = _record(rng, index, 2)
        message = order(**{k: v for k, v in value.items() if k not in ("created", "note") and v is not None})
        if value["note"] is not None:
            message.note = value["note"]
        message.created.FromMilliseconds(value["created"])
        bodies.append(message.SerializeToString())
    framed = pa.array([frame(version, b"\x00" + b) for b in bodies], type=pa.binary())  # message index 0
    values = GlueValues(PROTO, {version: PROTO}.__getitem__, data_format="PROTOBUF")

    def alone() -> list[Any]:
        return [MessageToDict(order.FromString(b), preserving_proto_field_name=True) for b in bodies]

    def connector() -> pa.Array:
        return values.decode(framed, lambda i: f"record {i}").values

    assert [r["order_id"] for r in connector().to_pylist()] == [int(m["order_id"]) for m in alone()]
    fast, conn = _timings([alone, connector], repeat, clock=time.process_time)
    return GlueRow(
        "Protobuf, one version", records, sum(map(len, bodies)), fast, conn, "protobuf (upb) + MessageToDict"
    )


def _json(schema: dict[str, Any]) -> str:
    import orjson

    return orjson.dumps(schema).decode()


def markdown(rows: list[GlueRow]) -> str:
    lines = [
        "## 9. Decoding Glue Schema Registry records (one core)",
        "",
        f"`bash scripts/bench.sh glue-decode` ({machine()}): {rows[0].records:,} records of one schema "
        f"with ten fields (strings, numbers, a timestamp, an array, an optional field; about "
        f"{rows[0].payload_bytes // rows[0].records} B each as Avro) decoded into the reader's schema, "
        f"{REPEAT} rounds taking turns, CPU time of the process; the same records as JSON Schema bodies "
        "and as Protobuf messages of one version. `decoder alone`: the format's decoder by itself over "
        "the bodies, the header already stripped (fastavro's `schemaless_reader` into dicts, resolving "
        "older versions; `orjson.loads` into dicts; the protobuf runtime's `FromString` then its own "
        "`json_format.MessageToDict` into dicts); `connector`: `valueFormat=glue`'s decode of the "
        "batch's `data` column (header, version lookup, resolution or fitting to the reader's schema, "
        "the Arrow struct column Spark takes). MB of payload per CPU-second, median (lowest-highest).",
        "",
        "| records | decoder | decoder alone | connector | connector / decoder |",
        "| --- | --- | --: | --: | --: |",
    ]
    for row in rows:
        ratio = row.fastavro.median / row.connector.median
        lines.append(
            f"| {row.case} | {row.decoder} | {row.mb(row.fastavro)} | {row.mb(row.connector)} | {ratio:.2f} |"
        )
    lines += [
        "",
        "Avro and Protobuf decode record by record in Python (neither decoder has a columnar reader); "
        "what the connector adds per record is the header, the version lookup, for Protobuf the "
        "conversion of the message into Python values, and its share of the Arrow column. JSON bodies "
        "are decoded a batch at once by Arrow's JSON reader (`values/json_batch.py`), header and checks "
        "by Arrow kernels, straight into the typed column: the decoder alone, by contrast, only builds "
        "Python dicts, unchecked.",
        "",
    ]
    return "\n".join(lines)
