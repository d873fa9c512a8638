"""How benchmark figures are reported: the machine they were measured on, and docs sections they replace."""

from __future__ import annotations

import os
import platform
from datetime import date
from pathlib import Path


def machine() -> str:
    return (
        f"{date.today().isoformat()}, {os.cpu_count()}-core {platform.machine()}, Python "
        f"{platform.python_version()}"
    )


def write_section(path: str, name: str, text: str) -> None:
    """Replace the section between `<!-- name -->` markers in `path` (appended when absent)."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    file = Path(path)
    current = file.read_text() if file.exists() else "# Performance\n"
    block = f"{begin}\n{text}{end}"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _old, tail = rest.split(end, 1)
        current = head + block + tail
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    file.write_text(current)
