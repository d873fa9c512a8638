"""The mutation score per module from `mutmut results --all true`, the surviving mutants, and (with
`--write`) the figures in docs/reports/mutation.md.

Why a report of our own: mutmut prints one status per mutant; the question asked of the unit tests is
per module ("does anything pin this rule?"), with the mutants that change nothing observable
(equivalent ones, listed with their reason in `equivalent.toml` beside this file) left out of the score
rather than hidden in it.

Why equivalents are pinned by content: mutmut names a mutant by its function and its position in the
list of that function's mutations (`x_encode__mutmut_3`), so an edit to the function renumbers them and
a name would then point at another mutation. An entry names the function and the changed lines
(`change`, as `mutmut show` prints them, whitespace collapsed); it matches whatever mutant makes that
change, under any number. A listed mutant that the tests killed counts as killed (the entry is then
wrong or stale, and the report says so), and an entry that matches no mutant is reported as stale.

    python -m tests.mutation.report mutants/results.txt [--write docs/reports/mutation.md]
"""

from __future__ import annotations

import datetime
import fnmatch
import re
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

EQUIVALENT = Path(__file__).with_name("equivalent.toml")
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}
NOT_RUN = {"skipped", "not checked"}  # (neither counts: mutmut did not run them)
LINE = re.compile(r"^\s*(?P<name>\S+): (?P<status>.+?)\s*$")
BEGIN, END = "<!-- mutation:begin -->", "<!-- mutation:end -->"
GOAL, MODULE_GOAL = 0.92, 0.85  # (issue #62)


@dataclass(frozen=True)
class Equivalent:
    function: str  # the mutant's name without `__mutmut_N`
    change: tuple[str, ...]  # the changed lines ("- old", "+ new"), whitespace collapsed
    why: str


def module_of(mutant: str) -> str:
    """`pyspark_kinesis.kpl.x_encode__mutmut_3` -> `pyspark_kinesis.kpl`."""
    return mutant.rsplit(".", 1)[0]


def function_of(mutant: str) -> str:
    """`pyspark_kinesis.kpl.x_encode__mutmut_3` -> `pyspark_kinesis.kpl.x_encode`."""
    return mutant.rsplit("__mutmut_", 1)[0]


def change_of(diff: str) -> tuple[str, ...]:
    """The changed lines of a unified diff (`mutmut show`'s), whitespace collapsed: what a mutant does."""
    return tuple(
        line[0] + " " + " ".join(line[1:].split())
        for line in diff.splitlines()
        if line[:1] in "-+" and not line.startswith(("---", "+++"))
    )


def equivalents(path: Path = EQUIVALENT) -> list[Equivalent]:
    """The entries of `equivalent.toml` (`[[equivalent]]` tables: function, change, why)."""
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text()).get("equivalent", [])
    return [
        Equivalent(e["function"], tuple(" ".join(c.split()) for c in e["change"]), e["why"].strip())
        for e in entries
    ]


def source_of(module: str) -> Path:
    """A module's source file under src/ (a package's `__init__.py` for a package)."""
    path = Path("src", *module.split(".")).with_suffix(".py")
    return path if path.exists() else Path("src", *module.split("."), "__init__.py")


