"""Stream administration for the command line: create, reshard, put, list and measure a stream.

The connector itself never creates or reshards streams; these calls serve the `pyspark-kinesis`
commands an operator runs beside a query. They live here because this folder is the only code that
talks to AWS. Every wait is bounded, and a failure becomes a `StreamAccessError` that says what failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..config.aws_settings import AwsSettings
from ..errors import StreamAccessError
from ..model import Position, ShardInfo
from .client import kinesis_client

MAX_PUT_ENTRIES = 500  # PutRecords' limit per call
MAX_PUT_ATTEMPTS = 20  # rounds of re-putting the entries a PutRecords call refused
BACKLOG_MAX_CALLS = 100_000  # GetRecords calls one backlog count makes at most (its timeout stops it first)


# The command line is interactive: a wrong port or region should say so in seconds, not after the
# connector's patient ten attempts (16 s against a closed port).
CLI_ATTEMPTS, CLI_CONNECT_TIMEOUT_MS = 3, 3000


def client_for(region: str, endpoint_url: str | None) -> Any:
    """A client with the default credential chain (environment, profile, instance role...)."""
    settings = AwsSettings(
        region=region,
        endpoint_url=endpoint_url,
        max_attempts=CLI_ATTEMPTS,
        connect_timeout_ms=CLI_CONNECT_TIMEOUT_MS,
    )
    return kinesis_client(settings, agent="cli")


def answers(endpoint_url: str) -> bool:
    """Whether a local Kinesis server at `endpoint_url` answers yet (one quick call, dummy credentials:
    the local servers want a signed call, any key will do)."""
    settings = AwsSettings(
        region="us-east-1",
        endpoint_url=endpoint_url,
        access_key_id="000000000000",
        secret_key="local",
        max_attempts=1,
        connect_timeout_ms=1000,
        read_timeout_ms=5000,
    )
    try:
        kinesis_client(settings, agent="cli").list_streams()
    except (BotoCoreError, ClientError):
        return False
    return True


def _failure(what: str, stream: str, exc: Exception) -> StreamAccessError:
    code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""
    return StreamAccessError(f"{what} failed for stream '{stream}': {code or exc.__class__.__name__}: {exc}")


def stream_args(stream: str) -> dict[str, str]:
    """A stream given by ARN is passed as StreamARN (cross-account), a name as StreamName."""
    return {"StreamARN": stream} if stream.startswith("arn:") else {"StreamName": stream}


def wait_active(client: Any, stream: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """The stream's summary once it is ACTIVE (after a create or a reshard)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            summary = client.describe_stream_summary(**stream_args(stream))["StreamDescriptionSummary"]
        except (ClientError, BotoCoreError) as exc:
            raise _failure("DescribeStreamSummary", stream, exc) from None
        if summary["StreamStatus"] == "ACTIVE":
            return summary
        if time.monotonic() > deadline:
            raise StreamAccessError(
                f"stream '{stream}' is still {summary['StreamStatus']} after {timeout_s:.0f} s; try again later"
            )
        time.sleep(delay)
        delay = min(2.0, delay * 2)


def create_stream(client: Any, stream: str, shards: int) -> str:
    """Create a provisioned stream and wait until it is ACTIVE; returns its ARN."""
    try:
        client.create_stream(StreamName=stream, ShardCount=shards)
    except (ClientError, BotoCoreError) as exc:
        raise _failure("CreateStream", stream, exc) from None
    return str(wait_active(client, stream).get("StreamARN", stream))


def list_shards(client: Any, stream: str) -> list[dict[str, Any]]:
    """Every shard, open and closed, as ListShards gives them (NextToken pages followed)."""
    shards: list[dict[str, Any]] = []
    try:
        response = client.list_shards(**stream_args(stream))
        for _page in range(10_000):
            shards.extend(response["Shards"])
            if not response.get("NextToken"):
                break
            response = client.list_shards(NextToken=response["NextToken"])
    except (ClientError, BotoCoreError) as exc:
        raise _failure("ListShards", stream, exc) from None
    return shards


def split_shard(client: Any, stream: str, shard_id: str, at: int | None = None) -> None:
    """Split a shard at hash key `at` (default: the middle of its range) and wait until ACTIVE."""
    if at is None:
        info = next(
            (ShardInfo.from_api(s) for s in list_shards(client, stream) if s["ShardId"] == shard_id), None
        )
        if info is None:
            raise StreamAccessError(f"stream '{stream}' has no shard {shard_id}")
        at = (info.start_hash + info.end_hash) // 2 + 1
    try:
        client.split_shard(**stream_args(stream), ShardToSplit=shard_id, NewStartingHashKey=str(at))
    except (ClientError, BotoCoreError) as exc:
        raise _failure("SplitShard", stream, exc) from None
    wait_active(client, stream)


