"""valueFormat=glue against a real local Kinesis, moto's Glue Schema Registry on loopback and a real
SparkSession: records framed as the registry's serializers frame them (the header built here, the
body encoded by fastavro, independently of the connector) and written with two versions of a schema
come out as typed columns of the reader's version."""

from __future__ import annotations

import io
import json
import uuid
import zlib

import boto3
import fastavro
import pytest

from tests.helpers import client, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "qty", "type": ["null", "int"], "default": None}]}


@pytest.fixture(scope="module")
def registry(local_s3):
    """A registry with schema `orders` in versions 1 and 2 (moto's server speaks Glue as well)."""
    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=local_s3.endpoint)
    name = f"r-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=name)
    v1 = glue.create_schema(
        RegistryId={"RegistryName": name},
        SchemaName="orders",
        DataFormat="AVRO",
        Compatibility="BACKWARD",
        SchemaDefinition=json.dumps(V1),
    )["SchemaVersionId"]
    v2 = glue.register_schema_version(
        SchemaId={"RegistryName": name, "SchemaName": "orders"}, SchemaDefinition=json.dumps(V2)
    )["SchemaVersionId"]
    return local_s3.endpoint, name, v1, v2


def framed(version_id: str, schema: dict, record: dict, compress: bool) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    payload = zlib.compress(body.getvalue()) if compress else body.getvalue()
    return bytes([3, 5 if compress else 0]) + uuid.UUID(version_id).bytes + payload


def glue_batch_read(spark, kinesis_endpoint: str, stream: str, registry_endpoint: str, **options):
    """A batch read of `stream` with valueFormat=glue against the local registry, plus `options`."""
    r = spark.read.format("kinesis").options(
        streamName=stream,
        region="us-east-1",
        endpointUrl=kinesis_endpoint,
        valueFormat="glue",
        schemaRegistryEndpointUrl=registry_endpoint,
    )
    return r.options(**options).load()


def put_orders(kin, stream: str, v1: str, v2: str) -> None:
    records = [framed(v1, V1, {"id": n, "item": f"i{n}"}, n % 2 == 0) for n in range(20)]
    records += [framed(v2, V2, {"id": n, "item": f"i{n}", "qty": n}, n % 3 == 0) for n in range(20, 40)]
    kin.put_records(
        StreamName=stream, Records=[{"Data": r, "PartitionKey": str(i)} for i, r in enumerate(records)]
    )


def test_a_stream_written_with_two_versions_reads_as_typed_columns(spark, kinesalite, registry, tmp_path):
    endpoint, name, v1, v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    put_orders(kin, stream, v1, v2)
    options = {
        "startingPosition": "TRIM_HORIZON",
        "valueFormat": "glue",
        "schemaRegistryName": name,
        "schemaName": "orders",
        "schemaRegistryEndpointUrl": endpoint,
    }
    df = reader(spark, kinesalite.endpoint, stream, str(tmp_path / "meta"), **options)
    assert df.schema["value"].dataType.simpleString() == "struct<id:bigint,item:string,qty:int>"
    sink = Collector()
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    values = sorted((r["value"]["id"], r["value"]["item"], r["value"]["qty"]) for r in sink.rows)
    assert values == [(n, f"i{n}", None) for n in range(20)] + [(n, f"i{n}", n) for n in range(20, 40)]


def test_a_batch_read_flattens_into_the_older_version_and_keeps_undecodable_records(
    spark, kinesalite, registry
):
    endpoint, name, v1, v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    put_orders(kin, stream, v1, v2)
    kin.put_record(StreamName=stream, Data=b"not framed", PartitionKey="x")
    rows = glue_batch_read(
        spark,
        kinesalite.endpoint,
        stream,
        endpoint,
        schemaRegistryName=name,
        schemaName="orders",
        schemaVersionNumber="1",
        valueColumns="flatten",
        onDecodeError="column",
    ).collect()
    decoded = sorted((r["id"], r["item"]) for r in rows if r["valueError"] is None)
    assert decoded == [(n, f"i{n}") for n in range(40)]  # version 2's qty skipped by the version 1 reader
    (bad,) = [r for r in rows if r["valueError"] is not None]
    assert bytes(bad["data"]) == b"not framed" and "no Glue Schema Registry header" in bad["valueError"]
    assert bad["id"] is None


def test_a_schema_the_registry_does_not_have_is_an_error_at_load(spark, kinesalite, registry):
    endpoint, name, _v1, _v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    with pytest.raises(Exception, match="schema 'nope' in registry") as caught:
        glue_batch_read(
            spark, kinesalite.endpoint, stream, endpoint, schemaRegistryName=name, schemaName="nope"
        )
    assert "not registered there" in str(caught.value)


