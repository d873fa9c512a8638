"""Positions the options name (startingPosition, endingPosition, per shard or as a timestamp) checked
against a stream's listing and its retention, at query start: an error naming the option for a shard
the stream does not list or a sequence number outside its shard, and a loss (judged by
failOnDataLoss) for a start already past retention. Apart from discovery.py, which owns the listings
themselves; what a named shard means for its relatives is the lineage rule's (`lineage.named_states`).
"""

from __future__ import annotations

import logging

from ...config.stream_specs import StreamSpec
from ...errors import DataLossError, OptionError
from ...model import MIN_RETENTION_MS, RETENTION_MARGIN_MS, TIMESTAMP, Position, ShardInfo
from ..state.offsets import ShardState
from . import lineage

log = logging.getLogger(__name__)


def check_start_in_retention(spec: StreamSpec, start: Position, fail_on_data_loss: bool, now: int) -> None:
    """A start at a timestamp older than the stream's retention asks for records that may be gone:
    an error naming startingPosition at query start (with failOnDataLoss=false a warning)."""
    if start.kind != TIMESTAMP or start.ts_ms is None:
        return
    retention = spec.retention_ms or MIN_RETENTION_MS
    if now - start.ts_ms < retention - RETENTION_MARGIN_MS:
        return
    text = (
        f"{start.describe()} is longer ago than the retention of {spec.describe()} ({retention // 3_600_000} h): "
        "the records from then up to the oldest one left may be gone"
    )
    if fail_on_data_loss:
        raise OptionError(
            "startingPosition",
            text,
            "Start at TRIM_HORIZON (the oldest record left), or set failOnDataLoss=false to accept it",
        )
    log.warning(
        "Kinesis option 'startingPosition': %s; failOnDataLoss=false: reading from the oldest one left", text
    )


def named_ends(spec: StreamSpec, listed: list[ShardInfo]) -> dict[str, Position]:
    """A stream's shards named in endingPosition, checked against the listing: an unknown shard, or a
    sequence number outside its shard's range, is an error naming the option."""
    infos = {s.shard_id: s for s in listed}
    ends = dict(spec.shard_ends)
    for sid, position in ends.items():
        info = infos.get(sid)
        if info is None:
            raise OptionError(
                f"endingPosition.{sid}",
                f"names a shard that {spec.describe()} does not list (a typo, or past retention)",
                f"Name shards it lists: {_listed(infos)}.",
            )
        _check_in_shard("endingPosition", spec, info, position)
    return ends


def _listed(infos: dict[str, ShardInfo]) -> str:
    """The shard ids an error about a named shard offers instead (the first 20)."""
    return ", ".join(sorted(infos)[:20]) + (" ..." if len(infos) > 20 else "")


def _check_in_shard(option: str, spec: StreamSpec, info: ShardInfo, position: Position) -> None:
    """A position naming a sequence number must name one of that shard's."""
    if position.anchor is not None and not info.holds(position.anchor):
        raise OptionError(
            f"{option}.{info.shard_id}",
            f"sequence number {position.anchor} is not in {info.shard_id} of {spec.describe()} (its range "
            f"starts at {info.first_seq})",
            "Give a sequence number read from that shard.",
        )


def named_starts(
    spec: StreamSpec, listed: list[ShardInfo], fail_on_data_loss: bool, now: int
) -> dict[str, ShardState]:
    """A stream's first shard states when the options name shards (`config.start_positions`): the
    lineage rule's resolution (`lineage.named_states`), checked against the listing. An unknown shard,
    or a sequence number outside its shard's range, is an error naming the option; a named shard past
    retention (its children listed, it not) is a loss, judged by failOnDataLoss."""
    named = dict(spec.shard_starts)
    option = "startingPosition"
    infos = {s.shard_id: s for s in listed}
    for sid, position in named.items():
        info = infos.get(sid)
        if info is not None:
            _check_in_shard(option, spec, info, position)
        check_start_in_retention(spec, position, fail_on_data_loss, now)
    check_start_in_retention(spec, spec.starting_position, fail_on_data_loss, now)
    states, gone, unknown = lineage.named_states(listed, spec.starting_position, named)
    if unknown:
        raise OptionError(
            f"{option}.{unknown[0]}",
            f"names {'shards' if len(unknown) > 1 else 'a shard'} {', '.join(unknown)} that {spec.describe()} "
            "does not have (nor any child of it: a typo, or past retention with its children)",
            f"Name shards it lists: {_listed(infos)}.",
        )
    if gone:
        text = (
            f"Kinesis stream {spec.describe()}: the named shards {', '.join(gone)} are past retention (their "
            "children are listed, they are not): the records from their named positions on are gone"
        )
        if fail_on_data_loss:
            raise DataLossError(
                f"{text}. Set failOnDataLoss=false to accept the loss and read their children from their "
                "oldest records, or name the children's positions instead."
            )
        log.warning("%s; failOnDataLoss=false: reading their children from their oldest records", text)
    return states
