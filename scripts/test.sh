#!/usr/bin/env bash
# The test suite: lint, unit tests, and the tests against real local Kinesis servers and Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
.venv/bin/ruff check src tests
.venv/bin/ruff format --check src tests
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
