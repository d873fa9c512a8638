"""The mutation report's arithmetic: equivalent mutants leave the score, mutants not run do not count,
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


def test_scores_per_module_leave_out_equivalent_and_unrun_mutants():
    statuses = report.parse(RESULTS)
    assert report.module_of("pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1") == "pyspark_kinesis.model"
    text = report.report(statuses, {"pyspark_kinesis.model.xǁPositionǁanchor__mutmut_2": "same value"})
    assert "| pyspark_kinesis.kpl | 4 | 2 | 1 | 0 | 1 | 66.7% |" in text
    assert "| pyspark_kinesis.model | 2 | 0 | 1 | 1 | 0 | 0.0% |" in text
    assert "**50.0%** of 4 non-equivalent mutants" in text and "1 mutants were not run" in text
    assert "`pyspark_kinesis.model.xǁPositionǁanchor__mutmut_1 (no tests)`" in text


def test_the_doc_keeps_one_copy_of_the_figures(tmp_path):
    doc = tmp_path / "testing.md"
    doc.write_text("# Testing\n\nIntro.\n")
    report.write(doc, "first\n")
    report.write(doc, "second\n")
    text = doc.read_text()
    assert text.count(report.BEGIN) == 1 and "second" in text and "first" not in text and "Intro." in text
