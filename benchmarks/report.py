"""How benchmark figures are reported: the machine they were measured on, and docs sections they replace."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from datetime import date
from pathlib import Path


def commit() -> str:
    """The commit measured (with "+ uncommitted changes" when the work tree differs from it): figures
    measured at different commits sit side by side on one page, and say so. Changes under docs/ do not
    count: they are the pages the commands write (a page written after each run, or a second section
    measured after a first one was written, said "+ uncommitted changes" of the same code)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def machine() -> str:
    return (
        f"{date.today().isoformat()} at commit {commit()}, {os.cpu_count()}-core {platform.machine()}, Python "
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


class Spread:
    """Repeated measurements of one thing: reported as the median with the lowest and highest, never
    as a best-of (on a shared VM a best-of flatters whichever measurement met a quiet moment)."""

    def __init__(self, samples: list[float]) -> None:
        if not samples:
            raise ValueError("no samples")
        self.samples = sorted(samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def rate(self, amount: float, scale: float = 1.0) -> tuple[float, float, float]:
        """`amount` per second over these timings: (median, lowest, highest), divided by `scale`."""
        return (
            amount / self.median / scale,
            amount / self.samples[-1] / scale,
            amount / self.samples[0] / scale,
        )

    def show_rate(self, amount: float, scale: float = 1.0, digits: int = 0) -> str:
        """ "median (lowest-highest)" of `amount` per second; one figure when there is one sample."""
        mid, low, high = self.rate(amount, scale)
        if len(self.samples) == 1:
            return f"{mid:,.{digits}f}"
        return f"{mid:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"
