"""Responses cut off mid-body reach botocore's parser as {}: they must be retried, never read as
"no shards" or "shard closed" (either would skip records silently)."""

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


class TruncatingListProxy(FaultProxy):
    """Cuts every other ListShards response in half."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.list_calls = 0

    def forward(self, headers, body):
        status, response_headers, payload = super().forward(headers, body)
        if headers.get("X-Amz-Target", "").endswith(".ListShards"):
            self.list_calls += 1
            if self.list_calls % 2 == 1:
                return status, response_headers, payload[: len(payload) // 2]
        return status, response_headers, payload


def test_truncated_list_shards_is_asked_again(kinesalite):
    stream = new_stream(client(kinesalite.endpoint), shards=3)
    with TruncatingListProxy(kinesalite.endpoint) as proxy:
        planner = KinesisProxy(
            StreamSpec(stream, AwsSettings("us-east-1", proxy.endpoint), arn=stream), agent="planner"
        )
        shards = planner.list_shards()
    assert len(shards) == 3
    assert proxy.list_calls >= 2 and planner.unreadable >= 1


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
            if source.unreadable:
                break
        assert proxy.injected.get("reset", 0) >= 1
        # The cut body reached the connector's decoder (botocore reads with enforce_content_length=False)
        # and the connector asked again: its own path, not a botocore retry.
        assert source.unreadable >= 1
    with FaultProxy(kinesalite.endpoint, read_faults={"reset": 1.0}) as proxy:
        source = KinesisProxy(
            StreamSpec(stream, AwsSettings("us-east-1", proxy.endpoint), arn=stream), agent="reader"
        )
        with pytest.raises(StreamAccessError, match="unreadable GetRecords responses"):
            fetch_shard(source, shard, Position.trim_horizon(), ShardLimits(-1, -1))
