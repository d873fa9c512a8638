"""The checkpoint commands of `pyspark-kinesis`: lag and inspect.

They read a query's checkpoint and metadataPath (never write), so they are safe beside a running query
and after it stopped. `lag` then asks Kinesis what lies after each shard's committed position.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
import typer
from rich.table import Table

from ..config.stream_specs import DYNAMODB, StreamSpec
from .output import console
from .streams import JSON, client, emit_json, fail

if TYPE_CHECKING:
    from ..model import Position

CHECKPOINT = typer.Option(..., "--checkpoint", help="The query's checkpointLocation.")
METADATA = typer.Option(..., "--metadata-path", help="The query's metadataPath.")
STORAGE = typer.Option(
    None, "--storage-options", help="JSON of fsspec options for both (S3 endpoint, profile...)."
)


def _open(checkpoint: str, metadata_path: str, storage_options: str | None) -> Any:
    from .query_state import Checkpoint

    try:
        options = orjson.loads(storage_options) if storage_options else None
    except orjson.JSONDecodeError as exc:
        raise fail(f"--storage-options is not JSON: {exc}") from None
    return Checkpoint(checkpoint, metadata_path, options)


def _stream_of(arn: str) -> tuple[str, str | None]:
    """(name, region) from a stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME); a DynamoDB
    table's stream (arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL) is named by its table."""
    parts = arn.split(":")
    region = parts[3] if len(parts) > 5 and parts[3] else None
    if ":dynamodb:" in arn and "/stream/" in arn:
        return arn.split(":table/", 1)[-1].split("/stream/", 1)[0], region
    return arn.rsplit("/", 1)[-1], region


def lag(
    checkpoint: str = CHECKPOINT,
    metadata_path: str = METADATA,
    storage_options: str = STORAGE,
    endpoint_url: str = typer.Option(
        None,
        "--endpoint-url",
        help="Kinesis endpoint (default: the one the query recorded under metadataPath, else AWS's).",
    ),
    region: str = typer.Option(
        None, "--region", help="Region (default: the one the query recorded, else the stream ARN's)."
    ),
    max_records: int = typer.Option(
        1_000_000, min=1, max=100_000_000, help="Stop counting a shard's backlog after this many records."
    ),
    timeout: float = typer.Option(60.0, min=1.0, max=3600.0, help="Seconds to spend counting per shard."),
    as_json: bool = JSON,
) -> None:
    """Each shard's committed position, MillisBehindLatest and the records after it (read to count)."""
    try:
        state = _open(checkpoint, metadata_path, storage_options)
        batch = state.batch(committed_only=True)
        recorded = state.where(batch.offset.token)
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    told: set[str] = set()
    rows = []
    for (arn, sid), position in sorted(batch.positions_after().items()):
        name, arn_region = _stream_of(arn)
        place = _place_of(recorded, arn)
        shard_region = region or place.get("region") or arn_region
        shard_endpoint = endpoint_url or place.get("endpointUrl")
        if arn not in told and not as_json:
            told.add(arn)
            console.print(_where_said(name, shard_region, shard_endpoint, region, endpoint_url, place))
        row: dict[str, Any] = {"stream": arn, "shard": sid, "position": position.describe()}
        if ":dynamodb:" in arn:  # a table's stream (service=dynamodb): counted through its own API
            make_client = functools.partial(_table_stream, arn, shard_region, shard_endpoint)
        else:
            make_client = functools.partial(client, shard_region, shard_endpoint)
        row.update(_behind(position, make_client, name, sid, max_records, timeout))
        rows.append(row)
    if as_json:
        emit_json({"batch": batch.batch, "shards": rows})
    else:
        _print_lag(batch.batch, rows)


def _behind(
    position: Position, make_client: Callable[[], Any], name: str, sid: str, max_records: int, timeout: float
) -> dict[str, Any]:
    """How far a shard's committed position is behind: counted by reading (an ended shard: nothing;
    LATEST: unknown, -1)."""
    from ..aws.admin import backlog
    from ..errors import StreamAccessError

    if position.is_end:
        return {"records": 0, "millisBehindLatest": 0, "complete": True, "finished": True}
    if position.kind == "latest":
        return {"records": 0, "millisBehindLatest": -1, "complete": False, "finished": False}
    try:
        made = make_client()
        if isinstance(made, StreamSpec):  # (a table's stream: `_table_stream`)
            from ..aws.dynamodb_streams import table_backlog

            found = table_backlog(made, sid, position, max_records, timeout)
        else:
            found = backlog(made, name, sid, position, max_records, timeout)
    except StreamAccessError as exc:
        raise fail(str(exc)) from None
    return {
        "records": found.records,
        "millisBehindLatest": found.millis_behind,
        "complete": found.complete,
        "finished": False,
    }


def _table_stream(arn: str, region: str | None, endpoint: str | None) -> StreamSpec:
    """A table's stream as the CLI reads it: by ARN, in its region, with the credential chain."""
    from ..config.aws_settings import AwsSettings

    return StreamSpec(
        arn, AwsSettings(region=region or "us-east-1", endpoint_url=endpoint), arn=arn, service=DYNAMODB
    )


