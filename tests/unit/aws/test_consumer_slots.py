"""A stream's enhanced fan-out consumer slots run out (20 per stream, shared with Kinesis Queues): the
query fails within seconds naming the consumers and how to free one, instead of retrying for minutes;
RegisterStreamConsumer's rate limit (the same LimitExceededException) is still waited out."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from pyspark_kinesis.aws import consumers
from pyspark_kinesis.errors import StreamAccessError

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


def limit() -> ClientError:
    return ClientError(
        {"Error": {"Code": "LimitExceededException", "Message": "limit"}}, "RegisterStreamConsumer"
    )


class Client:
    """Kinesis's consumer calls, scripted: `others` consumers registered by someone else; the first
    `refusals` RegisterStreamConsumer calls answer LimitExceeded (None: every call)."""

    def __init__(self, others: int, refusals: int | None) -> None:
        self.consumers = {
            f"other-{i}": {
                "ConsumerName": f"other-{i}",
                "ConsumerARN": f"{ARN}/consumer/other-{i}:1",
                "ConsumerStatus": "ACTIVE",
                "ConsumerCreationTimestamp": datetime.now(UTC),
            }
            for i in range(others)
        }
        self.refusals, self.registers = refusals, 0

    def register_stream_consumer(self, StreamARN: str, ConsumerName: str) -> dict:
        self.registers += 1
        if self.refusals is None or self.registers <= self.refusals:
            raise limit()
        self.consumers[ConsumerName] = {
            "ConsumerName": ConsumerName,
            "ConsumerARN": f"{ARN}/consumer/{ConsumerName}:1",
            "ConsumerStatus": "ACTIVE",
            "ConsumerCreationTimestamp": datetime.now(UTC),
        }
        return {}

    def describe_stream_consumer(self, StreamARN: str, ConsumerName: str) -> dict:
        if ConsumerName not in self.consumers:
            raise ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "DescribeStreamConsumer")
        return {"ConsumerDescription": self.consumers[ConsumerName]}

    def list_stream_consumers(self, StreamARN: str) -> dict:
        return {"Consumers": list(self.consumers.values())}


def test_full_slots_fail_at_once_naming_the_consumers_and_the_way_out():
    client = Client(others=20, refusals=None)
    started = time.monotonic()
    with pytest.raises(StreamAccessError) as error:
        consumers.ensure_consumer(client, ARN, "mine", timeout_s=300)
    assert time.monotonic() - started < 5
    text = str(error.value)
    assert "LimitExceededException" in text and "20 consumers registered" in text and "other-7" in text
    assert (
        "pyspark-kinesis consumers deregister orders NAME" in text and "consumerName or consumerArn" in text
    )


def test_a_refusal_that_persists_past_the_rate_limit_fails_too(monkeypatch):
    """A stream with more slots (On-demand Advantage: 50) refusing for longer than the rate limit lasts."""
    monkeypatch.setattr(consumers, "LIMIT_PATIENCE_S", 0.5)
    client = Client(others=3, refusals=None)
    with pytest.raises(StreamAccessError, match="3 consumers registered"):
        consumers.ensure_consumer(client, ARN, "mine", timeout_s=60)


def test_the_rate_limit_is_waited_out():
    client = Client(others=3, refusals=2)
    consumer = consumers.ensure_consumer(client, ARN, "mine", timeout_s=60)
    assert consumer.name == "mine" and consumer.status == "ACTIVE" and client.registers == 3
