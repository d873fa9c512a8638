"""Benchmarks that print their figures: `python -m benchmarks <name>` (see `__main__`), a developer's
tool in the repository, not part of the package users install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """The environment of a benchmark's own child processes: they import `benchmarks` too."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), path) if p))


def child_figures(code: str, args: list[str], what: str) -> dict[str, Any]:
    """Run `code` in a Python process of its own (its CPU apart from the benchmark's) and return the
    JSON object its last line of output holds; its stderr's end when it fails."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures
