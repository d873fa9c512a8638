"""The mutation score per module from `mutmut results --all true`, the surviving mutants, and (with
`--write`) the figures in docs/testing.md.

Why a report of our own: mutmut prints one status per mutant; the question asked of the unit tests is
per module ("does anything pin this rule?"), with the mutants that change nothing observable
(equivalent ones, listed with their reason in `equivalent.txt` beside this file) left out of the score
rather than hidden in it.

    python -m tests.mutation.report mutants/results.txt [--write docs/testing.md]
"""

from __future__ import annotations

import datetime
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

EQUIVALENT = Path(__file__).with_name("equivalent.txt")
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}
NOT_RUN = {"skipped", "not checked"}  # (neither counts: mutmut did not run them)
LINE = re.compile(r"^\s*(?P<name>\S+): (?P<status>.+?)\s*$")
BEGIN, END = "<!-- mutation:begin -->", "<!-- mutation:end -->"
GOAL = 0.90


def module_of(mutant: str) -> str:
    """`pyspark_kinesis.kpl.x_encode__mutmut_3` -> `pyspark_kinesis.kpl`."""
    return mutant.rsplit(".", 1)[0]


def equivalents() -> dict[str, str]:
    """Mutant name -> why it changes nothing observable (`name  # reason` per line)."""
    out: dict[str, str] = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text().splitlines():
            name, _hash, reason = line.partition("#")
            if name.strip():
                out[name.strip()] = reason.strip()
    return out


def parse(text: str) -> dict[str, str]:
    statuses = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            statuses[match["name"]] = match["status"]
    return statuses


def report(statuses: dict[str, str], equivalent: dict[str, str]) -> str:
    per_module: dict[str, Counter] = defaultdict(Counter)
    survivors: list[str] = []
    for name, status in sorted(statuses.items()):
        counts = per_module[module_of(name)]
        if name in equivalent:
            counts["equivalent"] += 1
        elif status in NOT_RUN:
            counts["not run"] += 1
        elif status in DETECTED:
            counts["killed"] += 1
        else:  # survived, no tests, suspicious
            counts["survived"] += 1
            survivors.append(f"{name} ({status})")
    rows = [
        "| module | mutants | killed | survived | equivalent | not run | score |",
        "| --- | --: | --: | --: | --: | --: | --: |",
    ]
    total = Counter()
    for module, counts in sorted(per_module.items()):
        total.update(counts)
        rows.append(_row(module, counts))
    rows.append(_row("**all**", total))
    scored = total["killed"] + total["survived"]
    score = total["killed"] / scored if scored else 0.0
    lines = [
        f"Mutation score of the core against the unit tests (`bash scripts/mutation.sh`, mutmut), "
        f"{datetime.date.today().isoformat()}: **{score:.1%}** of {scored} non-equivalent mutants killed "
        f"(goal {GOAL:.0%})."
        + (
            f" {total['not run']} mutants were not run (a run limited to some modules, or stopped): the "
            "figure covers the modules with a score only."
            if total["not run"]
            else ""
        ),
        "",
        *rows,
        "",
        f"Surviving mutants ({len(survivors)}; `mutmut show NAME` prints one):",
        "",
        *[f"- `{s}`" for s in survivors],
        "",
        f"Equivalent mutants ({len(equivalent)}, left out of the score; tests/mutation/equivalent.txt):",
        "",
        *[f"- `{name}`: {why}" for name, why in sorted(equivalent.items())],
    ]
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
    text = report(statuses, equivalents())
    print(text)
    if "--write" in argv:
        write(Path(argv[argv.index("--write") + 1]), text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
