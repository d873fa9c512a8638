"""Which service a stream is read through: a Kinesis data stream, or a DynamoDB table's stream.

The source's planner, lineage rule and read loop are the same for both (issue #66); a stream's
`StreamSpec.service` picks the proxy that speaks its service's API, and this is the one place that
knows there are two.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..config.stream_specs import DYNAMODB, StreamSpec
from ..errors import StreamNotFoundError
from ..model import Position, ShardInfo, StreamIdentity
from .kinesis import KinesisProxy
from .tip_look import TipAnswer


class StreamProxy(Protocol):
    """What the source asks of a stream, whichever service serves it."""

    spec: StreamSpec

    @property
    def name(self) -> str: ...

    @property
    def client(self) -> Any: ...

    def identity(self) -> StreamIdentity: ...

    def check_same_stream(self, within_s: float = 0.0) -> None: ...

    def deleted(self) -> StreamNotFoundError: ...

    def list_shards(self, open_only: bool = False) -> list[ShardInfo]: ...

    def shard_iterator(self, shard_id: str, position: Position, verify: bool = False) -> str: ...

    def look_past_tip(self, shard_id: str, position: Position, iterator: str | None) -> TipAnswer: ...

    def get_records(self, iterator: str, limit: int) -> dict[str, Any]: ...

    def successor(self) -> str | None: ...

    def followed(self) -> bool: ...


def proxy_for(spec: StreamSpec, *, agent: str, max_attempts: int | None = None) -> StreamProxy:
    """The proxy of `spec`'s service (`KinesisProxy` or `dynamodb_streams.StreamsProxy`, which share
    the surface the source uses)."""
    if spec.service == DYNAMODB:
        from .dynamodb_streams import StreamsProxy  # (a Kinesis query never loads it)

        return StreamsProxy(spec, agent=agent, max_attempts=max_attempts)
    return KinesisProxy(spec, agent=agent, max_attempts=max_attempts)
