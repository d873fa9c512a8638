"""`bash scripts/bench.sh page` regenerates docs/performance.md from the commands its sections name
(benchmarks/page.py): every section names one, and each is a command the benchmarks' CLI takes."""

from __future__ import annotations

import pytest
import typer
from benchmarks import REPO, page
from benchmarks.__main__ import DOC, app


def test_every_section_of_the_page_names_a_command_the_benchmarks_take_with_write():
    found = page.sections((REPO / DOC).read_text())
    assert len(found) >= 20 and len({s.name for s in found}) == len(found)
    cli = typer.main.get_command(app)
    for section in found:
        argv = section.argv(DOC)[3:]  # (after `python -m benchmarks`)
        command = cli.commands[argv[0]]  # type: ignore[attr-defined]
        command.make_context(argv[0], argv[1:])  # (raises on an option the command does not take)
        assert argv[-2:] == ["--write", DOC]


def test_a_section_without_its_command_is_an_error_not_a_gap():
    text = "<!-- bench-a -->\nwith `bash scripts/bench.sh decode`\n<!-- /bench-a -->\n"
    text += "<!-- bench-b -->\nfigures typed by hand\n<!-- /bench-b -->\n"
    with pytest.raises(ValueError, match="section bench-b names no"):
        page.sections(text)
    assert page.sections(text.split("<!-- bench-b")[0]) == [
        page.Section("bench-a", "bash scripts/bench.sh decode")
    ]


def test_quoted_arguments_reach_the_command_as_one_each():
    section = page.Section("bench-x", "bash scripts/bench.sh latency --master 'local-cluster[2,1,1024]'")
    assert section.argv("p.md")[3:] == ["latency", "--master", "local-cluster[2,1,1024]", "--write", "p.md"]
