"""A stream that is not simply ACTIVE at start: CREATING is waited for (bounded), then a clear error;
DELETING is an error naming the stream; UPDATING is read as ACTIVE (Kinesis serves reads and writes
while a stream updates)."""

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
