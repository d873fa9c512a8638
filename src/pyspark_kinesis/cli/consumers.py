"""`pyspark-kinesis consumers`: list, register and deregister a stream's enhanced fan-out consumers.

Deregistering is an operator's decision, made here and never by a running query on its own: a
consumer a query still uses would vanish under it, and a consumer left registered costs money per
shard-hour, so `list` shows every consumer of a stream with its state and age, whoever registered it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from rich.table import Table

from .streams import ENDPOINT, JSON, REGION, clear_errors, client, console, emit_json, fail

consumers_app = typer.Typer(
    add_completion=False, help="Enhanced fan-out consumers of a stream: list, register, deregister."
)


def _stream_arn(kinesis: Any, stream: str) -> str:
    from ..aws.admin import wait_active

    return stream if stream.startswith("arn:") else str(wait_active(kinesis, stream, 30.0)["StreamARN"])


def _row(consumer: Any) -> dict[str, Any]:
    created = (
        datetime.fromtimestamp(consumer.created, UTC).isoformat(timespec="seconds")
        if consumer.created is not None
        else None
    )
    return {
        "ConsumerName": consumer.name,
        "ConsumerARN": consumer.arn,
        "status": consumer.status,
        "created": created,
    }


@consumers_app.command("list")
def list_(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Every consumer registered on the stream, with its state and creation time."""
    from ..aws.consumers import list_consumers

    with clear_errors():
        kinesis = client(region, endpoint_url)
        rows = [_row(c) for c in list_consumers(kinesis, _stream_arn(kinesis, stream))]
    if as_json:
        emit_json(rows)
        return
    table = Table(title=f"consumers of {stream}")
    for column in ("ConsumerName", "status", "created", "ConsumerARN"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["ConsumerName"], row["status"], row["created"] or "-", row["ConsumerARN"])
    console.print(table)


@consumers_app.command("register")
def register_consumer(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    name: str = typer.Argument(..., help="Consumer name (an existing consumer of this name is reused)."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Register a consumer (or find the one of that name) and wait until it is ACTIVE."""
    from ..aws.consumers import ensure_consumer

    with clear_errors():
        kinesis = client(region, endpoint_url)
        row = _row(ensure_consumer(kinesis, _stream_arn(kinesis, stream), name))
    if as_json:
        emit_json(row)
    else:
        console.print(f"{row['ConsumerName']}: {row['status']} ({row['ConsumerARN']})")


@consumers_app.command("deregister")
def deregister(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    name: str = typer.Argument(..., help="Name of the consumer to deregister."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Deregister a consumer and wait until it is gone. Stop the queries that use it first: a running
    query whose consumer vanishes fails instead of reading on."""
    from ..aws import consumers

    with clear_errors():
        kinesis = client(region, endpoint_url)
        consumer = consumers.describe(kinesis, _stream_arn(kinesis, stream), name)
        if consumer is None:
            raise fail(
                f"stream '{stream}' has no consumer named '{name}' (see `pyspark-kinesis consumers list`)"
            )
        consumers.deregister(kinesis, consumer)
    if as_json:
        emit_json({**_row(consumer), "status": "DEREGISTERED"})
    else:
        console.print(f"{name}: deregistered")
