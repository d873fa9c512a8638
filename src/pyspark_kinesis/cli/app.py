"""The `pyspark-kinesis` command: the demo, local servers, stream, consumer and checkpoint tools.

Stream commands (create, produce, reshard, shards) live in `streams`, enhanced fan-out consumer
commands in `consumers`, checkpoint commands (lag, inspect) in `checkpoints`; this module only wires
them up. The benchmarks are a developer's command in the repository (`python -m benchmarks`), not
part of the package.
"""

from __future__ import annotations

import signal
import time

import typer
from rich.table import Table

from . import checkpoints as checkpoint_commands
from . import consumers as consumer_commands
from . import streams as stream_commands
from .output import console

app = typer.Typer(
    add_completion=False,
    help="pyspark-kinesis: a Kinesis Data Streams source and sink for Spark (streaming and batch).",
)
local_app = typer.Typer(add_completion=False, help="Local Kinesis-compatible servers for development.")
app.add_typer(local_app, name="local")
app.add_typer(stream_commands.reshard_app, name="reshard")
app.add_typer(consumer_commands.consumers_app, name="consumers")
for _command in (stream_commands.create, stream_commands.produce, stream_commands.shards):
    app.command(_command.__name__)(_command)
app.command("lag")(checkpoint_commands.lag)
app.command("inspect")(checkpoint_commands.inspect)


@app.command()
def demo(
    workdir: str = typer.Option(
        None, help="Folder for the checkpoint and Parquet output (default: a temp dir)."
    ),
    orders: int = typer.Option(2000, min=2, max=1_000_000, help="How many sample orders to put."),
    shards: int = typer.Option(2, min=1, max=64, help="Shards of the demo stream."),
) -> None:
    """Local Kinesis -> Spark -> Parquet, stopped and resumed from its checkpoint."""
    from .demo import run

    raise typer.Exit(run(workdir, orders, shards))


# The dummy credentials `local start` tells users to set for the local server.
LOCAL_KEY_ID, LOCAL_SECRET = "000000000000", "local"
# Where `local start` listens unless told otherwise (the README's snippets name it); a free port when
# another process has it.
LOCAL_PORT = 4567


@local_app.command("start")
def local_start(
    kind: str = typer.Option(
        "kinesis-local",
        help="kinesis-local or kinesalite, or dynamodb (moto's server: DynamoDB and its streams; pip install "
        "'moto[server]').",
    ),
    port: int = typer.Option(
        LOCAL_PORT,
        help=f"Port on 127.0.0.1 (default {LOCAL_PORT}; when taken, a free one, printed; 0: a free one).",
    ),
    persist_dir: str = typer.Option(None, help="Keep the data in this folder across restarts."),
    seconds: int = typer.Option(0, help="Stop after this many seconds (0: on Ctrl-C)."),
) -> None:
    """Start a local Kinesis server (or a local DynamoDB with streams) in the foreground and print its
    endpoint."""
    from .local_dynamodb import LocalDynamoDB, create_table_hint
    from .local_kinesis import LocalKinesis, port_free

    chosen = port if port and port_free(port) else None
    try:
        server: LocalKinesis | LocalDynamoDB = (
            LocalDynamoDB(chosen).start()
            if kind == "dynamodb"
            else LocalKinesis(kind, chosen, persist_dir).start()
        )
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if port and chosen is None:
        console.print(f"port {port} is taken: using {server.port} instead", highlight=False)
    console.print(
        f"{kind} listening on [bold]{server.endpoint}[/] (log: {server.log_path}); Ctrl-C stops it",
        soft_wrap=True,
    )
    # Any key works there, but botocore signs every call and needs some: a first run with no AWS
    # configuration fails with "Unable to locate credentials" without these.
    use = (
        create_table_hint(server.endpoint)
        if kind == "dynamodb"
        else f"  pyspark-kinesis create orders --endpoint-url {server.endpoint}\n"
        f'  spark.readStream.format(fmt).option("endpointUrl", "{server.endpoint}").option("region", "us-east-1")'
    )
    console.print(
        "Use it with (any credentials work, but some must be set):\n"
        f"  export AWS_ACCESS_KEY_ID={LOCAL_KEY_ID} AWS_SECRET_ACCESS_KEY={LOCAL_SECRET} AWS_DEFAULT_REGION=us-east-1\n"
        + use,
        highlight=False,
        soft_wrap=True,
    )
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    deadline = time.monotonic() + seconds if seconds else float("inf")
    try:
        while not stop["now"] and time.monotonic() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@local_app.command("install")
def local_install() -> None:
    """Install the pinned local servers with npm (done automatically on first start)."""
    from .local_kinesis import ensure_installed

    console.print(f"installed in {ensure_installed()}")


@app.command()
def options(
    markdown: bool = typer.Option(False, "--markdown", help="Print the rows of docs' option tables instead."),
) -> None:
    """Print the source's and the sink's options with their defaults."""
    from ..config.declared import markdown_table
    from ..sink.options import sink_options
    from ..source.options import known_options

    for title, known in (
        ("source options (readStream, read)", known_options()),
        ("sink options (writeStream, write)", sink_options()),
    ):
        if markdown:
            typer.echo(f"{title}:\n{markdown_table(known.values())}\n")
            continue
        table = Table(title=title)
        table.add_column("option", no_wrap=True)
        table.add_column("default")
        table.add_column("meaning")
        for option in known.values():
            table.add_row(option.key, option.default_text, option.doc)
        console.print(table)


if __name__ == "__main__":
    app()
