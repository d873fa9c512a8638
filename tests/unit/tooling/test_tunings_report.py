"""benchmarks/tunings.py's section: what a tuning buys is read from the connector-vs-loop ratios."""

from __future__ import annotations

from benchmarks.tunings import Figures, buys, markdown


def test_a_tuning_buys_what_its_absence_costs_the_connector_against_the_loop():
    on = Figures("every tuning on", 50.0, 150.0, 200.0, 1.3, 0)
    off = Figures("gc.freeze off", 40.0, 100.0, 120.0, 1.6, 1)  # (a slower phase: the loop slower too)
    assert round(buys(on, off), 4) == 0.2  # 3.0x against 2.5x
    text = markdown([on, off], "bash scripts/bench.sh tunings")
    assert "| every tuning on | 50.0 | 150.0 | 3.00x | 200.0 (4.00x) | 1.30 | - | 0 |" in text
    assert "| gc.freeze off | 40.0 | 100.0 | 2.50x | 120.0 (3.00x) | 1.60 | +20.0% | 1 |" in text
