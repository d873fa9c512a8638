"""Test helpers: streams with unique names, records that say who put them, and exactly-once checks."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from itertools import pairwise

import boto3


def missing_tool(reason: str) -> None:
    """A test that cannot run for want of a tool on this machine: skipped on a developer's machine,
    failed in CI (`CI=true`), where a skip would hide a missing install step."""
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: install it, see scripts/bootstrap.sh)")
    pytest.skip(reason)


def client(endpoint: str, region: str = "us-east-1"):
    return boto3.client("kinesis", endpoint_url=endpoint, region_name=region)


def new_stream(kinesis, shards: int = 2, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    for _ in range(100):
        if (
            kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
            == "ACTIVE"
        ):
            return name
        time.sleep(0.1)
    raise AssertionError(f"stream {name} did not become ACTIVE")


def put(kinesis, stream: str, start: int, count: int, keys: int = 8, tag: str = "r") -> list[str]:
    """Put records '<tag>-<n>' with partition key 'k<n % keys>' in calls of 100; returns the payloads."""
    payloads = []
    pending = [(f"{tag}-{n}", f"k{n % keys}") for n in range(start, start + count)]
    for i in range(0, len(pending), 100):
        chunk = pending[i : i + 100]
        response = kinesis.put_records(
            StreamName=stream, Records=[{"Data": d.encode(), "PartitionKey": k} for d, k in chunk]
        )
        # The local servers never throttle; a partial failure here would make every check meaningless.
        assert response.get("FailedRecordCount", 0) == 0, "local Kinesis rejected records"
        payloads.extend(d for d, _ in chunk)
    return payloads


def assert_exactly_once(rows: Iterable, expected: Iterable[str]) -> None:
    """Every expected payload arrived exactly once and nothing else arrived."""
    seen = defaultdict(int)
    for row in rows:
        seen[bytes(row["data"]).decode()] += 1
    dupes = {k: v for k, v in seen.items() if v > 1}
    expected_set = set(expected)
    missing = expected_set - set(seen)
    extra = set(seen) - expected_set
    assert not dupes, f"{len(dupes)} records arrived more than once, e.g. {sorted(dupes)[:5]}"
    assert not missing, f"{len(missing)} records were lost, e.g. {sorted(missing)[:5]}"
    assert not extra, f"{len(extra)} records arrived that were not expected, e.g. {sorted(extra)[:5]}"


def assert_shard_order(rows_in_arrival_order: Iterable) -> None:
    """Within each shard, sequence numbers (and sub-sequence numbers) strictly increase in arrival order."""
    last: dict[str, tuple[int, int]] = {}
    for row in rows_in_arrival_order:
        key = (int(row["sequenceNumber"]), int(row["subSequenceNumber"]))
        shard = row["shardId"]
        assert shard not in last or key > last[shard], f"shard {shard} went back from {last[shard]} to {key}"
        last[shard] = key


def assert_key_order(rows_in_arrival_order: Iterable) -> None:
    """For each partition key, payload numbers increase in arrival order (records are put in order)."""
    last: dict[str, int] = {}
    for row in rows_in_arrival_order:
        key = row["partitionKey"]
        number = int(bytes(row["data"]).decode().rsplit("-", 1)[1])
        assert key not in last or number > last[key], f"key {key}: {number} arrived after {last[key]}"
        last[key] = number


def wait_active(kinesis, stream: str) -> None:
    for _ in range(200):
        if (
            kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
            == "ACTIVE"
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"stream {stream} did not become ACTIVE")


def open_shards(kinesis, stream: str) -> list[dict]:
    shards, token = [], None
    for _ in range(100):
        response = kinesis.list_shards(NextToken=token) if token else kinesis.list_shards(StreamName=stream)
        shards.extend(response["Shards"])
        token = response.get("NextToken")
        if not token:
            break
    live = [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    return sorted(live, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))


def split(kinesis, stream: str, shard: dict) -> None:
    low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2 + 1)
    )
    wait_active(kinesis, stream)


def merge(kinesis, stream: str, left: dict, right: dict) -> None:
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge=left["ShardId"], AdjacentShardToMerge=right["ShardId"]
    )
    wait_active(kinesis, stream)


def read_all(kinesis, stream: str) -> list[bytes]:
    """Every record's data in the stream, shard by shard in sequence order, read with plain boto3."""
    out: list[bytes] = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _ in range(1000):  # bounded: a test stream holds a few thousand records
            response = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            out.extend(r["Data"] for r in response["Records"])
            iterator = response.get("NextShardIterator")
            if not response["Records"] or iterator is None:
                break
    return out


def assert_subscribe_rules(calls: list[tuple[float, str]]) -> None:
    """SubscribeToShard calls (time, outcome) on one consumer and shard keep the service's rules: at
    most one per second, and none within 5 s of the last one that succeeded (a small margin for timer
    granularity)."""
    gaps = [b[0] - a[0] for a, b in pairwise(calls)]
    assert all(g >= 0.95 for g in gaps), f"calls closer than 1 s: {gaps}: {calls}"
    last_ok = None
    for at, outcome in calls:
        if last_ok is not None:
            assert at - last_ok >= 4.9, f"a subscription within 5 s of the last successful one: {calls}"
        if outcome == "ok":
            last_ok = at


def shard_sequences(kin, stream: str) -> dict[str, list[tuple[str, str]]]:
    """Every record of every shard as (sequence number, data), in sequence order, read with plain boto3."""
    out = {}
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        sid = shard["ShardId"]
        iterator = kin.get_shard_iterator(StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON")[
            "ShardIterator"
        ]
        records: list[tuple[str, str]] = []
        for _ in range(50):  # bounded: a test shard holds a few thousand records
            response = kin.get_records(ShardIterator=iterator, Limit=10_000)
            records += [(r["SequenceNumber"], r["Data"].decode()) for r in response["Records"]]
            iterator = response.get("NextShardIterator")
            if not response["Records"] or iterator is None:
                break
        out[sid] = records
    return out


def kcl_hash(key: str) -> int:
    """A user record's effective hash key as the KCL computes it when it has no explicit hash key: the
    MD5 of its partition key as a 128-bit number (computed here, independently of the connector)."""
    return int(hashlib.md5(key.encode()).hexdigest(), 16)
