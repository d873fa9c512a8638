"""The parent-before-child rule, in one place.

Kinesis keeps per-key order across a split or merge only if a child shard is read after its parents
are read to their ends. These pure functions decide, from the shard states in an offset and what
ListShards returned, which shards may be read, which shards are new, and which finished parents can
be forgotten. A parent that is not in the offset (never seen, or past retention) counts as finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...model import LATEST, TRIM, Position, ShardInfo
from ..state.offsets import ShardState


def readable(states: Mapping[str, ShardState]) -> list[str]:
    """Shards that may be read now: not finished, and every parent still in the offset is finished."""
    out = []
    for sid in sorted(states):
        state = states[sid]
        if state.finished:
            continue
        if all(p not in states or states[p].finished for p in state.parents):
            out.append(sid)
    return out


def initial_states(listed: Iterable[ShardInfo], start: Position) -> dict[str, ShardState]:
    """The shards a new query starts with, all at the query's starting position. Given every listed
    shard (TRIM_HORIZON, AT_TIMESTAMP), closed parents are read first and children wait for them; a
    query starting now (LATEST) passes only the open shards (see `open_only`)."""
    shards = list(listed)
    return {s.shard_id: ShardState(position=start, parents=s.parents) for s in shards}


def named_states(
    listed: Iterable[ShardInfo], default: Position, named: Mapping[str, Position]
) -> tuple[dict[str, ShardState], list[str], list[str]]:
    """The shards a new query starts with when the user named some shards' positions (restoring another
    system's checkpoint, see `config.start_positions`), in terms of the lineage:

    - a named shard starts where it is named;
    - a shard that a named shard descends from is not read: the checkpoint got past it;
    - a shard that descends from a named shard starts at TRIM_HORIZON, after its parents (born after
      the checkpoint, or not reached by it yet);
    - every other shard starts at `default` (LATEST: the open ones only, as `initial_states`).

    Returns (states, named shards not listed whose children are: past retention, unknown names)."""
    shards = list(listed)
    by_id = {s.shard_id: s for s in shards}
    children: dict[str, list[str]] = {}
    for shard in shards:
        for parent in shard.parents:
            children.setdefault(parent, []).append(shard.shard_id)
    gone = sorted(sid for sid in named if sid not in by_id and sid in children)
    unknown = sorted(sid for sid in named if sid not in by_id and sid not in children)
    ancestors = _reach([sid for sid in named if sid in by_id], {s.shard_id: s.parents for s in shards})
    descendants = _reach(named, children)
    states: dict[str, ShardState] = {}
    for shard in shards:
        sid = shard.shard_id
        if sid in named:
            position = named[sid]
        elif sid in ancestors:
            continue
        elif sid in descendants:
            position = Position.trim_horizon()
        elif default.kind == LATEST and shard.closed:
            continue
        else:
            position = default
        states[sid] = ShardState(position=position, parents=shard.parents)
    return states, gone, unknown


def past_ends(listed: Iterable[ShardInfo], ends: Mapping[str, Position]) -> set[str]:
    """The shards a batch read leaves out because a named end comes before them: every descendant of a
    shard whose endingPosition is one of its sequence numbers. Their records follow that end in per-key
    order, so reading them would return records of a key after the point the user asked to stop at."""
    children: dict[str, list[str]] = {}
    for shard in listed:
        for parent in shard.parents:
            children.setdefault(parent, []).append(shard.shard_id)
    return _reach([sid for sid, end in ends.items() if end.anchor is not None], children)


def open_only(listed: Iterable[ShardInfo]) -> list[ShardInfo]:
    return [s for s in listed if not s.closed]


def _reach(start: Iterable[str], links: Mapping[str, Iterable[str]]) -> set[str]:
    """Every shard reached from `start` by following `links` (parents, or children) any number of
    times, `start` itself not included unless reached. A walk without recursion: a long-lived stream
    resharded every hour has thousands of generations."""
    out: set[str] = set()
    stack = list(start)
    for _step in range(sum(len(list(v)) for v in links.values()) + len(stack) + 1):  # each shard enters once
        if not stack:
            break
        for linked in links.get(stack.pop(), ()):
            if linked not in out:
                out.add(linked)
                stack.append(linked)
    return out


def _ancestors(states: Mapping[str, ShardState], listed: Iterable[ShardInfo]) -> set[str]:
    """Every shard from which a shard of the offset descends."""
    parents = {s.shard_id: s.parents for s in listed}
    for sid, state in states.items():
        parents.setdefault(sid, state.parents)
    return _reach(states, parents)


def merge_discovered(states: Mapping[str, ShardState], listed: Iterable[ShardInfo]) -> dict[str, ShardState]:
    """Add shards ListShards shows that the offset does not know. A new shard is read from its first
    record (TRIM_HORIZON), whatever the query's starting position: it was born after the query started.
    A listed shard with a known descendant was already read and dropped (or predates the query) and is
    never added again, so a forgotten parent cannot be read twice."""
    shards = list(listed)
    known_ancestors = _ancestors(states, shards)
    merged = dict(states)
    for shard in shards:
        if shard.shard_id in merged or shard.shard_id in known_ancestors:
            continue
        merged[shard.shard_id] = ShardState(position=Position.trim_horizon(), parents=shard.parents)
    return merged


def prune_finished(states: Mapping[str, ShardState]) -> dict[str, ShardState]:
    """Drop finished shards whose children are all in the offset and have all been read at least once
    (or are finished themselves: children that expired unread), so offsets stay small on long-lived
    streams. A finished shard with no known child yet stays: its children are still to be discovered,
    and it must keep them waiting until then."""
    children: dict[str, list[str]] = {}
    for sid, state in states.items():
        for parent in state.parents:
            children.setdefault(parent, []).append(sid)
    kept = {}
    for sid, state in states.items():
        kids = children.get(sid, [])
        if state.finished and kids and all(states[k].polled_ms > 0 or states[k].finished for k in kids):
            continue
        kept[sid] = state
    return kept


def mark_expired(
    states: Mapping[str, ShardState], listed: Iterable[ShardInfo]
) -> tuple[dict[str, ShardState], list[str]]:
    """Shards of the offset that a full ListShards no longer shows have gone past retention: nothing
    of them can be read any more, so they count as finished and their children may start."""
    present = {s.shard_id for s in listed}
    out = dict(states)
    gone = []
    for sid, state in states.items():
        if sid not in present and not state.finished:
            out[sid] = ShardState(
                position=Position.shard_end(), parents=state.parents, polled_ms=state.polled_ms
            )
            gone.append(sid)
    return out, gone


def forget_aged_out(
    states: Mapping[str, ShardState], listed: Iterable[ShardInfo]
) -> tuple[dict[str, ShardState], list[str]]:
    """Finished shards a full ListShards no longer shows are forgotten: their records aged out (Kinesis
    lists a closed shard until its retention has passed). A child never read yet whose parent is one of
    them may have lost its oldest records with it: a query stopped past retention while the stream
    resharded (an on-demand stream does so by itself). Returns the states without those parents, and
    those children, which the caller reports as possible loss."""
    present = {s.shard_id for s in listed}
    gone = {sid for sid, state in states.items() if state.finished and sid not in present}
    out = {sid: state for sid, state in states.items() if sid not in gone}
    children = sorted(
        sid
        for sid, state in out.items()
        if state.position.kind == TRIM and state.polled_ms == 0 and any(p in gone for p in state.parents)
    )
    return out, children
