"""Where the commands print: one console for all of them.

Printed to a pipe or a file, rich would lay tables out for 80 columns and cut shard ids and sequence
numbers; there the width is $COLUMNS, else wide enough for them (a terminal keeps its own width).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_WIDTH = 200


def _width() -> int | None:
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else PIPE_WIDTH


console = Console(width=_width())
