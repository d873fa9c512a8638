"""Every Python block of the README and docs/ runs (doc_snippets_app.py, against a local server and a
real Spark session), or is left out for a reason written down in tests/support/snippets.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.snippets import LEFT_OUT, ROOT, snippets

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def test_every_snippet_runs_or_says_why_not(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.doc_snippets_app", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(snippets()), done.stderr[-4000:]
    bad = [r for r in results if not (r["outcome"] == "ran" or r["outcome"].startswith("left out: "))]
    assert not bad, "\n\n".join(f"{r['file']}:{r['line']}: {r['outcome']}" for r in bad)
    ran = [r for r in results if r["outcome"] == "ran"]
    assert len(ran) >= len(results) - len(LEFT_OUT) > 0


def test_every_reason_to_leave_a_block_out_names_a_block_that_exists() -> None:
    keys = {snippet.key for snippet in snippets()}
    assert set(LEFT_OUT) <= keys, set(LEFT_OUT) - keys
    assert all(reason.strip() for reason in LEFT_OUT.values())
