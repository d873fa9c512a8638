"""Where a batch ended, read back on the driver from its tasks' records (see `state.batch_log`).

Every task of a batch records where each of its shards stopped; the driver reads those records when
it plans from the batch's offset, with one listing of the batch's folder, which also shows the loss
notes that replays, retries and losing attempts left (they are reported whichever attempt wrote them).
What a record cannot say, the rules here decide:

- A task without a record never ran (a `foreachBatch` that used part of its DataFrame): its record is
  closed as "read nothing" and its shards are read again from the same positions, if the batch is
  known to have been planned; otherwise the records under metadataPath are gone.
- A task whose record the driver read before (`read.json`) and that is missing now had its record
  deleted from under a batch that ran: reading its shards again would duplicate what they delivered.
- A record that says its run dropped a stream (removed from the options, or re-created, when the
  batch ran) did not read that stream's shards: they are read again from the same positions, should
  the stream be back in the options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...errors import CheckpointMismatchError
from ...model import Position, ShardRef
from ..state.batch_log import READ_NAME, BatchEndLog, task_name
from ..state.offsets import ShardEnd, SourceOffset, TaskEnd

log = logging.getLogger(__name__)


def read_ends(
    batch_log: BatchEndLog, offset: SourceOffset, wanted: Callable[[ShardRef], bool]
) -> tuple[dict[ShardRef, ShardEnd], list[ShardRef]]:
    """The ends of batch `offset.batch`'s shards that `wanted` keeps (with the losses noted beside their
    records), and those of its shards to read again from the same positions (their task never ran, or
    did not read their stream)."""
    token, batch = offset.token, offset.batch
    names = batch_log.names(token, batch)
    seen = batch_log.tasks_read(token, batch) if READ_NAME in names else frozenset()
    ends: dict[ShardRef, ShardEnd] = {}
    unrun: list[ShardRef] = []
    tasks: list[int] = []
    for task, all_refs in offset.tasks().items():
        refs = [ref for ref in all_refs if wanted(ref)]
        if not refs:
            continue
        starts = {ref: offset.state(ref).position for ref in refs}
        listed = task_name(task) in names or task in seen
        record = batch_log.read(token, batch, task) if listed else None
        if record is None:
            if task in seen:
                raise _deleted(batch_log, batch, task)
            record = _close_unrun(batch_log, offset, task, starts)
        batch_log.check(record, starts)
        tasks.append(task)
        for ref in refs:
            end = None if ref[0] in record.dropped else record.shards[ref]
            if end is None or end.unrun:  # read again from the same position, ahead of the others
                unrun.append(ref)
            else:
                ends[ref] = end
    if tasks and READ_NAME not in names:
        batch_log.mark_read(token, batch, tasks)
    return batch_log.with_noted_losses(token, batch, ends, names), unrun


def other_streams(written: set[str], configured: set[str]) -> CheckpointMismatchError:
    """The checkpoint's streams are none of those the options name. A DynamoDB table whose stream was
    disabled and enabled again has a new stream (a new ARN): options that name the new stream by its
    ARN for a checkpoint of the old one are told so, with the ways on (a table named by name is
    followed from one stream to the next: `stream_set`)."""
    tables = {_table(arn): arn for arn in written if _table(arn)}
    renewed = sorted((tables[_table(arn)], arn) for arn in configured if _table(arn) in tables)
    if renewed:
        old, new = renewed[0]
        return CheckpointMismatchError(
            f"The stream of DynamoDB table '{_table(new)}' is a new one ({new}) since this checkpoint was "
            f"written for {old}: the table's stream was disabled and enabled again, and the checkpoint's "
            f"positions are the old stream's. Name the table by its name (streamName={_table(new)}) to read "
            "what is left of the old stream (readable 24 hours after it was disabled) and then the new one "
            "from its start; or start a new checkpointLocation and metadataPath for the new stream alone."
        )
    return CheckpointMismatchError(
        f"The checkpoint was written for Kinesis stream(s) {', '.join(sorted(written))}, but the options "
        f"name {', '.join(sorted(configured))}: none of them. Use a new checkpointLocation (and "
        "metadataPath) for other streams; to add or remove streams, keep at least one."
    )


def _table(arn: str) -> str | None:
    """The table of a DynamoDB stream ARN (arn:aws:dynamodb:REGION:ACCOUNT:table/T/stream/LABEL)."""
    if ":dynamodb:" not in arn or "/stream/" not in arn:
        return None
    return arn.split(":table/", 1)[-1].split("/stream/", 1)[0]


def _deleted(batch_log: BatchEndLog, batch: int, task: int) -> CheckpointMismatchError:
    return CheckpointMismatchError(
        f"The batch-end record of batch {batch}, task {task} under metadataPath '{batch_log.location}' was "
        "deleted after the query read it: that task ran and its rows were delivered, so its shards cannot "
        "be read again from the batch's start without duplicates, nor from its end, which only the record "
        "held. Restore the record (metadataPath must be kept as the query writes it: exclude it from "
        "cleanups and expiry rules), or start over with a new checkpointLocation and metadataPath."
    )


def _close_unrun(
    batch_log: BatchEndLog, offset: SourceOffset, task: int, starts: dict[ShardRef, Position]
) -> TaskEnd:
    """A task of a committed batch without a record never ran (see `batch_log`), if the batch is
    known to have been planned; otherwise the records under metadataPath are gone."""
    if not batch_log.was_planned(offset.token, offset.batch):
        raise CheckpointMismatchError(
            f"The batch-end record of batch {offset.batch}, task {task} is missing under metadataPath "
            f"'{batch_log.location}', and so is the record that this batch was planned, although "
            "the checkpoint says that batch ran: the metadataPath was changed or cleaned. Restore it, or "
            "start over with a new checkpointLocation."
        )
    record = batch_log.close_unrun(offset.token, offset.batch, task, starts)
    if all(end.unrun for end in record.shards.values()):
        log.info(
            "Batch %d, task %d never ran (a foreachBatch that used only part of its DataFrame, or none "
            "of it): its shards %s are read again from the same positions",
            offset.batch,
            task,
            ", ".join(sid for _stream, sid in sorted(starts)),
        )
    return record
