"""The sink's schemaDefinition and schemaAutoRegistration against moto's Glue Schema Registry on
loopback, a real local Kinesis and a real SparkSession: a schema the registry does not have is created
with the definition as its first version, an evolved definition becomes its next version, a registered
definition is found without registering, records carry the version they were encoded with, and the
source reads them all back; what cannot be written is refused at query start, nothing registered."""

from __future__ import annotations

import io
import json
import uuid

import boto3
import fastavro
import pytest

from tests.helpers import client, new_stream
from tests.integration.test_glue_values import glue_batch_read

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

V1 = {
    "type": "record",
    "name": "Payment",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "currency", "type": ["null", "string"], "default": None}]}


def write(spark, kinesalite, stream: str, endpoint: str, registry: str, values: str, **options) -> None:
    (
        spark.sql(f"SELECT {values} AS value, cast(id AS string) AS partitionKey FROM range(5) AS t(id)")
        .write.format("kinesis")
        .mode("append")
        .options(streamName=stream, region="us-east-1", endpointUrl=kinesalite.endpoint)
        .options(valueFormat="glue", schemaRegistryName=registry, schemaName="payments")
        .option("schemaRegistryEndpointUrl", endpoint)
        .options(**options)
        .save()
    )


def headers(kin, stream: str) -> list[tuple[str, bytes]]:
    """(schema version id, body) of every record of `stream`."""
    found = []
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        it = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )
        for record in kin.get_records(ShardIterator=it["ShardIterator"], Limit=1000)["Records"]:
            data = record["Data"]
            assert data[:2] == bytes([3, 0])
            found.append((str(uuid.UUID(bytes=data[2:18])), data[18:]))
    return found


def refused(call) -> str:
    with pytest.raises(Exception) as caught:
        call()
    return str(caught.value)


@pytest.fixture
def empty_registry(local_s3):
    """A Glue client on moto's registry, and a new registry without schemas."""
    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=local_s3.endpoint)
    registry = f"r-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=registry)
    return glue, registry


def test_the_sink_registers_its_definition_and_its_evolution_and_the_source_reads_both(
    spark, kinesalite, local_s3, empty_registry
):
    glue, registry = empty_registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    schema_id = {"RegistryName": registry, "SchemaName": "payments"}

    def versions() -> int:
        listed = glue.get_schema(SchemaId=schema_id)
        return int(listed["LatestSchemaVersion"])

    v1_values = "struct(id, cast(id AS double) / 2 AS amount)"
    # Without registration, a definition the registry lacks is refused, naming what to do.
    text = refused(
        lambda: write(
            spark, kinesalite, stream, local_s3.endpoint, registry, v1_values, schemaDefinition=json.dumps(V1)
        )
    )
    assert "Kinesis option 'schemaDefinition'" in text and "schemaAutoRegistration=true" in text
    # A definition that is not a schema the sink can write, or whose fields are not the value's, is
    # refused before anything is registered.
    text = refused(
        lambda: write(
            spark,
            kinesalite,
            stream,
            local_s3.endpoint,
            registry,
            v1_values,
            schemaDefinition='{"type": "record", "name": "X", "fields": [{"name": "id"}]}',
            schemaAutoRegistration="true",
        )
    )
    assert "Kinesis option 'schemaDefinition'" in text and "nothing was registered" in text
    text = refused(
        lambda: write(
            spark,
            kinesalite,
            stream,
            local_s3.endpoint,
            registry,
            v1_values,
            schemaDefinition=json.dumps(V2),
            schemaAutoRegistration="true",
        )
    )
    assert "fields of schemaDefinition (nothing was registered): missing currency" in text
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        glue.get_schema(SchemaId=schema_id)

    # The schema does not exist: created, the definition its first version, BACKWARD by default.
    write(
        spark,
        kinesalite,
        stream,
        local_s3.endpoint,
        registry,
        v1_values,
        schemaDefinition=json.dumps(V1),
        schemaAutoRegistration="true",
    )
    created = glue.get_schema(SchemaId=schema_id)
    assert created["DataFormat"] == "AVRO" and created["Compatibility"] == "BACKWARD" and versions() == 1
    v1 = glue.get_schema_by_definition(SchemaId=schema_id, SchemaDefinition=json.dumps(V1))["SchemaVersionId"]

    # An evolved definition becomes version 2; written again, the same definition registers nothing.
    v2_values = "struct(id, cast(id AS double) / 2 AS amount, 'EUR' AS currency)"
    for _ in range(2):
        write(
            spark,
            kinesalite,
            stream,
            local_s3.endpoint,
            registry,
            v2_values,
            schemaDefinition=json.dumps(V2),
            schemaAutoRegistration="true",
        )
    assert versions() == 2
    v2 = glue.get_schema_by_definition(SchemaId=schema_id, SchemaDefinition=json.dumps(V2))["SchemaVersionId"]
    # A registered definition is found without registration: version 1 again, not the latest.
    write(spark, kinesalite, stream, local_s3.endpoint, registry, v1_values, schemaDefinition=json.dumps(V1))
    assert versions() == 2

    written = headers(kin, stream)
    assert sorted(v for v, _ in written) == sorted([v1] * 10 + [v2] * 10)
    parsed = {v1: fastavro.parse_schema(V1), v2: fastavro.parse_schema(V2)}
    bodies = [fastavro.schemaless_reader(io.BytesIO(body), parsed[v]) for v, body in written]
    assert sorted(b["id"] for b in bodies) == sorted(list(range(5)) * 4)
    read = glue_batch_read(
        spark,
        kinesalite.endpoint,
        stream,
        local_s3.endpoint,
        schemaRegistryName=registry,
        schemaName="payments",
    )
    rows = sorted(
        (r["value"]["id"], r["value"]["amount"], r["value"]["currency"] or "") for r in read.collect()
    )
    expected = [(n, n / 2, "") for n in range(5)] * 2 + [(n, n / 2, "EUR") for n in range(5)] * 2
    assert rows == sorted(expected)

    # The schema exists as AVRO: a schema of another data format for it is refused.
    text = refused(
        lambda: write(
            spark,
            kinesalite,
            stream,
            local_s3.endpoint,
            registry,
            v1_values,
            schemaDefinition='{"type": "object", "properties": {"id": {"type": "integer"}}}',
            schemaAutoRegistration="true",
            schemaDataFormat="JSON",
        )
    )
    assert "Kinesis option 'schemaDataFormat'" in text and "exists with data format AVRO" in text
    assert versions() == 2


def test_a_json_schema_the_registry_lacks_is_created_with_the_format_and_mode_given(
    spark, kinesalite, local_s3, empty_registry
):
    glue, registry = empty_registry
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    definition = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    write(
        spark,
        kinesalite,
        stream,
        local_s3.endpoint,
        registry,
        "struct(id)",
        schemaDefinition=definition,
        schemaAutoRegistration="true",
        schemaDataFormat="json",
        schemaCompatibility="full",
    )
    created = glue.get_schema(SchemaId={"RegistryName": registry, "SchemaName": "payments"})
    assert created["DataFormat"] == "JSON" and created["Compatibility"] == "FULL"
    assert sorted(json.loads(body)["id"] for _v, body in headers(kin, stream)) == list(range(5))
