"""Which streams the offset holds: those the options name, and a table's next stream in its turn.

The options name streams; the offset holds one entry per stream ARN. The two differ in three ways,
each decided here: a stream added to the options starts at its starting position, a stream removed
from them leaves the offset, and a DynamoDB table named by name whose stream was disabled and enabled
again (a new stream, a new ARN) is followed from one stream to the next.

The last is the lineage rule one level up: the new stream is read only once the old one is read to
its end (an item changed in the old stream and again in the new must come out in that order), and
then from its first change (TRIM_HORIZON: every change since it was enabled), the old stream's entry
leaving the offset as a removed stream's does. The old stream is read to its end when every shard of
it is finished: disabling closes its shards, and a table has one enabled stream at most, so a newer
stream (ListStreams) says the old one is disabled. A child the service lists minutes after its parent
closed could still be unlisted then, so the move waits until `LATE_LISTING_MS` after the new stream
was created (the old one was disabled before that) and a listing made since shows nothing unread.
A restarted query, whose options now resolve the table to its new stream, goes on with the old one
first by the same rule (`table_streams`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...config.table_streams import follows_table, owner_of
from ...errors import StreamAccessError
from ...model import Position
from ..options import SourceConfig
from ..state.offsets import ShardState
from . import lineage
from .discovery import LATE_LISTING_MS, RETENTION_MS, ShardDiscovery

log = logging.getLogger(__name__)

Streams = dict[str, dict[str, ShardState]]


class StreamSet:
    """Decides the offset's streams for each batch; remembers only when each table was last asked
    for a newer stream (ListStreams: at most once per shardDiscoveryIntervalMs)."""

    def __init__(self, config: SourceConfig, discovery: ShardDiscovery, clock: Callable[[], int]) -> None:
        self.config, self.discovery, self.clock = config, discovery, clock
        self._asked: dict[str, int] = {}

    def covered(self, key: str) -> bool:
        """Whether the options still name stream `key` (its ARN, or the table it is a stream of)."""
        return owner_of(self.config.streams, key) is not None

    def follow_options(self, streams: Streams) -> Streams:
        """Streams added to the options since the checkpoint start at their starting position; streams
        removed from them leave the offset (and are not read again). A table whose offset holds an
        earlier stream of it is not started again at its current one: that one follows in its turn."""
        out = {key: states for key, states in streams.items() if self.covered(key)}
        for key in sorted(set(streams) - set(out)):
            log.warning(
                "Kinesis stream %s is no longer in the options: dropped from the query's offsets", key
            )
        held = {id(owner_of(self.config.streams, key)) for key in out}
        for spec in self.config.streams:
            if id(spec) not in held and spec.resolved_arn not in out:
                out[spec.resolved_arn] = self.discovery.initial_states(spec.resolved_arn)
                log.info(
                    "Kinesis stream %s was added to the options: read from its starting position",
                    spec.resolved_arn,
                )
        return out

    def renewed(self, streams: Streams) -> Streams:
        """`streams` with each table's stream read to its end replaced by the table's next stream, once
        there is one (see the module's docstring)."""
        out = dict(streams)
        for key in sorted(streams):
            owner = owner_of(self.config.streams, key)
            if owner is None or not follows_table(owner):
                continue
            following = self._next_stream(key, out[key])
            if following is None:
                continue
            successor, states = following
            del out[key]
            out[successor] = states
        return out

    def _next_stream(
        self, key: str, states: dict[str, ShardState]
    ) -> tuple[str, dict[str, ShardState]] | None:
        if not all(state.finished for state in states.values()):
            return None
        now = self.clock()
        if key in self._asked and now - self._asked[key] < self.config.shard_discovery_interval_ms:
            return None
        self._asked[key] = now
        try:
            successor = self.discovery.proxy(key).successor()
            if successor is None:
                return None
            created = self.discovery.proxy(successor).identity().created_ms or now
            if now < created + LATE_LISTING_MS:
                return None
            # (a listing made now: a child listed late would show here, unread)
            relisted = self.discovery.refresh(key, states, force=True, cutoff_ms=None)
        except StreamAccessError as exc:
            log.warning("DynamoDB stream %s: could not ask for the table's next stream: %s", key, exc)
            return None
        if relisted is states or not all(state.finished for state in relisted.values()):
            return None
        if now - created > RETENTION_MS:
            self._aged_out(key, successor, created)
        log.warning(
            "DynamoDB stream %s was disabled and is read to its end; the table's stream was enabled again "
            "as %s: read from its first change",
            key,
            successor,
        )
        return successor, lineage.prune_finished(
            self.discovery.initial_states(successor, Position.trim_horizon(), created)
        )

    def _aged_out(self, key: str, successor: str, created: int) -> None:
        self.discovery.loss(
            f"DynamoDB stream {successor} (the table's stream after {key}) was enabled "
            f"{(self.clock() - created) // 3_600_000} hours ago, and changes stay 24 hours: its oldest "
            "changes may be gone",
            "and read what is left",
        )
