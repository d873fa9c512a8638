"""Shard-to-task assignment: pure functions from shards to Spark task indexes.

The offset records which task reads which shard, so a replayed batch is planned exactly as logged,
whatever the task options are on restart; a new assignment applies from the next new batch.
"""

from __future__ import annotations

from collections.abc import Sequence


def one_per_shard(shard_ids: Sequence[str]) -> dict[str, int]:
    """The default: every readable shard gets its own task, in shard id order."""
    return {sid: index for index, sid in enumerate(sorted(shard_ids))}