def test_the_example_writes_a_typed_table(spark, kinesalite, registry, tmp_path):
    from examples import glue_typed_table

    endpoint, name, v1, v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    put_orders(kin, stream, v1, v2)
    argv = [
        "--stream", stream, "--registry", name, "--schema", "orders",
        "--registry-endpoint-url", endpoint, "--output", str(tmp_path / "out"), "--available-now",
        "--endpoint-url", kinesalite.endpoint,
        "--checkpoint", str(tmp_path / "chk"), "--metadata-path", str(tmp_path / "meta"),
    ]  # fmt: skip
    query = glue_typed_table.run(spark, glue_typed_table.arguments(argv))
    assert query.awaitTermination(180) and query.exception() is None
    table = spark.read.parquet(str(tmp_path / "out"))
    assert {"id", "item", "qty", "valueError", "shardId"} <= set(table.columns)
    assert table.count() == 40 and table.where("qty IS NOT NULL").count() == 20


def test_the_sink_writes_typed_records_a_glue_reader_decodes(spark, kinesalite, registry):
    """valueFormat=glue on write: rows' `value` structs encoded with version 2 (the latest), framed;
    fastavro alone reads them back (the header parsed here), and so does the source."""
    endpoint, name, _v1, v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    rows = [(n, f"i{n}", n if n % 2 else None) for n in range(30)]
    frame = spark.createDataFrame(rows, "id long, item string, qty int")
    (
        frame.selectExpr("struct(id, item, qty) AS value", "cast(id AS string) AS partitionKey")
        .write.format("kinesis")
        .mode("append")
        .options(streamName=stream, region="us-east-1", endpointUrl=kinesalite.endpoint)
        .options(valueFormat="glue", schemaRegistryName=name, schemaName="orders")
        .option("schemaRegistryEndpointUrl", endpoint)
        .save()
    )
    written = []
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        it = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )
        for record in kin.get_records(ShardIterator=it["ShardIterator"], Limit=1000)["Records"]:
            data = record["Data"]
            assert data[:2] == bytes([3, 0]) and str(uuid.UUID(bytes=data[2:18])) == v2
            written.append(fastavro.schemaless_reader(io.BytesIO(data[18:]), fastavro.parse_schema(V2)))
    expected = [{"id": n, "item": i, "qty": q} for n, i, q in rows]
    assert sorted(written, key=lambda r: r["id"]) == expected
    read = glue_batch_read(
        spark, kinesalite.endpoint, stream, endpoint, schemaRegistryName=name, schemaName="orders"
    )
    assert sorted((r["value"].asDict() for r in read.collect()), key=lambda r: r["id"]) == expected


def test_a_value_without_the_schemas_fields_is_an_error_at_query_start(spark, kinesalite, registry):
    endpoint, name, _v1, _v2 = registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    frame = spark.createDataFrame([(1, "a")], "id long, label string")
    writer = (
        frame.selectExpr("struct(id, label) AS value")
        .write.format("kinesis")
        .mode("append")
        .options(streamName=stream, region="us-east-1", endpointUrl=kinesalite.endpoint)
        .options(valueFormat="glue", schemaRegistryName=name, schemaName="orders")
        .option("schemaRegistryEndpointUrl", endpoint)
    )
    with pytest.raises(Exception) as caught:
        writer.save()
    text = str(caught.value)
    assert (
        "Kinesis option 'valueFormat'" in text
        and "missing item, qty" in text
        and "not in the schema: label" in text
    )


def test_json_schema_records_read_as_typed_columns(spark, kinesalite, local_s3):
    """A JSON Schema registered in moto's registry; records framed here with orjson bodies, one with a
    field the reader's version does not have, one whose value is of another type (kept, with why)."""
    import orjson

    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=local_s3.endpoint)
    name = f"j-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=name)
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
        "required": ["id"],
    }
    version = glue.create_schema(
        RegistryId={"RegistryName": name},
        SchemaName="events",
        DataFormat="JSON",
        Compatibility="BACKWARD",
        SchemaDefinition=json.dumps(schema),
    )["SchemaVersionId"]
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    bodies = [{"id": 1, "at": "2026-11-24T10:00:00Z"}, {"id": 2, "extra": "x"}, {"id": "three"}]
    kin.put_records(
        StreamName=stream,
        Records=[
            {"Data": bytes([3, 0]) + uuid.UUID(version).bytes + orjson.dumps(b), "PartitionKey": "k"}
            for b in bodies
        ],
    )
    rows = (
        glue_batch_read(
            spark,
            kinesalite.endpoint,
            stream,
            local_s3.endpoint,
            schemaRegistryName=name,
            schemaName="events",
            valueColumns="flatten",
            onDecodeError="column",
        )
        .orderBy("sequenceNumber")
        .collect()
    )
    assert [r["id"] for r in rows] == [1, 2, None]
    assert rows[0]["at"].isoformat().startswith("2026-11-24") and rows[1]["at"] is None
    assert rows[2]["valueError"] is not None and "value.id is 'three', not a bigint" in rows[2]["valueError"]