def merge_shards(client: Any, stream: str, shard_id: str, adjacent: str) -> None:
    """Merge two adjacent open shards and wait until ACTIVE."""
    try:
        client.merge_shards(**stream_args(stream), ShardToMerge=shard_id, AdjacentShardToMerge=adjacent)
    except (ClientError, BotoCoreError) as exc:
        raise _failure("MergeShards", stream, exc) from None
    wait_active(client, stream)


def scale(client: Any, stream: str, target: int) -> None:
    """UpdateShardCount with uniform scaling, then wait until ACTIVE."""
    try:
        client.update_shard_count(
            **stream_args(stream), TargetShardCount=target, ScalingType="UNIFORM_SCALING"
        )
    except (ClientError, BotoCoreError) as exc:
        raise _failure("UpdateShardCount", stream, exc) from None
    wait_active(client, stream)


def put_all(
    client: Any,
    stream: str,
    entries: Iterable[dict[str, Any]],
    on_put: Callable[[int], None] = lambda n: None,
) -> int:
    """Put entries ({"Data", "PartitionKey"}) in calls of up to 500, re-putting what a call refused
    (throttled entries) a bounded number of times; returns how many were put."""
    put = 0
    batch: list[dict[str, Any]] = []
    for entry in entries:
        batch.append(entry)
        if len(batch) == MAX_PUT_ENTRIES:
            put += _put(client, stream, batch, on_put)
            batch = []
    if batch:
        put += _put(client, stream, batch, on_put)
    return put


def _put(client: Any, stream: str, entries: list[dict[str, Any]], on_put: Callable[[int], None]) -> int:
    pending = entries
    for attempt in range(MAX_PUT_ATTEMPTS):
        try:
            results = client.put_records(**stream_args(stream), Records=pending)["Records"]
        except (ClientError, BotoCoreError) as exc:
            raise _failure("PutRecords", stream, exc) from None
        failed = [entry for entry, result in zip(pending, results, strict=True) if "ErrorCode" in result]
        on_put(len(pending) - len(failed))
        if not failed:
            return len(entries)
        pending = failed
        time.sleep(min(2.0, 0.1 * 2**attempt))
    raise StreamAccessError(f"PutRecords kept refusing {len(pending)} records for stream '{stream}'")


@dataclass(frozen=True)
class Backlog:
    """What lies after a position in a shard, as far as it was counted."""

    records: int  # records after the position (a lower bound when `complete` is False)
    millis_behind: int  # MillisBehindLatest of the first GetRecords from the position (-1: not said)
    complete: bool  # the count reached the tip (or the end of a closed shard)


def backlog(
    client: Any, stream: str, shard_id: str, position: Position, max_records: int, timeout_s: float
) -> Backlog:
    """Count the records after `position` by reading them (nothing else in the API can tell), up to
    `max_records` records or `timeout_s` seconds."""
    try:
        iterator: str | None = client.get_shard_iterator(
            **stream_args(stream), ShardId=shard_id, **position.iterator_args()
        )["ShardIterator"]
        count, behind = 0, None
        deadline = time.monotonic() + timeout_s
        for _call in range(BACKLOG_MAX_CALLS):  # the deadline ends it far sooner
            if iterator is None:
                return Backlog(count, behind if behind is not None else -1, True)
            response = client.get_records(ShardIterator=iterator, Limit=10_000)
            if "Records" not in response:  # an incomplete document (see get_records.decode): ask again
                time.sleep(0.1)
                continue
            records = len(response["Records"])
            count += records
            if behind is None:
                behind = int(response.get("MillisBehindLatest", -1))
            iterator = response.get("NextShardIterator")
            if (records == 0 and response.get("MillisBehindLatest", 0) == 0) or count >= max_records:
                return Backlog(count, behind, records == 0)
            if time.monotonic() > deadline:
                break
    except (ClientError, BotoCoreError) as exc:
        raise _failure("GetRecords", stream, exc) from None
    return Backlog(count, behind if behind is not None else -1, False)


def sample_records(count: int, size: int, start: int = 0) -> Iterator[dict[str, Any]]:
    """`count` JSON records of about `size` bytes, keyed by their number (spread over the shards)."""
    for number in range(start, start + count):
        head = f'{{"n": {number}, "pad": "'
        pad = max(0, size - len(head) - 2)
        yield {"Data": (head + "x" * pad + '"}').encode(), "PartitionKey": str(number)}
