"""A stream that is not simply ACTIVE at start, for the source and the sink: CREATING is waited for
(bounded), then a clear error; DELETING is an error naming the stream; UPDATING is read as ACTIVE
(Kinesis serves reads and writes while a stream updates). A stream with AUTO record distribution
takes the sink's rows without partition keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pyspark_kinesis.aws import kinesis
from pyspark_kinesis.aws.kinesis import KinesisProxy
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.errors import StreamAccessError, StreamNotFoundError

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


class Client:
    def __init__(self, *statuses: str) -> None:
        self.statuses, self.calls = list(statuses), 0

    def describe_stream_summary(self, **_args: str) -> dict:
        status = self.statuses[min(self.calls, len(self.statuses) - 1)]
        self.calls += 1
        return {
            "StreamDescriptionSummary": {
                "StreamARN": ARN,
                "StreamStatus": status,
                "StreamCreationTimestamp": datetime(2026, 1, 1, tzinfo=UTC),
                "RetentionPeriodHours": 24,
            }
        }


def proxy(client: Client) -> KinesisProxy:
    made = KinesisProxy(StreamSpec("orders", AwsSettings(region="us-east-1")), agent="planner")
    made._client = client
    return made


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(kinesis, "CREATING_POLL_S", 0.01)


def test_creating_is_waited_for_until_active():
    client = Client("CREATING", "CREATING", "ACTIVE")
    assert proxy(client).identity().arn == ARN and client.calls == 3


def test_creating_for_too_long_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(kinesis, "CREATING_WAIT_S", 0.1)
    with pytest.raises(StreamAccessError, match="'orders' is still CREATING after"):
        proxy(Client("CREATING")).identity()


def test_deleting_is_an_error_and_updating_is_read_as_active():
    with pytest.raises(StreamNotFoundError, match="'orders' is being deleted"):
        proxy(Client("DELETING")).identity()
    client = Client("UPDATING")
    assert proxy(client).identity().arn == ARN and client.calls == 1


def test_the_sink_waits_for_a_creating_stream_and_refuses_one_being_deleted(monkeypatch):
    """The sink learns each stream's record size limit at query start: on a stream still CREATING
    it waits (bounded) as the source does, on one being deleted it fails naming it."""
    from pyspark_kinesis.sink import writers
    from pyspark_kinesis.sink.options import parse_sink_options

    clients = {"orders": Client("CREATING", "CREATING", "ACTIVE")}

    def made(spec, agent, max_attempts=None):
        built = KinesisProxy(spec, agent=agent)
        built._client = clients[spec.name]
        return built

    monkeypatch.setattr(writers, "KinesisProxy", made)
    config = writers.check_stream(parse_sink_options({"streamName": "orders", "region": "us-east-1"}))
    assert config.record_limits == {"orders": 1024 * 1024} and clients["orders"].calls == 3
    clients["orders"] = Client("DELETING")
    with pytest.raises(StreamNotFoundError, match="'orders' is being deleted"):
        writers.check_stream(parse_sink_options({"streamName": "orders", "region": "us-east-1"}))
    monkeypatch.setattr(kinesis, "CREATING_WAIT_S", 0.1)
    clients["orders"] = Client("CREATING")
    with pytest.raises(StreamAccessError, match="still CREATING after"):
        writers.check_stream(parse_sink_options({"streamName": "orders", "region": "us-east-1"}))


class AutoClient(Client):
    """A stream whose records the service places itself (RecordDistributionStrategy AUTO)."""

    def describe_stream_summary(self, **args: str) -> dict:
        answer = super().describe_stream_summary(**args)
        answer["StreamDescriptionSummary"]["RecordDistributionStrategy"] = "AUTO"
        return answer


def test_rows_without_a_key_go_without_one_to_an_auto_stream_and_with_a_random_one_elsewhere(monkeypatch):
    """The sink learns at query start which streams have AUTO record distribution (one
    DescribeStreamSummary, as for the record size limit). There a row without a partition key goes
    without one (the service ignores keys); elsewhere it gets a random key, as before. A key the row
    has is sent as it is everywhere, and packing rows into aggregates is refused for an AUTO stream."""
    import pyarrow as pa

    from pyspark_kinesis.errors import OptionError
    from pyspark_kinesis.sink import producing, writers
    from pyspark_kinesis.sink.options import parse_sink_options

    clients = {"placed": AutoClient("ACTIVE"), "keyed": Client("ACTIVE")}

    def made(spec, agent, max_attempts=None):
        built = KinesisProxy(spec, agent=agent)
        built._client = clients[spec.name]
        return built

    monkeypatch.setattr(writers, "KinesisProxy", made)
    sent: dict[str, list[dict]] = {"placed": [], "keyed": []}

    def put(settings, stream, records):
        sent[stream].extend(records)
        return [{"ShardId": "shardId-000000000000", "SequenceNumber": "1"} for _r in records]

    monkeypatch.setattr(producing, "put_records", put)
    streams = '["placed", "keyed"]'
    config = writers.check_stream(parse_sink_options({"streams": streams, "region": "us-east-1"}))
    assert config.auto_streams == {"placed"}
    rows = pa.record_batch(
        {"data": [b"a", b"b", b"c", b"d"], "streamName": ["placed", "keyed", "placed", "keyed"]}
    )
    writers.write_partition(config, iter([rows]))
    if kinesis.partition_key_optional():
        assert [r.get("PartitionKey") for r in sent["placed"]] == [None, None]
    else:  # an older botocore refuses an entry without one: a random key, which an AUTO stream ignores
        assert all(len(r["PartitionKey"]) == 32 for r in sent["placed"])
    assert all(len(r["PartitionKey"]) == 32 for r in sent["keyed"])
    keyed = pa.record_batch({"data": [b"e"], "partitionKey": ["k1"], "streamName": ["placed"]})
    writers.write_partition(config, iter([keyed]))
    assert sent["placed"][-1]["PartitionKey"] == "k1"
    with pytest.raises(OptionError, match=r"'aggregate'.*AUTO"):
        writers.check_stream(
            parse_sink_options({"streams": streams, "region": "us-east-1", "aggregate": "true"})
        )
