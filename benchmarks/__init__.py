"""Benchmarks that print their figures: `python -m benchmarks <name>` (see `__main__`), a developer's
tool in the repository, not part of the package users install."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """The environment of a benchmark's own child processes: they import `benchmarks` too."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), path) if p))
