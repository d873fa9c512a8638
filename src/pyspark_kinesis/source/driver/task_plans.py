"""The tasks of a batch, as Spark's `partitions()` hands them out: each a plain `TaskPlan` built from the
offset alone (what it reads, from where, within which budget), so a replay after a restart plans
exactly the tasks the first run did.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ...model import ShardInfo, ShardRef
from ..options import SourceConfig
from ..state.offsets import ShardPlan, SourceOffset, TaskPlan
from .discovery import recreated_streams

log = logging.getLogger(__name__)


def plan_tasks(
    offset: SourceOffset,
    config: SourceConfig,
    holders: Mapping[ShardRef, str] | None = None,
    relay_key: bytes = b"",
    listed: Mapping[ShardRef, ShardInfo] | None = None,
) -> list[TaskPlan]:
    """The tasks of the batch `offset` describes, in task order: what each reads, from where, within
    which budget; with `holders`, where each shard's last read kept its continuation (a hint the
    offset does not carry: see `ShardEnd.holder`); with `listed`, what the listing that planned the
    batch said of each shard: its HashKeyRange and a closed shard's last sequence number (a replay gets
    what its first attempt had: see `Planner.listed`). Shards of streams no longer in the options are left out (their settings are gone),
    and so, with failOnDataLoss=false, are those of streams re-created since (see `recreated_streams`)."""
    plans = []
    gone = set(recreated_streams(offset, config))
    for task, refs in sorted(offset.tasks().items()):
        kept = [ref for ref in refs if config.stream(ref.stream) is not None and ref.stream not in gone]
        if len(kept) < len(refs):
            # A batch logged before a restart that removed streams: the removed ones cannot be read;
            # they leave the query here, as from the next batch on.
            gone_now = ", ".join(sorted({ref.stream for ref in refs} - {ref.stream for ref in kept}))
            log.warning("Batch %d: skipping shards of streams no longer in the options, or re-created: %s", offset.batch, gone_now)  # fmt: skip
        if not kept:
            continue
        slices = tuple(
            ShardPlan(
                stream,
                sid,
                state.position,
                state.max_records,
                state.max_bytes,
                state.closed,
                state.tip_ms,
                (holders or {}).get(ref, ""),
                None if info is None else (info.start_hash, info.end_hash),
                None if info is None else info.known_end,
                None if info is None else info.first_seq,
            )
            for ref in kept
            for stream, sid in (ref,)
            for state in (offset.state(ref),)
            for info in ((listed or {}).get(ref),)
        )
        dropped = tuple(sorted({ref.stream for ref in refs} - {ref.stream for ref in kept}))
        plans.append(
            TaskPlan(
                offset.token, offset.batch, task, slices, offset.cutoff_ms, relay_key, offset.drain, dropped
            )
        )
    return plans
