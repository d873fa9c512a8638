"""A table's stream through `aws.dynamodb_streams.StreamsProxy`: against moto's DynamoDB Streams (an
implementation nobody here wrote) for records, images and positions, and against a scripted client for
what moto does not do (paging of 100 shards, ShardFilter, a closed shard's null iterator, streams
re-enabled under a new label)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from pyspark_kinesis.aws.dynamodb_streams import StreamsProxy, change, is_stream_arn
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.errors import StreamNotFoundError
from pyspark_kinesis.model import LATEST, Position
from pyspark_kinesis.values.dynamodb_images import change_row


def settings(endpoint: str) -> AwsSettings:
    return AwsSettings(region="us-east-1", endpoint_url=endpoint, access_key_id="test", secret_key="test")


def dynamodb(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"total_max_attempts": 2}, connect_timeout=2, read_timeout=10),
    )


def table(endpoint: str, name: str, view: str = "NEW_AND_OLD_IMAGES") -> None:
    dynamodb(endpoint).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": view},
    )


def read_all(proxy: StreamsProxy, shard: str, position: Position) -> list[tuple[str, ...]]:
    iterator: str | None = proxy.shard_iterator(shard, position)
    rows: list[tuple[str, ...]] = []
    for _page in range(20):  # bounded: moto never ends its one shard (NextShardIterator is never null)
        assert iterator is not None
        page = proxy.get_records(iterator, 1000)
        records = page["Records"]
        if not len(records):
            break
        seqs, _keys, data, _created = records.lists()
        rows += [(seq, *map(str, change_row(payload)[:4])) for seq, payload in zip(seqs, data, strict=True)]
        iterator = page["NextShardIterator"]
    return rows


def test_a_tables_changes_come_back_with_exact_images_and_resume_after_a_position(local_sts):
    endpoint = local_sts.endpoint
    table(endpoint, "orders-api")
    client = dynamodb(endpoint)
    client.put_item(TableName="orders-api", Item={"id": {"S": "a"}, "n": {"N": "12345678901234567890.5"}})
    client.put_item(TableName="orders-api", Item={"id": {"S": "a"}, "n": {"N": "2"}, "b": {"B": b"\x00"}})
    client.delete_item(TableName="orders-api", Key={"id": {"S": "a"}})
    proxy = StreamsProxy(StreamSpec("orders-api", settings(endpoint)), agent="planner")
    assert is_stream_arn(proxy.arn)
    identity = proxy.identity()
    assert identity.arn == proxy.arn and identity.retention_ms == 24 * 3_600_000
    shards = proxy.list_shards()
    assert len(shards) == 1 and not shards[0].closed and shards[0].parent is None

    rows = read_all(proxy, shards[0].shard_id, Position.trim_horizon())
    assert [r[1] for r in rows] == ["INSERT", "MODIFY", "REMOVE"]
    assert {r[2] for r in rows} == {'{"id":"a"}'}
    first_new = json.loads(rows[0][3], parse_float=Decimal)
    assert first_new == {"id": "a", "n": Decimal("12345678901234567890.5")}  # every digit
    assert json.loads(rows[1][3]) == {"id": "a", "n": 2, "b": "AA=="}
    assert rows[2][3] == "None"  # a REMOVE has no new image
    # A position after the first change resumes with the second, by the service's own iterator.
    again = read_all(proxy, shards[0].shard_id, Position.after(rows[0][0]))
    assert again == rows[1:]
    # LATEST starts after the last change there is: only a later one comes back.
    latest = proxy.shard_iterator(shards[0].shard_id, Position(LATEST))
    client.put_item(TableName="orders-api", Item={"id": {"S": "b"}})
    page = proxy.get_records(latest, 1000)["Records"]
    assert [change_row(p)[1] for p in page.lists()[2]] == ['{"id":"b"}']
    # A stream named by its ARN is the same stream, without ListStreams.
    by_arn = StreamsProxy(StreamSpec(proxy.arn, settings(endpoint)), agent="planner")
    assert by_arn.arn == proxy.arn and [s.shard_id for s in by_arn.list_shards()] == [shards[0].shard_id]


def test_a_table_without_a_stream_says_how_to_enable_one(local_sts):
    dynamodb(local_sts.endpoint).create_table(
        TableName="no-stream-table",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    proxy = StreamsProxy(StreamSpec("no-stream-table", settings(local_sts.endpoint)), agent="planner")
    with pytest.raises(StreamNotFoundError, match=r"has no stream\. Enable DynamoDB Streams on it"):
        proxy.identity()


# -- what moto does not do: a scripted client --------------------------------------------------------
class Scripted:
    """DescribeStream over `shards` in pages of at most Limit, ShardFilter CHILD_SHARDS, ListStreams."""

    def __init__(self, shards: list[dict[str, Any]], streams: list[dict[str, str]] | None = None) -> None:
        self.shards, self.streams, self.calls = shards, streams or [], []

    def list_streams(self, **kwargs: Any) -> dict[str, Any]:
        return {"Streams": self.streams}

    def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        shards = self.shards
        if "ShardFilter" in kwargs:
            parent = kwargs["ShardFilter"]["ShardId"]
            shards = [s for s in shards if s.get("ParentShardId") == parent]
        start = kwargs.get("ExclusiveStartShardId")
        if start is not None:
            shards = shards[[s["ShardId"] for s in shards].index(start) + 1 :]
        page = shards[: kwargs.get("Limit", 100)]
        out: dict[str, Any] = {"Shards": page, "StreamArn": "arn"}
        if len(page) < len(shards):
            out["LastEvaluatedShardId"] = page[-1]["ShardId"]
        return {"StreamDescription": out}


def shard(n: int, parent: int | None = None, closed: bool = False) -> dict[str, Any]:
    seqs = {"StartingSequenceNumber": f"{n}00"}
    if closed:
        seqs["EndingSequenceNumber"] = f"{n}99"
    out: dict[str, Any] = {"ShardId": f"shardId-{n:05d}", "SequenceNumberRange": seqs}
    if parent is not None:
        out["ParentShardId"] = f"shardId-{parent:05d}"
    return out


def scripted(
    client: Scripted, name: str = "arn:aws:dynamodb:us-east-1:1:table/t/stream/2026"
) -> StreamsProxy:
    proxy = StreamsProxy(StreamSpec(name, AwsSettings(region="us-east-1")), agent="planner")
    proxy._client = client
    return proxy


def test_a_listing_follows_every_page_of_a_hundred_shards():
    shards = [shard(n, closed=n < 200) for n in range(250)] + [shard(250 + n, parent=n) for n in range(3)]
    client = Scripted(shards)
    listed = scripted(client).list_shards()
    assert [s.shard_id for s in listed] == [s["ShardId"] for s in shards]
    assert [c.get("ExclusiveStartShardId") for c in client.calls] == [
        None,
        "shardId-00099",
        "shardId-00199",
    ]
    assert all(c["Limit"] == 100 for c in client.calls)
    open_only = scripted(Scripted(shards)).list_shards(open_only=True)
    assert [s.shard_id for s in open_only] == [s["ShardId"] for s in shards[200:]]
    assert listed[250].parent == "shardId-00000" and listed[250].parents == ("shardId-00000",)
    assert (listed[0].start_hash, listed[0].end_hash) == (0, 2**128 - 1)  # a shard holds its own changes
    assert listed[0].closed and listed[0].known_end == "099"


def test_a_closed_shards_children_come_from_shard_filter_and_a_server_that_ignores_it_is_filtered():
    shards = [shard(0, closed=True), shard(1, parent=0), shard(2, parent=0), shard(3)]
    client = Scripted(shards)
    assert [s.shard_id for s in scripted(client).children("shardId-00000")] == [
        "shardId-00001",
        "shardId-00002",
    ]
    assert client.calls[-1]["ShardFilter"] == {"Type": "CHILD_SHARDS", "ShardId": "shardId-00000"}
    assert scripted(client).children("shardId-00003") == []  # none yet: a child may come later

    class Ignoring(Scripted):  # moto answers a CHILD_SHARDS query with its own one shard
        def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
            kwargs.pop("ShardFilter", None)
            return super().describe_stream(**kwargs)

    assert [s.shard_id for s in scripted(Ignoring(shards)).children("shardId-00000")] == [
        "shardId-00001",
        "shardId-00002",
    ]


def test_a_server_that_repeats_its_last_page_ends_the_listing():
    class Repeating(Scripted):
        def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
            self.calls.append(kwargs)
            return {"StreamDescription": {"Shards": [shard(0)], "LastEvaluatedShardId": "shardId-00000"}}

    client = Repeating([])
    assert [s.shard_id for s in scripted(client).list_shards()] == ["shardId-00000"]
    assert len(client.calls) == 2


def test_a_table_by_name_reads_its_latest_stream():
    streams = [
        {
            "StreamArn": "arn:aws:dynamodb:us-east-1:1:table/t/stream/2026-01-01T00:00:00.000",
            "StreamLabel": "2026-01-01T00:00:00.000",
        },
        {
            "StreamArn": "arn:aws:dynamodb:us-east-1:1:table/t/stream/2026-03-01T00:00:00.000",
            "StreamLabel": "2026-03-01T00:00:00.000",
        },
    ]
    assert scripted(Scripted([], streams), name="t").arn == streams[1]["StreamArn"]


def test_a_streams_successor_is_the_tables_next_stream_over_every_liststreams_page():
    label = "2026-0{}-01T00:00:00.000".format
    arn = "arn:aws:dynamodb:us-east-1:1:table/t/stream/{}".format
    streams = [{"StreamArn": arn(label(n)), "StreamLabel": label(n)} for n in (1, 3, 2)]

    class Paged(Scripted):
        def list_streams(self, **kwargs: Any) -> dict[str, Any]:
            self.calls.append(kwargs)
            at = (
                [s["StreamArn"] for s in self.streams].index(kwargs["ExclusiveStartStreamArn"]) + 1
                if ("ExclusiveStartStreamArn" in kwargs)
                else 0
            )
            out: dict[str, Any] = {"Streams": self.streams[at : at + 1]}
            if at + 1 < len(self.streams):
                out["LastEvaluatedStreamArn"] = self.streams[at]["StreamArn"]
            return out

    client = Paged([], streams)
    assert scripted(client, name=arn(label(1))).successor() == arn(label(2))  # the next, from page three
    assert scripted(Paged([], streams), name=arn(label(2))).successor() == arn(label(3))
    assert [c.get("ExclusiveStartStreamArn") for c in client.calls] == [None, arn(label(1)), arn(label(3))]
    assert all(c["TableName"] == "t" for c in client.calls)
    assert scripted(Paged([], streams), name=arn(label(3))).successor() is None  # the newest has none


def test_a_gone_stream_is_deleted_unless_the_table_named_by_name_has_a_newer_one():
    old, new = (f"arn:aws:dynamodb:us-east-1:1:table/t/stream/2026-0{n}-01T00:00:00.000" for n in (1, 2))

    class Gone(Scripted):
        def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "gone"}}, "DescribeStream"
            )

    newer = [{"StreamArn": new, "StreamLabel": "2026-02-01T00:00:00.000"}]
    by_name = StreamsProxy(
        StreamSpec("t", AwsSettings(region="us-east-1"), arn=old, service="dynamodb"), agent="planner"
    )
    by_name._client = Gone([], newer)
    by_name.check_same_stream()  # followed: its shards are gone as aged-out ones (the read says so)
    by_name._client = Gone([], [])
    with pytest.raises(StreamNotFoundError, match=r"was deleted \(with its table\)"):
        by_name.check_same_stream()
    by_arn = StreamsProxy(
        StreamSpec(old, AwsSettings(region="us-east-1"), arn=old, by_arn=True, service="dynamodb"), agent="x"
    )
    by_arn._client = Gone([], newer)  # named by ARN: that stream only
    with pytest.raises(StreamNotFoundError, match=r"was deleted \(with its table\)"):
        by_arn.check_same_stream()


def test_a_change_keeps_the_services_typed_values_and_says_a_ttl_delete():
    record = {
        "eventID": "e1",
        "eventName": "REMOVE",
        "dynamodb": {
            "SequenceNumber": "7",
            "ApproximateCreationDateTime": 1700000000.0,
            "Keys": {"id": {"B": b"\x01\x02"}},
            "OldImage": {"id": {"B": b"\x01\x02"}, "n": {"N": "1.10"}},
            "SizeBytes": 20,
        },
        "userIdentity": {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"},
    }
    seq, payload, created = change(record)
    assert (seq, created) == ("7", 1700000000.0)
    assert json.loads(payload) == [
        "REMOVE",
        {"id": {"B": "AQI="}},
        None,
        {"id": {"B": "AQI="}, "n": {"N": "1.10"}},
        True,
        20,
        "e1",
    ]
    assert change_row(payload) == ("REMOVE", '{"id":"AQI="}', None, '{"id":"AQI=","n":1.10}', True, 20, "e1")
    record["userIdentity"] = {"Type": "Service", "PrincipalId": "someone-else"}
    assert json.loads(change(record)[1])[4] is False


def test_a_throttled_listing_page_is_asked_for_again_not_the_whole_listing_failed(monkeypatch):
    from botocore.exceptions import ClientError

    from pyspark_kinesis.aws import dynamodb_streams
    from pyspark_kinesis.errors import StreamAccessError

    monkeypatch.setattr(dynamodb_streams.time, "sleep", lambda s: None)

    class Throttling(Scripted):
        def __init__(self, shards, code: str, times: int) -> None:
            super().__init__(shards)
            self.code, self.left = code, times

        def describe_stream(self, **kwargs):
            if kwargs.get("ExclusiveStartShardId") and self.left:
                self.left -= 1
                raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "DescribeStream")
            return super().describe_stream(**kwargs)

    shards = [shard(n) for n in range(150)]
    listed = scripted(Throttling(shards, "LimitExceededException", 3)).list_shards()
    assert len(listed) == 150  # (the second page was refused three times, then answered)
    with pytest.raises(StreamAccessError, match="AccessDeniedException"):
        scripted(Throttling(shards, "AccessDeniedException", 1)).list_shards()
    with pytest.raises(StreamAccessError, match="LimitExceededException"):
        scripted(Throttling(shards, "LimitExceededException", 100)).list_shards()  # (bounded: 8 rounds)