def mutmut_diff(mutant: str) -> str:
    """The mutant's diff, from mutmut's own files under `mutants/` (run from the project's root)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    module = module_of(mutant)
    return get_diff_for_mutant(mutant, path=source_of(module))


@dataclass(frozen=True)
class Run:
    """One `bash scripts/mutation.sh` run (a line of `mutants/runs.txt`, which the script appends): the
    commit it ran at and the mutant patterns it ran (`all`, or e.g. `pyspark_kinesis.kpl.*`)."""

    commit: str
    scope: tuple[str, ...]

    def covers(self, mutant: str) -> bool:
        return self.scope == ("all",) or any(fnmatch.fnmatchcase(mutant, p) for p in self.scope)


def runs(path: Path) -> list[Run]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        commit, *scope = line.split()
        found.append(Run(commit, tuple(scope) or ("all",)))
    return found


def changed_since(commit: str, module: str) -> bool:
    """Whether the module's source differs now from `commit`'s (a row measured then no longer says
    what the tests catch of the code as it is)."""
    done = subprocess.run(["git", "diff", "--quiet", commit, "--", str(source_of(module))], check=False)
    return done.returncode != 0


def parse(text: str) -> dict[str, str]:
    statuses = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            statuses[match["name"]] = match["status"]
    return statuses


def report(
    statuses: dict[str, str],
    equivalent: list[Equivalent],
    diff: Callable[[str], str] = mutmut_diff,
    made_by: list[Run] | None = None,
    changed: Callable[[str, str], bool] = changed_since,
) -> str:
    """`diff` gives a mutant's diff; it is asked only for mutants of functions with listed entries and
    for survivors (whose changes the report prints)."""
    by_function: dict[str, dict[tuple[str, ...], Equivalent]] = defaultdict(dict)
    for entry in equivalent:
        by_function[entry.function][entry.change] = entry
    per_module: dict[str, Counter] = defaultdict(Counter)
    survivors: list[str] = []
    matched: set[Equivalent] = set()
    wrong: list[str] = []  # listed as equivalent, but the tests told it apart
    for name, status in sorted(statuses.items()):
        counts = per_module[module_of(name)]
        entries = by_function.get(function_of(name))
        change = change_of(diff(name)) if entries or status not in DETECTED | NOT_RUN else ()
        entry = entries.get(change) if entries else None
        if entry is not None:
            matched.add(entry)
        if status in NOT_RUN:
            counts["not run"] += 1
        elif status in DETECTED:
            counts["killed"] += 1
            if entry is not None:
                wrong.append(f"{name}: {' / '.join(change)}")
        elif entry is not None:
            counts["equivalent"] += 1
        else:  # survived, no tests, suspicious
            counts["survived"] += 1
            survivors.append(f"`{name}` ({status}): `{' / '.join(change)}`")
    stale = [e for e in equivalent if e not in matched]
    rows = [
        "| module | mutants | killed | survived | equivalent | not run | score |",
        "| --- | --: | --: | --: | --: | --: | --: |",
    ]
    total: Counter = Counter()
    below = []
    last_run: dict[str, Run] = {}  # module -> the last run that ran any of its mutants
    for run in made_by or []:
        for name in statuses:
            if run.covers(name):
                last_run[module_of(name)] = run
    stale_rows = []
    for module, counts in sorted(per_module.items()):
        total.update(counts)
        run = last_run.get(module)
        measured = run.commit.rstrip("+") if run else None
        if measured and (run.commit.endswith("+") or changed(measured, module)):
            stale_rows.append(module)
        rows.append(
            _row(module + (f" (at {measured}, changed since)" if module in stale_rows else ""), counts)
        )
        scored = counts["killed"] + counts["survived"]
        if scored and counts["killed"] / scored < MODULE_GOAL:
            below.append(module)
    rows.append(_row("**all**", total))
    scored = total["killed"] + total["survived"]
    score = total["killed"] / scored if scored else 0.0
    lines = [
        f"Mutation score of the package (but `[tool.mutmut] do_not_mutate`) against the unit tests (`bash scripts/mutation.sh`, mutmut), "
        f"{datetime.date.today().isoformat()}: **{score:.1%}** of {scored} non-equivalent mutants killed "
        f"(goal {GOAL:.0%} overall and {MODULE_GOAL:.0%} in every module; below it: "
        f"{', '.join(below) or 'none'})."
        + (
            f" {total['not run']} mutants were not run (a run limited to some modules, or stopped): the "
            "figure covers the modules with a score only."
            if total["not run"]
            else ""
        ),
        "",
        (
            "Made by the runs (commit: mutants run) "
            + "; ".join(f"{r.commit}: {' '.join(r.scope)}" for r in made_by)
            + ". "
            + (
                f'Rows marked "changed since" ({len(stale_rows)}) say what the tests caught of the module '
                "as it was at that commit, not as it is: run it again."
                if stale_rows
                else "No module changed since the run that measured it."
            )
            if made_by
            else "Which commits these results were measured at is not recorded (no mutants/runs.txt)."
        ),
        "",
        *rows,
        "",
        f"Surviving mutants ({len(survivors)}; `mutmut show NAME` prints one):",
        "",
        *[f"- {s}" for s in survivors],
        "",
        f"Equivalent mutants ({total['equivalent']} of {len(equivalent)} entries in "
        "tests/mutation/equivalent.toml matched, left out of the score):",
        "",
        *[f"- `{e.function}` `{' / '.join(e.change)}`: {e.why}" for e in equivalent if e in matched],
    ]
    if wrong:
        lines += ["", "Listed as equivalent but killed (counted killed; fix the entry):", ""]
        lines += [f"- `{w}`" for w in wrong]
    if stale:
        lines += ["", "Entries that match no mutant (stale; the function changed):", ""]
        lines += [f"- `{e.function}` `{' / '.join(e.change)}`" for e in stale]
    return "\n".join(lines) + "\n"


def _row(module: str, counts: Counter) -> str:
    scored = counts["killed"] + counts["survived"]
    score = f"{counts['killed'] / scored:.1%}" if scored else "-"
    mutants = scored + counts["equivalent"] + counts["not run"]
    return (
        f"| {module} | {mutants} | {counts['killed']} | {counts['survived']} | {counts['equivalent']} "
        f"| {counts['not run']} | {score} |"
    )


def write(doc: Path, text: str) -> None:
    """Replace the figures between the markers in `doc` (append a section when there are none)."""
    old = doc.read_text() if doc.exists() else "# Testing\n"
    block = f"{BEGIN}\n{text}{END}"
    if BEGIN in old and END in old:
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        doc.write_text(head + block + tail)
    else:
        doc.write_text(old.rstrip("\n") + "\n\n## Mutation score\n\n" + block + "\n")


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    statuses = parse(Path(argv[0]).read_text())
    if not statuses:
        print(f"no mutant results in {argv[0]}: did `mutmut run` run?", file=sys.stderr)
        return 1
    text = report(statuses, equivalents(), made_by=runs(Path(argv[0]).with_name("runs.txt")))
    print(text)
    if "--write" in argv:
        write(Path(argv[argv.index("--write") + 1]), text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
