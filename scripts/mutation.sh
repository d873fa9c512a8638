#!/usr/bin/env bash
# Mutation testing of the core (mutmut; the modules are listed under [tool.mutmut] in pyproject.toml)
# against the unit tests only, then the score per module and the surviving mutants.
#   bash scripts/mutation.sh                 # run (resumes where a stopped run left off) and report
#   bash scripts/mutation.sh --write         # ...and write the figures into docs/reports/mutation.md
#   bash scripts/mutation.sh --report-only   # report the last run's results
#   bash scripts/mutation.sh 'pyspark_kinesis.kpl.*'   # only the mutants these patterns name
# Not part of the default test run (it takes long: every mutant runs the unit tests that reach it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VENV="${VENV:-.venv}"
"$VENV/bin/python" -m pip install --quiet -c constraints/dev.txt -c constraints/mutation.txt "mutmut>=3.8,<4"
write=()
run=1
names=()
for arg in "$@"; do
    case "$arg" in
        --write) write=(--write docs/reports/mutation.md) ;;
        --report-only) run=0 ;;
        -*) echo "unknown argument: $arg" >&2; exit 2 ;;
        *) names+=("$arg") ;;
    esac
done
if [ "$run" = 1 ]; then
    "$VENV/bin/mutmut" run --max-children "${MUTMUT_CHILDREN:-2}" "${names[@]}" || true  # (exit code: not the score)
    # (which commit and which mutants: the report marks rows whose module changed since its run)
    dirty=$(git diff --quiet HEAD -- src tests || echo +)
    echo "$(git rev-parse --short HEAD)$dirty ${names[*]:-all}" >> mutants/runs.txt
fi
"$VENV/bin/mutmut" results --all true > mutants/results.txt
exec "$VENV/bin/python" -m tests.mutation.report mutants/results.txt "${write[@]}"
