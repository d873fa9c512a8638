"""The simulation in the default suite: a fixed set of seeds (`CI_SEEDS` x `CI_DAYS` simulated
query-days, about two minutes here), and every schedule the simulation found a defect with, shrunk
and kept in `regressions/` under the defect's name (each failed before its fix), and those the long
run found and are not fixed yet, in `known/` (each must still fail). Longer runs:
`bash scripts/simulate.sh --seeds N --days D`."""

from __future__ import annotations

from pathlib import Path

import pytest

from .run import run_one, run_schedule
from .schedule import Schedule

CI_SEEDS = range(0, 48)
CI_DAYS = 7.0
CHUNK = 8  # seeds per test (a failure names its seeds; the figures of a run are in the message)
REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.json"))
# Schedules the long run found a defect with that is not fixed yet (docs/testing.md says what each
# shows): each must still fail; fixed, it fails this test and moves to regressions/.
KNOWN = sorted((Path(__file__).parent / "known").glob("*.json"))


@pytest.mark.parametrize("first", range(CI_SEEDS.start, CI_SEEDS.stop, CHUNK))
def test_the_seeds_of_the_default_suite_hold_every_oracle(first: int) -> None:
    failures = []
    for seed in range(first, min(first + CHUNK, CI_SEEDS.stop)):
        _figures, violation = run_one(seed, CI_DAYS)
        if violation is not None:
            failures.append(
                f"seed {seed}: {violation} (shrink and replay: bash scripts/simulate.sh --seeds 1 --first {seed} "
                f"--days {CI_DAYS:g})"
            )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_a_schedule_the_simulation_found_a_defect_with_runs_clean(path: Path) -> None:
    _figures, violation = run_schedule(Schedule.from_json(path.read_text()))
    assert violation is None, f"{path.name}: {violation}"


@pytest.mark.xfail(
    strict=True, reason="a defect the long run found, not fixed yet: fixed, move it to regressions/"
)
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.stem) for p in KNOWN]
    or [
        pytest.param(
            None, id="none", marks=pytest.mark.skip(reason="no known defect: tests/sim/known/ is empty")
        )
    ],
)
def test_a_known_defect_the_long_run_found_still_fails(path: Path) -> None:
    _figures, violation = run_schedule(Schedule.from_json(path.read_text()))
    assert violation is None, f"{path.name}: {violation}"


def test_every_revert_of_a_fix_still_applies_to_the_source():
    """`python -m tests.sim.reverts` undoes each fix by replacing its text: a fix whose text moved (a
    refactor) would make its revert report "does not apply" instead of whether the simulation finds
    the defect (three had gone stale unnoticed)."""
    from .reverts import REVERTS, SRC

    stale = [r.name for r in REVERTS if (SRC / r.module).read_text().count(r.old) != 1]
    assert not stale, f"update these reverts: {stale}"
