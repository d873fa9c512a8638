#!/usr/bin/env bash
# The test suite: lint, import contracts, unit tests, and the tests against real local Kinesis servers
# and Spark.
# VENV / PYSPARK_KINESIS_CONSTRAINTS choose the runtime (see bootstrap.sh); PYSPARK_KINESIS_STATIC=skip
# leaves out the static checks (lint, format, import contracts, types); extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VENV="${VENV:-.venv}"
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
if [ "${PYSPARK_KINESIS_STATIC:-run}" != "skip" ]; then  # (CI runs them once, in its first job)
  "$VENV/bin/ruff" check src tests examples benchmarks
  "$VENV/bin/ruff" format --check src tests examples benchmarks
  "$VENV/bin/lint-imports" --no-cache  # the architecture's import contracts (pyproject.toml)
  "$VENV/bin/mypy"  # type check of src/ (pyproject.toml)
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
