"""The `pyspark-kinesis` command (`app`): local Kinesis servers, the demo, stream, consumer and
checkpoint tools. Its libraries (typer, rich) are the `[cli]` extra: the connector Spark imports on
every executor needs neither.
"""

from __future__ import annotations

import sys


def main() -> None:
    """The console script: the command, or a clear message when the `[cli]` extra is missing."""
    try:
        from .app import app
    except ModuleNotFoundError as exc:
        if exc.name not in ("typer", "rich", "click", "shellingham"):
            raise
        sys.exit(
            f"pyspark-kinesis: the command line needs the '{exc.name}' package, part of the [cli] extra: "
            "pip install 'pyspark-kinesis[cli]'"
        )
    app()
