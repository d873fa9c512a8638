#!/usr/bin/env bash
# The test suite: lint, import contracts, unit tests, and the tests against real local Kinesis servers
# and Spark.
# VENV / PYSPARK_KINESIS_CONSTRAINTS choose the runtime (see bootstrap.sh); extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VENV="${VENV:-.venv}"
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
"$VENV/bin/ruff" check src tests examples benchmarks
"$VENV/bin/ruff" format --check src tests examples benchmarks
"$VENV/bin/lint-imports" --no-cache  # the architecture's import contracts (pyproject.toml)
"$VENV/bin/mypy"  # type check of src/ (pyproject.toml)
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
