"""The stream commands of `pyspark-kinesis`: create, produce, reshard, shards.

Operators use them beside a running query (make a test stream, feed it, split a hot shard, look at the
lineage the connector will follow). Each takes `--endpoint-url/--region` and the usual AWS credential
chain, prints tables for people and, with `--json`, one JSON document for scripts.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.tree import Tree

from .output import console

reshard_app = typer.Typer(add_completion=False, help="Split, merge or rescale a stream's shards.")

ENDPOINT = typer.Option(None, "--endpoint-url", help="Kinesis endpoint (default: AWS's for the region).")
REGION = typer.Option(
    None, "--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1)."
)
JSON = typer.Option(False, "--json", help="Print one JSON document instead of tables.")


def region_or_default(region: str | None) -> str:
    return region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def client(region: str | None, endpoint_url: str | None) -> Any:
    from ..aws.admin import client_for

    return client_for(region_or_default(region), endpoint_url)


def emit_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def fail(message: str) -> typer.Exit:
    """A clear one-line error on stderr and exit code 1, instead of a traceback."""
    Console(stderr=True).print(f"[red]error:[/] {message}")
    return typer.Exit(1)


@contextmanager
def clear_errors() -> Iterator[None]:
    """A Kinesis failure ends the command with its one-line message (see `fail`)."""
    from ..errors import StreamAccessError

    try:
        yield
    except StreamAccessError as exc:
        raise fail(str(exc)) from None


def shard_rows(shards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ListShards entries reduced to what an operator (or a script) needs, in hash-key order."""
    rows = [
        {
            "ShardId": s["ShardId"],
            "ParentShardId": s.get("ParentShardId"),
            "AdjacentParentShardId": s.get("AdjacentParentShardId"),
            "open": "EndingSequenceNumber" not in s.get("SequenceNumberRange", {}),
            "StartingHashKey": s["HashKeyRange"]["StartingHashKey"],
            "EndingHashKey": s["HashKeyRange"]["EndingHashKey"],
        }
        for s in shards
    ]
    return sorted(rows, key=lambda r: (int(r["StartingHashKey"]), r["ShardId"]))


def lineage_tree(stream: str, rows: list[dict[str, Any]]) -> Tree:
    """Shards under their parent; a merged shard also names its adjacent parent. Shards whose parents
    are no longer listed (expired) are roots."""
    ids = {r["ShardId"] for r in rows}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for row in rows:
        parent = row["ParentShardId"] if row["ParentShardId"] in ids else None
        children.setdefault(parent, []).append(row)
    tree = Tree(f"[bold]{stream}[/] ({sum(r['open'] for r in rows)} open, {len(rows)} listed)")

    def label(row: dict[str, Any]) -> str:
        share = (int(row["EndingHashKey"]) - int(row["StartingHashKey"]) + 1) / 2**128
        state = "[green]open[/]" if row["open"] else "[dim]closed[/]"
        merged = f", merged with {row['AdjacentParentShardId']}" if row["AdjacentParentShardId"] else ""
        keys = f"hash keys {row['StartingHashKey']}..{row['EndingHashKey']}"
        return f"{row['ShardId']} {state} {keys} ({share:.1%}){merged}"

    # Iterative (a stream resharded thousands of times has that many generations); each shard is
    # placed once, so a malformed listing with a cycle cannot loop.
    pending: list[tuple[Tree, str | None]] = [(tree, None)]
    placed: set[str] = set()
    while pending:
        node, parent = pending.pop()
        for row in children.get(parent, []):
            if row["ShardId"] not in placed:
                placed.add(row["ShardId"])
                pending.append((node.add(label(row)), row["ShardId"]))
    return tree