def test_the_sink_writes_json_schema_records_a_json_reader_and_the_source_read_back(
    spark, kinesalite, local_s3
):
    """valueFormat=glue on write with a JSON Schema version: each record is the registry's header and a
    JSON body (parsed here with orjson alone), unset optional fields left out; the source reads them
    back into the same values; a row the schema refuses fails the write naming the field."""
    import orjson

    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=local_s3.endpoint)
    name = f"w-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=name)
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "item": {"type": "string"},
            "at": {"type": "string", "format": "date-time"},
        },
        "required": ["id", "item"],
    }
    version = glue.create_schema(
        RegistryId={"RegistryName": name},
        SchemaName="events",
        DataFormat="JSON",
        Compatibility="BACKWARD",
        SchemaDefinition=json.dumps(schema),
    )["SchemaVersionId"]
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    frame = spark.createDataFrame(
        [(n, f"i{n}", f"2026-11-25 10:00:{n:02d}" if n % 2 else None) for n in range(20)],
        "id long, item string, at string",
    ).selectExpr("struct(id, item, to_timestamp(at) AS at) AS value", "cast(id AS string) AS partitionKey")

    def write(df):
        (
            df.write.format("kinesis")
            .mode("append")
            .options(streamName=stream, region="us-east-1", endpointUrl=kinesalite.endpoint)
            .options(valueFormat="glue", schemaRegistryName=name, schemaName="events")
            .option("schemaRegistryEndpointUrl", local_s3.endpoint)
            .save()
        )

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        write(frame)
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
    bodies = []
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        it = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )
        for record in kin.get_records(ShardIterator=it["ShardIterator"], Limit=1000)["Records"]:
            data = record["Data"]
            assert data[:2] == bytes([3, 0]) and str(uuid.UUID(bytes=data[2:18])) == version
            bodies.append(orjson.loads(data[18:]))
    expected = [
        {"id": n, "item": f"i{n}", **({"at": f"2026-11-25T10:00:{n:02d}Z"} if n % 2 else {})}
        for n in range(20)
    ]
    assert sorted(bodies, key=lambda b: b["id"]) == expected
    read = glue_batch_read(
        spark, kinesalite.endpoint, stream, local_s3.endpoint, schemaRegistryName=name, schemaName="events"
    )
    back = sorted((r["value"]["id"], r["value"]["item"], r["value"]["at"] is None) for r in read.collect())
    assert back == [(n, f"i{n}", n % 2 == 0) for n in range(20)]
    with pytest.raises(Exception) as caught:
        write(
            spark.createDataFrame([(1, None, None)], "id long, item string, at timestamp").selectExpr(
                "struct(id, item, at) AS value"
            )
        )
    assert "value.item is required and missing" in str(caught.value)


