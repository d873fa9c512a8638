"""The mutation report's arithmetic: equivalent mutants (matched by their change, not their positional
name) leave the score, a listed mutant that was killed counts as killed, mutants not run do not count,
a timeout counts as detected, and the figures replace the previous ones in the doc."""

from __future__ import annotations

from tests.mutation import report

RESULTS = """
    pyspark_kinesis.kpl.x_encode__mutmut_1: killed
    pyspark_kinesis.kpl.x_encode__mutmut_2: survived
    pyspark_kinesis.kpl.x_encode__mutmut_3: timeout
    pyspark_kinesis.kpl.x_encode__mutmut_4: skipped
    pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1: no tests
    pyspark_kinesis.model.xǁPositionǁanchor__mutmut_2: survived
"""


DIFFS = {  # mutant -> its change, as `mutmut show` prints it
    "pyspark_kinesis.kpl.x_encode__mutmut_1": "--- a\n+++ b\n@@ -1 +1 @@\n-    return a + b\n+    return a - b",
    "pyspark_kinesis.kpl.x_encode__mutmut_2": "--- a\n+++ b\n@@ -1 +1 @@\n-    n = 1\n+    n = 2",
    "pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1": "-  x = None\n+  x = ''",
    "pyspark_kinesis.model.xǁPositionǁanchor__mutmut_2": "-  if  a < b:\n+  if a <= b:",
}


def diff(name: str) -> str:
    return DIFFS.get(name, "")


def entry(function: str, *change: str) -> report.Equivalent:
    return report.Equivalent(function, change, "same value")


def test_scores_per_module_leave_out_equivalent_and_unrun_mutants():
    statuses = report.parse(RESULTS)
    assert report.module_of("pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1") == "pyspark_kinesis.model"
    equivalent = [entry("pyspark_kinesis.model.xǁPositionǁanchor", "- if a < b:", "+ if a <= b:")]
    text = report.report(statuses, equivalent, diff)
    assert "| pyspark_kinesis.kpl | 4 | 2 | 1 | 0 | 1 | 66.7% |" in text
    assert "| pyspark_kinesis.model | 2 | 0 | 1 | 1 | 0 | 0.0% |" in text
    assert "**50.0%** of 4 non-equivalent mutants" in text and "1 mutants were not run" in text
    assert "`pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1` (no tests): `- x = None / + x = ''`" in text
    assert "below it: pyspark_kinesis.kpl, pyspark_kinesis.model" in text


def test_an_equivalent_is_matched_by_its_change_under_any_number():
    """An edit renumbers a function's mutants: the entry follows the change, not the name."""
    statuses = {"pyspark_kinesis.kpl.x_encode__mutmut_7": "survived"}
    moved = {"pyspark_kinesis.kpl.x_encode__mutmut_7": DIFFS["pyspark_kinesis.kpl.x_encode__mutmut_2"]}
    equivalent = [entry("pyspark_kinesis.kpl.x_encode", "- n = 1", "+ n = 2")]
    text = report.report(statuses, equivalent, moved.__getitem__)
    assert "| pyspark_kinesis.kpl | 1 | 0 | 0 | 1 | 0 | - |" in text
    assert "Entries that match no mutant" not in text
    # The same name making another change is a survivor, and the entry is stale.
    other = {"pyspark_kinesis.kpl.x_encode__mutmut_7": DIFFS["pyspark_kinesis.kpl.x_encode__mutmut_1"]}
    text = report.report(statuses, equivalent, other.__getitem__)
    assert "| pyspark_kinesis.kpl | 1 | 0 | 1 | 0 | 0 | 0.0% |" in text
    assert "Entries that match no mutant (stale; the function changed):" in text


def test_a_listed_mutant_that_was_killed_counts_as_killed_and_is_named():
    statuses = {"pyspark_kinesis.kpl.x_encode__mutmut_1": "killed"}
    equivalent = [entry("pyspark_kinesis.kpl.x_encode", "- return a + b", "+ return a - b")]
    text = report.report(statuses, equivalent, diff)
    assert "| pyspark_kinesis.kpl | 1 | 1 | 0 | 0 | 0 | 100.0% |" in text
    assert "Listed as equivalent but killed" in text and "x_encode__mutmut_1" in text


def test_the_equivalent_file_parses_and_each_entry_has_a_change_and_a_reason():
    entries = report.equivalents()
    assert entries
    for e in entries:
        assert e.function.startswith("pyspark_kinesis.") and "__mutmut_" not in e.function
        # (a mutant that leaves out an argument's line removes it and adds nothing)
        assert any(c.startswith("- ") for c in e.change) and all(c[:2] in ("- ", "+ ") for c in e.change)
        assert len(e.why) > 10


def test_the_doc_keeps_one_copy_of_the_figures(tmp_path):
    doc = tmp_path / "testing.md"
    doc.write_text("# Testing\n\nIntro.\n")
    report.write(doc, "first\n")
    report.write(doc, "second\n")
    text = doc.read_text()
    assert text.count(report.BEGIN) == 1 and "second" in text and "first" not in text and "Intro." in text


def test_a_row_whose_module_changed_since_the_run_that_measured_it_says_so(tmp_path):
    """Issue #62: the table merged runs at several commits and did not mark modules changed since."""
    (tmp_path / "runs.txt").write_text("aaa1111 all\nbbb2222 pyspark_kinesis.model.*\n")
    made_by = report.runs(tmp_path / "runs.txt")
    assert made_by[1].covers("pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1")
    assert not made_by[1].covers("pyspark_kinesis.kpl.x_encode__mutmut_1")
    asked = []

    def changed(commit: str, module: str) -> bool:
        asked.append((commit, module))
        return module == "pyspark_kinesis.kpl"

    text = report.report(report.parse(RESULTS), [], diff, made_by, changed)
    assert sorted(asked) == [("aaa1111", "pyspark_kinesis.kpl"), ("bbb2222", "pyspark_kinesis.model")]
    assert "| pyspark_kinesis.kpl (at aaa1111, changed since) | 4 |" in text
    assert "| pyspark_kinesis.model | 2 |" in text
    assert "aaa1111: all; bbb2222: pyspark_kinesis.model.*" in text and 'marked "changed since" (1)' in text
    (tmp_path / "runs.txt").write_text("ccc3333+ all\n")  # (run with uncommitted changes: not trusted)
    text = report.report(
        report.parse(RESULTS), [], diff, report.runs(tmp_path / "runs.txt"), lambda c, m: False
    )
    assert "(at ccc3333, changed since)" in text
    assert "not recorded" in report.report(report.parse(RESULTS), [], diff)