def shards(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """The stream's shards as a lineage tree (open/closed, hash key ranges)."""
    from ..aws.admin import list_shards

    with clear_errors():
        rows = shard_rows(list_shards(client(region, endpoint_url), stream))
    if as_json:
        emit_json(rows)
    else:
        console.print(lineage_tree(stream, rows))


def create(
    stream: str = typer.Argument(..., help="Name of the new stream."),
    shard_count: int = typer.Option(1, "--shards", min=1, max=10_000, help="Shards of the new stream."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Create a provisioned stream and wait until it is ACTIVE."""
    from ..aws.admin import create_stream

    with clear_errors():
        arn = create_stream(client(region, endpoint_url), stream, shard_count)
    if as_json:
        emit_json({"stream": stream, "arn": arn, "shards": shard_count})
    else:
        console.print(f"created [bold]{stream}[/] ({arn}) with {shard_count} shard(s)")


def _file_records(path: str, limit: int) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as handle:
        for number, line in enumerate(handle):
            if number >= limit:
                return
            data = line.rstrip(b"\r\n")
            if data:
                yield {"Data": data, "PartitionKey": str(number)}


def produce(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    count: int = typer.Option(
        1000, min=1, max=100_000_000, help="Records to put (at most the file's lines)."
    ),
    size: int = typer.Option(100, min=1, max=1_000_000, help="Bytes of each sample record."),
    rate: int = typer.Option(0, min=0, max=1_000_000, help="Records per second (0: as fast as it goes)."),
    file: str = typer.Option(None, help="Put the lines of this file instead of sample records."),
    start: int = typer.Option(0, min=0, help="Number of the first sample record (its partition key)."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Put sample JSON records ({"n": number, "pad": ...}, partition key = number) or a file's lines."""
    from ..aws.admin import MAX_PUT_ENTRIES, put_all, sample_records
    from ..errors import StreamAccessError

    if file and not os.path.isfile(file):
        raise fail(f"--file {file}: no such file")
    kinesis = client(region, endpoint_url)
    records = _file_records(file, count) if file else sample_records(count, size, start)
    if file:  # the progress shows what the file holds, not the default count
        count = min(count, sum(1 for _ in _file_records(file, count)))
    chunk = max(1, min(MAX_PUT_ENTRIES, rate)) if rate else MAX_PUT_ENTRIES
    began = time.monotonic()
    put = 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), disable=as_json) as progress:
        task = progress.add_task(f"putting into {stream}", total=count)
        try:
            while True:
                batch = [record for _, record in zip(range(chunk), records, strict=False)]
                if not batch:
                    break
                put += put_all(kinesis, stream, batch, lambda n: progress.advance(task, n))
                if rate:  # pace by the clock: the n-th record is not put before n / rate seconds
                    time.sleep(max(0.0, began + put / rate - time.monotonic()))
        except StreamAccessError as exc:
            raise fail(f"{exc} ({put} records were put before)") from None
    seconds = time.monotonic() - began
    if as_json:
        emit_json({"stream": stream, "put": put, "seconds": round(seconds, 3)})
    else:
        console.print(f"put {put} records into [bold]{stream}[/] in {seconds:.1f} s")


def _after_reshard(
    stream: str, region: str | None, endpoint_url: str | None, as_json: bool, what: str
) -> None:
    from ..aws.admin import list_shards

    rows = shard_rows(list_shards(client(region, endpoint_url), stream))
    if as_json:
        emit_json({"stream": stream, "done": what, "shards": rows})
    else:
        console.print(f"{what}; {sum(r['open'] for r in rows)} open shard(s) now")
        console.print(lineage_tree(stream, rows))


@reshard_app.command("split")
def split(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    shard_id: str = typer.Argument(..., help="The open shard to split."),
    at: str = typer.Option(None, help="First hash key of the upper child (default: the middle)."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Split one shard in two and wait until the stream is ACTIVE again."""
    from ..aws.admin import split_shard

    if at is not None and not (at.isascii() and at.isdigit()):
        raise fail(f"--at must be a decimal hash key, not '{at}'")
    with clear_errors():
        split_shard(client(region, endpoint_url), stream, shard_id, int(at) if at else None)
        _after_reshard(stream, region, endpoint_url, as_json, f"split {shard_id}")


@reshard_app.command("merge")
def merge(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    shard_id: str = typer.Argument(..., help="One open shard."),
    adjacent: str = typer.Argument(..., help="The open shard next to it in hash-key order."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """Merge two adjacent shards and wait until the stream is ACTIVE again."""
    from ..aws.admin import merge_shards

    with clear_errors():
        merge_shards(client(region, endpoint_url), stream, shard_id, adjacent)
        _after_reshard(stream, region, endpoint_url, as_json, f"merged {shard_id} and {adjacent}")


@reshard_app.command("scale")
def scale(
    stream: str = typer.Argument(..., help="Stream name or ARN."),
    target: int = typer.Argument(..., min=1, max=10_000, help="Open shards wanted."),
    endpoint_url: str = ENDPOINT,
    region: str = REGION,
    as_json: bool = JSON,
) -> None:
    """UpdateShardCount (uniform scaling) and wait until the stream is ACTIVE again."""
    from ..aws.admin import scale as update_shard_count

    with clear_errors():
        update_shard_count(client(region, endpoint_url), stream, target)
        _after_reshard(stream, region, endpoint_url, as_json, f"scaled to {target} shards")
