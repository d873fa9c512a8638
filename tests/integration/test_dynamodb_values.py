"""valueFormat=dynamodb against a real local Kinesis and a real SparkSession: a table's changes as
Kinesis Data Streams for DynamoDB writes them (JSON records, written here by hand as the service
documents them) come out as change columns with exact numbers, and a record that is no change comes
out with its reason in valueError instead of failing the query."""

from __future__ import annotations

import json

import pytest

from tests.helpers import client, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def change(n: int, name: str = "INSERT") -> bytes:
    return json.dumps(
        {
            "awsRegion": "us-east-1",
            "eventID": f"e{n}",
            "eventName": name,
            "userIdentity": None,
            "recordFormat": "application/json",
            "tableName": "orders",
            "dynamodb": {
                "ApproximateCreationDateTime": 1700000000000 + n,
                "Keys": {"id": {"S": f"o-{n}"}},
                "NewImage": {"id": {"S": f"o-{n}"}, "total": {"N": f"1234567890123456789.{n:02d}"}},
                "SizeBytes": 30 + n,
            },
            "eventSource": "aws:dynamodb",
        }
    ).encode()


def test_changes_from_kinesis_data_streams_for_dynamodb_read_as_columns(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    for n in range(5):
        kin.put_record(StreamName=stream, Data=change(n), PartitionKey=f"o-{n}")
    kin.put_record(StreamName=stream, Data=b"written by a stranger", PartitionKey="x")
    df = reader(
        spark,
        kinesalite.endpoint,
        stream,
        str(tmp_path / "meta"),
        startingPosition="TRIM_HORIZON",
        valueFormat="dynamodb",
        kinesisColumns="sequenceNumber",
    )
    assert df.columns == [
        "sequenceNumber",
        "tableName",
        "eventName",
        "keys",
        "newImage",
        "oldImage",
        "timeToLive",
        "sizeBytes",
        "eventId",
        "valueError",
    ]
    sink = Collector()
    run_available_now(spark, df, str(tmp_path / "cp"), sink)
    rows = sink.rows
    assert len(rows) == 6
    changes, stranger = rows[:5], rows[5]
    assert [r.keys for r in changes] == [f'{{"id":"o-{n}"}}' for n in range(5)]
    assert [r.newImage for r in changes] == [
        f'{{"id":"o-{n}","total":1234567890123456789.{n:02d}}}'
        for n in range(5)  # every digit
    ]
    assert {(r.tableName, r.eventName, r.oldImage, r.timeToLive, r.valueError) for r in changes} == {
        ("orders", "INSERT", None, False, None)
    }
    assert [r.sizeBytes for r in changes] == [30 + n for n in range(5)]
    assert stranger.eventName is None and "not a DynamoDB change" in stranger.valueError
