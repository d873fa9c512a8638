"""SubscribeToShard (enhanced fan-out): one subscription's events, as the fetch loop reads responses.

botocore's `subscribe_to_shard` is the production path: it signs the call and parses the event
stream (its `initial-response` first, then one `SubscribeToShardEvent` per push). Each event becomes
the shape a GetRecords response has for the read loop (`source.executor.modes.fanout`): "Records" (Arrow columns), "NextShardIterator"
(here the event's ContinuationSequenceNumber: None once the shard is closed and read to its end),
"MillisBehindLatest" and "ChildShards", so the batch logic (limits, aggregates, replay bounds, child
shards) is the same code for both ways of reading.

A subscription is an HTTP response that stays open for up to 5 minutes. It is read by one thread
(the fan-out agent's reader) and may be closed from another (a read that is over, the agent's
reaper): `Subscription.close` closes the HTTP response under the reading thread, which then sees its
stream end. Errors reach the caller as botocore raises them: ClientError (ResourceInUseException,
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


class Subscription:
    """One SubscribeToShard call's event stream. Making the object makes the call (its refusals
    raise here); `events` yields the responses; `close` may be called from any thread, any number of
    times."""

    def __init__(
        self, client: Any, consumer_arn: str, shard_id: str, position: Position, verify: bool = False
    ) -> None:
        response = client.subscribe_to_shard(
            ConsumerARN=consumer_arn, ShardId=shard_id, StartingPosition=position.starting_position(verify)
        )
        self._stream = response["EventStream"]
        self.closed = False

    def events(self) -> Iterator[dict[str, Any]]:
        """The subscription's events as responses, until it ends, fails or is closed."""
        try:
            for event in self._stream:
                body = event.get("SubscribeToShardEvent")
                if body is not None:
                    yield to_response(body)
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._stream.close()
