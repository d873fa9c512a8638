"""Glue Schema Registry decode benchmark: the connector's `valueFormat=glue` decode of a batch's `data`
column against decoding the same bodies with fastavro alone, in MB of payload per CPU-second.

What the connector adds to the decoder: the header (version id, optional zlib), the writer schema
looked up per record (cached per process), the resolution into the reader's schema, and the Arrow
struct column Spark takes. Both sides decode the same records; the inputs are stated beside the
figures (small records of one schema with ten fields; a second run where half the records were
written with an older version, so fastavro resolves them).
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
    fastavro: Spread  # CPU seconds: fastavro.schemaless_reader over the bodies, into dicts
    connector: Spread  # CPU seconds: GlueValues.decode of the framed data column, into Arrow

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
        rows.append(GlueRow(case, records, payload, fast, conn))
    return rows


def _json(schema: dict[str, Any]) -> str:
    import orjson

    return orjson.dumps(schema).decode()


def markdown(rows: list[GlueRow]) -> str:
    lines = [
        "## 9. Decoding Glue Schema Registry records (one core)",
        "",
        f"`bash scripts/bench.sh glue-decode` ({machine()}): {rows[0].records:,} Avro records of one schema "
        f"with ten fields (strings, numbers, a timestamp, an array, an optional field; about "
        f"{rows[0].payload_bytes // rows[0].records} B each) decoded into the reader's schema, {REPEAT} "
        "rounds taking turns, CPU time of the process. `fastavro alone`: `schemaless_reader` over the "
        "bodies into Python dicts (the decoder by itself, the header already stripped); `connector`: "
        "`valueFormat=glue`'s decode of the batch's `data` column (header, version lookup, resolution, "
        "the Arrow struct column Spark takes). MB of payload per CPU-second, median (lowest-highest).",
        "",
        "| records | fastavro alone | connector | connector / fastavro |",
        "| --- | --: | --: | --: |",
    ]
    for row in rows:
        ratio = row.fastavro.median / row.connector.median
        lines.append(f"| {row.case} | {row.mb(row.fastavro)} | {row.mb(row.connector)} | {ratio:.2f} |")
    lines += [
        "",
        "Both decode record by record in Python (fastavro has no columnar reader); what the connector "
        "adds per record is the header, the version lookup and its share of the Arrow column.",
        "",
    ]
    return "\n".join(lines)