def test_protobuf_records_of_two_versions_read_as_typed_columns(spark, kinesalite, local_s3, tmp_path):
    """Two versions of a .proto registered in moto's registry; records written with the protobuf
    runtime's own classes and framed here (header, message index, body); a streaming read into the
    newer version's message, with a record of another message kept with the reason."""
    from google.protobuf import message_factory

    from pyspark_kinesis.values.protobuf_types import compile_proto

    v1 = 'syntax = "proto3";\npackage shop;\nmessage Note { string text = 1; }\nmessage Order { int64 id = 1; string item = 2; }\n'
    v2 = v1.replace("string item = 2; }", "string item = 2; optional int32 qty = 3; }")
    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=local_s3.endpoint)
    name = f"p-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=name)
    first = glue.create_schema(
        RegistryId={"RegistryName": name},
        SchemaName="orders",
        DataFormat="PROTOBUF",
        Compatibility="BACKWARD",
        SchemaDefinition=v1,
    )["SchemaVersionId"]
    second = glue.register_schema_version(
        SchemaId={"RegistryName": name, "SchemaName": "orders"}, SchemaDefinition=v2
    )["SchemaVersionId"]

    def message(definition, kind, **fields):
        pool = compile_proto(definition).pool
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(kind))(**fields)

    def frame(version, index, msg):  # shop.Note is message 0, shop.Order message 1
        return bytes([3, 0]) + uuid.UUID(version).bytes + bytes([index]) + msg.SerializeToString()

    records = [frame(first, 1, message(v1, "shop.Order", id=n, item=f"i{n}")) for n in range(10)]
    records += [frame(second, 1, message(v2, "shop.Order", id=n, item=f"i{n}", qty=n)) for n in range(10, 20)]
    records.append(frame(second, 0, message(v2, "shop.Note", text="not an order")))
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    kin.put_records(
        StreamName=stream, Records=[{"Data": r, "PartitionKey": str(i)} for i, r in enumerate(records)]
    )
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        valueFormat="glue",
        schemaRegistryName=name,
        schemaName="orders",
        schemaRegistryEndpointUrl=local_s3.endpoint,
        protobufMessageName="Order",
        valueColumns="flatten",
        onDecodeError="column",
    )
    assert [f.name for f in df.schema.fields][-4:] == ["id", "item", "qty", "valueError"]
    sink = Collector()
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    decoded = sorted((r["id"], r["item"], r["qty"]) for r in sink.rows if r["valueError"] is None)
    assert decoded == [(n, f"i{n}", None if n < 10 else n) for n in range(20)]
    (refused,) = [r for r in sink.rows if r["valueError"] is not None]
    assert "the record is a shop.Note, and the reader's message is shop.Order" in refused["valueError"]


def test_the_sink_writes_protobuf_records_the_runtime_and_the_source_read_back(spark, kinesalite, local_s3):
    """valueFormat=glue on write with a Protobuf version: each record is the registry's header, the
    message's index and the message (parsed here by the protobuf runtime alone); the source reads them
    back; a row the message does not take fails the write naming the value."""
    from google.protobuf import message_factory

    from pyspark_kinesis.values.protobuf_types import compile_proto

    proto = (
        'syntax = "proto3";\npackage shop;\nmessage Note { string text = 1; }\n'
        "message Order { enum State { NEW = 0; PAID = 1; } int64 id = 1; string item = 2; State state = 3; "
        "repeated string tags = 4; }\n"
    )
    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=local_s3.endpoint)
    name = f"q-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=name)
    version = glue.create_schema(
        RegistryId={"RegistryName": name},
        SchemaName="orders",
        DataFormat="PROTOBUF",
        Compatibility="BACKWARD",
        SchemaDefinition=proto,
    )["SchemaVersionId"]
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)

    def write(df):
        (
            df.write.format("kinesis")
            .mode("append")
            .options(streamName=stream, region="us-east-1", endpointUrl=kinesalite.endpoint)
            .options(valueFormat="glue", schemaRegistryName=name, schemaName="orders")
            .options(schemaRegistryEndpointUrl=local_s3.endpoint, protobufMessageName="Order")
            .save()
        )

    rows = [(n, f"i{n}", "PAID" if n % 2 else "NEW", [f"t{n}"] * (n % 3)) for n in range(20)]
    write(
        spark.createDataFrame(rows, "id long, item string, state string, tags array<string>").selectExpr(
            "struct(id, item, state, tags) AS value", "cast(id AS string) AS partitionKey"
        )
    )
    order = message_factory.GetMessageClass(compile_proto(proto).pool.FindMessageTypeByName("shop.Order"))
    parsed = []
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        it = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )
        for record in kin.get_records(ShardIterator=it["ShardIterator"], Limit=1000)["Records"]:
            data = record["Data"]
            assert data[:2] == bytes([3, 0]) and str(uuid.UUID(bytes=data[2:18])) == version
            assert data[18] == 1  # shop.Order, after shop.Note
            message = order.FromString(data[19:])
            parsed.append((message.id, message.item, message.state, list(message.tags)))
    assert sorted(parsed) == [(n, i, 1 if s == "PAID" else 0, t) for n, i, s, t in rows]
    read = glue_batch_read(
        spark,
        kinesalite.endpoint,
        stream,
        local_s3.endpoint,
        schemaRegistryName=name,
        schemaName="orders",
        protobufMessageName="Order",
    )
    back = sorted(
        (r["value"]["id"], r["value"]["item"], r["value"]["state"], list(r["value"]["tags"]))
        for r in read.collect()
    )
    assert back == sorted(rows)
    with pytest.raises(Exception) as caught:
        write(spark.createDataFrame([(1, "x", "LOST", [])], "id long, item string, state string, tags array<string>")
              .selectExpr("struct(id, item, state, tags) AS value"))  # fmt: skip
    assert "'LOST' is not a value of shop.Order.State" in str(caught.value)
