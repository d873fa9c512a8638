"""The memory benchmark's arithmetic and page (benchmarks/memory.py): a row's figures come from its
rounds, medians with the lowest and highest, and the section names the command that regenerates it."""

from __future__ import annotations

from benchmarks.memory import MemoryRow, markdown_memory


def test_a_row_reports_the_median_and_spread_of_its_rounds():
    row = MemoryRow("shard", 1000, 64.0, [230.0, 192.0, 224.0])
    assert row.show_mib() == "224 (192-230)"
    assert row.show() == "3.5x (3.0-3.6)"


def test_the_section_names_its_command_and_lists_every_row():
    rows = [MemoryRow("decode", 100, 1.0, [17.0]), MemoryRow("shard", 10_000, 64.0, [191.0])]
    text = markdown_memory(rows, rounds=1)
    assert "`bash scripts/bench.sh memory`" in text and "(1 rounds, one process each)" in text
    assert (
        "| decode one full response (the vectorised scan) | 100 B | 1.0 | 17 (17-17) | 17.0x (17.0-17.0) |"
        in text
    )
    assert "| one shard's read at the default limits, then its Arrow batches | 10000 B | 64.0 |" in text
