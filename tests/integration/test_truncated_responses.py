"""Responses cut off mid-body must be retried, never read as "no shards" or "shard closed" (either
would skip records silently). A body cut short of its Content-Length is a closed connection (the
connector reads bodies whole: aws/whole_body.py), which botocore's retry mode and the read loop retry;
a body that ends where its length says but is not a complete document (a server or proxy that cut it
before sending) reaches the parser as {} and the connector asks again."""

from __future__ import annotations

import pytest

from pyspark_kinesis.aws.kinesis import KinesisProxy
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.errors import StreamAccessError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.shard_read import ShardLimits, fetch_shard
from tests.helpers import client, new_stream, put
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis]


class TruncatingProxy(FaultProxy):
    """Cuts every other response of one operation in half (every one with `always`), its
    Content-Length that of the half: a complete body that is not a complete document."""

    def __init__(self, target: str, operation: str = "ListShards", always: bool = False) -> None:
        super().__init__(target)
        self.operation, self.always = operation, always
        self.answered = 0

    def forward(self, headers, body):
        status, response_headers, payload = super().forward(headers, body)
        if self.operation in ("GetShardIterator", "GetRecords"):
            return status, response_headers, payload  # (cut in `read_call`, once the proxy read it)
        return status, response_headers, self._cut(headers, payload)

    def read_call(self, operation, headers, body):
        status, response_headers, payload = super().read_call(operation, headers, body)
        return status, response_headers, self._cut(headers, payload)

    def _cut(self, headers, payload: bytes) -> bytes:
        if headers.get("X-Amz-Target", "").endswith("." + self.operation):
            self.answered += 1
            if self.always or self.answered % 2 == 1:
                return payload[: len(payload) // 2]
        return payload


def test_truncated_list_shards_is_asked_again(kinesalite):
    stream = new_stream(client(kinesalite.endpoint), shards=3)
    with TruncatingProxy(kinesalite.endpoint) as proxy:
        planner = KinesisProxy(
            StreamSpec(stream, AwsSettings("us-east-1", proxy.endpoint), arn=stream), agent="planner"
        )
        shards = planner.list_shards()
    assert len(shards) == 3
    assert proxy.answered >= 2 and planner.unreadable >= 1


def test_truncated_get_records_is_retried_not_taken_for_a_closed_shard(kinesalite):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    put(kin, stream, 0, 30)
    shard = kin.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    with FaultProxy(kinesalite.endpoint, seed=3, read_faults={"reset": 0.5}) as proxy:
        source = KinesisProxy(
            StreamSpec(stream, AwsSettings("us-east-1", proxy.endpoint), arn=stream), agent="reader"
        )
        for _read in range(20):  # until a read met at least one cut-off response (half of them are)
            cols, end = fetch_shard(source, shard, Position.trim_horizon(), ShardLimits(-1, -1))
            assert len(cols) == 30 and not end.reached.is_end
            if proxy.injected.get("reset", 0):
                break
        assert proxy.injected.get("reset", 0) >= 1
        # Cut short of its Content-Length, the body never reached the decoder: a closed connection,
        # retried (botocore first), not a document read as empty.
        assert source.unreadable == 0
    with TruncatingProxy(kinesalite.endpoint, operation="GetRecords", always=True) as proxy:
        source = KinesisProxy(
            StreamSpec(stream, AwsSettings("us-east-1", proxy.endpoint), arn=stream), agent="reader"
        )
        with pytest.raises(StreamAccessError, match="unreadable GetRecords responses"):
            fetch_shard(source, shard, Position.trim_horizon(), ShardLimits(-1, -1))