def _print_lag(batch: int, rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"lag after committed batch {batch}")
    for column in ("stream", "shard", "committed position", "records behind", "ms behind latest"):
        table.add_column(column, no_wrap=column == "shard")
    unsure = False
    for row in rows:
        count = "done" if row["finished"] else f"{row['records']:,}{'' if row['complete'] else '+'}"
        behind = "?" if row["millisBehindLatest"] < 0 else f"{row['millisBehindLatest']:,}"
        if row["records"] and row["millisBehindLatest"] == 0:
            # (a server that answers 0 while records follow: local servers do; the count is what holds)
            behind, unsure = "? (server said 0)", True
        table.add_row(_stream_of(row["stream"])[0], row["shard"], row["position"], count, behind)
    console.print(table)
    console.print(f"total records behind: {sum(r['records'] for r in rows):,} ('+': counting stopped early)")
    if unsure:
        console.print(
            "'? (server said 0)': the server answered MillisBehindLatest 0 although records follow the "
            "position; the records behind are counted by reading them"
        )


def _place_of(recorded: dict[str, dict[str, str | None]], arn: str) -> dict[str, str | None]:
    """Where the query recorded stream `arn` is served. A table's later stream (followed after the
    table's stream was disabled and enabled again) is not recorded: it is served where the table's
    first one was."""
    if arn in recorded or "/stream/" not in arn:
        return recorded.get(arn, {})
    table = arn.rsplit("/stream/", 1)[0] + "/stream/"
    return next((place for key, place in sorted(recorded.items()) if key.startswith(table)), {})


def _where_said(
    name: str,
    region: str | None,
    endpoint: str | None,
    region_given: str | None,
    endpoint_given: str | None,
    place: dict[str, str | None],
) -> str:
    """Where `lag` reaches a stream, and where it learned that."""
    if endpoint_given or region_given:
        source = "as given"
    elif place:
        source = "as the query recorded under metadataPath"
    else:
        source = "from the stream's ARN (the query recorded no endpoint: an earlier build started it; give --endpoint-url if it is not AWS)"
    return f"stream {name}: region {region or 'default'}, endpoint {endpoint or 'AWS'} ({source})"


_REMOVED = "record removed *"


def _end_cells(end: Any, task: int, found: Any) -> tuple[str, str, str, str]:
    """Where a shard's read in the batch ended, as `inspect` shows it (or why it cannot say)."""
    if end is None and task >= 0 and found.committed:
        # (records of committed batches are removed once a later batch commits: only the newest
        # batches' are kept, for a replay)
        return (_REMOVED, "", "", "")
    if end is None and task >= 0 and task in found.read:
        return ("record deleted (the driver read it: it was removed since)", "", "", "")
    if end is None:
        return ("not read" if task < 0 else "no record yet", "", "", "")
    if end.unrun:
        return ("task never ran", "0", "0", "")
    return (end.reached.describe(), str(end.records), str(end.bytes), str(end.millis_behind))


def inspect(
    checkpoint: str = CHECKPOINT,
    metadata_path: str = METADATA,
    storage_options: str = STORAGE,
    batch: int = typer.Option(None, help="Batch id (default: the latest in the offset log)."),
    as_json: bool = JSON,
) -> None:
    """An offset-log entry and its batch-end records, readable."""
    try:
        found = _open(checkpoint, metadata_path, storage_options).batch(batch)
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    offset = found.offset
    if as_json:
        emit_json(
            {
                "batch": found.batch,
                "sourceBatch": offset.batch,
                "committed": found.committed,
                "offset": found.raw,
                "records": {str(t): (r.to_json() if r else None) for t, r in found.records.items()},
            }
        )
        return
    numbering = (
        ""
        if offset.batch == found.batch
        else f" = the Kinesis source's batch {offset.batch} (it counts only batches that read Kinesis: "
        "the numbers differ when the query's other sources ran batches without it)"
    )
    console.print(
        f"Spark batch {found.batch}{numbering}, {'committed' if found.committed else 'not committed'}; "
        f"query token {offset.token}, {len(found.records)} task(s)"
    )
    ends = {ref: end for r in found.records.values() if r for ref, end in r.shards.items()}
    table = Table()
    for column in ("stream", "shard", "task", "start", "end", "records", "bytes", "ms behind"):
        table.add_column(column, no_wrap=column == "shard")
    pruned = False
    for stream, shards in sorted(offset.streams.items()):
        for sid, state in sorted(shards.items()):
            cells = _end_cells(ends.get((stream, sid)), state.task, found)
            pruned = pruned or cells[0] == _REMOVED
            task = "-" if state.task < 0 else str(state.task)
            table.add_row(_stream_of(stream)[0], sid, task, state.position.describe(), *cells)
    console.print(table)
    if pruned:
        console.print(
            "* a committed batch's records are removed once a later batch commits (only the newest are "
            "kept, for replays): where it ended is where the next batch starts (inspect that batch)"
        )
    for (stream, sid), end in sorted(ends.items()):
        for what in end.losses:
            console.print(f"data loss, {_stream_of(stream)[0]} {sid} (failOnDataLoss=false): {what}")
