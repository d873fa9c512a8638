"""The CPU benchmark's figures from its measurements (benchmarks/cpu.py), without Spark: the marginal
cost is the median of each round's (whole - fixed) pair, the fixed cost is shown with its spread, and
the cross-check column says how much busy time nothing measured explains."""

from __future__ import annotations

from benchmarks import cpu, near_limit
from benchmarks.process_cpu import DRIVER_PYTHON, EXECUTOR_PYTHON, JVM, Usage


def usage(total: float, busy: float) -> Usage:
    return Usage(
        seconds={JVM: total / 2, EXECUTOR_PYTHON: total / 4, DRIVER_PYTHON: total / 4},
        busy=busy,
        servers=0.1,
    )


def row() -> cpu.CpuRow:
    r = cpu.CpuRow("memory", 1000, 4, 100_000)  # 100 MB
    r.loop_cpu, r.loop_wall, r.spark_wall = [2.0, 2.0, 2.0], [3.0, 3.0, 3.0], [2.0, 2.0, 2.0]
    # Rounds interleaved: a slow round moves both of its measurements.
    r.fixed = [usage(1.0, 1.1), usage(2.0, 2.1), usage(1.2, 1.3)]
    r.spark = [usage(3.0, 3.1), usage(4.5, 4.6), usage(3.1, 3.6)]
    return r


def test_the_marginal_cost_pairs_each_round_and_the_fixed_cost_shows_its_spread():
    r = row()
    assert r.marginal_s() == 2.0  # per-round differences 2.0, 2.5, 1.9: their median
    assert r.marginal_rate() == 50.0
    cells = dict(zip(cpu.HEADER, cpu.table_rows([r])[0], strict=True))
    assert cells["fixed CPU-s per query"] == "1.20 (1.00-2.00)"
    share, flagged = r.unexplained()
    assert flagged == 1  # the last round's 0.4 s unexplained of 3.6 s busy is over 5%
    assert cells["busy time unexplained (measurements over 5%)"] == f"{share:+.1%} (1 flagged)"


def test_the_section_prints_the_command_that_regenerates_it():
    command = "bash scripts/bench.sh cpu --server memory --sizes 1000 --shards 4 --mb 1000 --rounds 3"
    text = cpu.markdown_cpu([row()], 5.0, command)
    assert f"with `{command}`" in text and "busy time" in text


def test_the_tls_figures_have_their_own_section_that_says_https():
    command = "bash scripts/bench.sh cpu --server memory --sizes 1000 --shards 4 --mb 1000 --rounds 3 --tls"
    assert cpu.section_name("memory", {}, 1000, tls=True) == "bench-cpu-memory-1000mb-tls"
    assert cpu.section_name("memory", {}, 1000) == "bench-cpu-memory-1000mb"
    text = cpu.markdown_cpu([row()], 5.0, command, tls=True)
    assert text.startswith("### Over TLS\n") and "serving HTTPS" in text and f"with `{command}`" in text
    assert "serving HTTPS" not in cpu.markdown_cpu([row()], 5.0, command)


class _Meter:
    """A meter that records when it measures (the round's order is what the test checks)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.usage = usage(1.0, 1.0)

    def __enter__(self) -> _Meter:
        self.log.append("measure")
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append("end")


def test_a_round_measures_the_fixed_and_the_whole_query_each_right_after_a_query():
    """The first query after the loop's read costs several times more than one after another query:
    each measured query follows a query, so the fixed and the whole one have the same history."""
    log: list[str] = []
    r = cpu.CpuRow("memory", 1000, 4, 10)
    cpu.one_round(
        r,
        loop=lambda: log.append("loop") or (1.0, 2.0),
        read_fixed=lambda: log.append("fixed") or (0.5, 4),
        read_whole=lambda: log.append("whole") or (1.5, 10),
        meter=lambda: _Meter(log),  # type: ignore[arg-type,return-value]
    )
    # The measured fixed query follows an unmeasured one, as the measured whole query follows it.
    assert log == ["loop", "fixed", "measure", "fixed", "end", "measure", "whole", "end"]
    assert (len(r.fixed), len(r.spark), r.loop_cpu) == (1, 1, [1.0])


def test_near_the_limit_sets_each_process_beyond_the_fixed_cost_against_the_decoder_alone():
    """Issue #65.6: the cost per MB beyond the fixed cost by process, against the decoder's, judged
    within 1.5x; the executor's Python shows what it spends beyond the decode."""
    r = row()
    assert r.beyond() is None  # no decoder figure: no table, no goal
    r.decode = [250.0, 200.0, 100.0]  # MB/CPU-s: median 200, 5 ms per MB
    beyond = r.beyond()
    assert beyond is not None
    assert beyond.per_mb_ms() == 20.0  # 2.0 CPU-s beyond the fixed cost over 100 MB
    assert beyond.per_mb_ms(JVM) == 10.0 and beyond.per_mb_ms(EXECUTOR_PYTHON) == 5.0
    assert beyond.ratio() == 4.0 and not beyond.met()
    cells = dict(zip(near_limit.HEADER, near_limit.cells(beyond), strict=True))
    assert cells["executor Python ms/MB (beyond the decode)"] == "5.00 (+0.00)"
    assert cells["vs decoder"] == "4.00x"
    assert ("CPU per MB beyond the fixed cost within 1.5x of decoding the same responses alone (one core)",
            "4.00x", False) in cpu.goals([r])  # fmt: skip
    assert "Near the limit (1,000 B records, 4 shards)" in cpu.markdown_cpu([r], 5.0, "bash x")
    r.decode = [50.0]  # 20 ms per MB: the query beyond its fixed cost costs no more than the decoder
    assert r.beyond().met()  # type: ignore[union-attr]


def test_the_decoder_alone_decodes_the_benchmark_servers_own_answers():
    rates = near_limit.decode_rates(1000, 20_000, 2)
    assert len(rates) == 2 and all(rate > 0 for rate in rates)
