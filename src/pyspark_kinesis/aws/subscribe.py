"""SubscribeToShard (enhanced fan-out): one subscription's events, as the fetch loop reads responses.

botocore's `subscribe_to_shard` is the production path: it signs the call and parses the event
stream (its `initial-response` first, then one `SubscribeToShardEvent` per push). Each event becomes
the shape a GetRecords response has in `fetching`: "Records" (Arrow columns), "NextShardIterator"
(here the event's ContinuationSequenceNumber: None once the shard is closed and read to its end),
"MillisBehindLatest" and "ChildShards", so the batch logic (limits, aggregates, replay bounds, child
shards) is the same code for both ways of reading.

A subscription is an HTTP response that stays open for up to 5 minutes; the generator closes it when
the reader stops asking for events (or on any error), so no subscription outlives its reader by
accident. Errors reach the caller as botocore raises them: ClientError (ResourceInUseException,
LimitExceededException...) from the call, EventStreamError (a ClientError) from inside the stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..model import Position
from .get_records import Records


def to_response(event: dict[str, Any]) -> dict[str, Any]:
    """A SubscribeToShardEvent as a GetRecords-shaped response."""
    records = event.get("Records") or []
    out: dict[str, Any] = {
        "Records": Records.from_lists(
            [r["SequenceNumber"] for r in records],
            [r.get("PartitionKey") for r in records],
            [r["Data"] for r in records],
            [r["ApproximateArrivalTimestamp"].timestamp() for r in records],
        ),
        "NextShardIterator": event.get("ContinuationSequenceNumber"),
        "MillisBehindLatest": event.get("MillisBehindLatest", -1),
    }
    if event.get("ChildShards"):
        out["ChildShards"] = event["ChildShards"]
    return out


def subscribe(client: Any, consumer_arn: str, shard_id: str, position: Position) -> Iterator[dict[str, Any]]:
    """The subscription's events from `position` on, as responses (see `to_response`); the HTTP
    response is closed when the generator is closed or fails."""
    response = client.subscribe_to_shard(
        ConsumerARN=consumer_arn, ShardId=shard_id, StartingPosition=position.starting_position()
    )
    stream = response["EventStream"]
    try:
        for event in stream:
            body = event.get("SubscribeToShardEvent")
            if body is not None:
                yield to_response(body)
    finally:
        stream.close()
