#!/usr/bin/env bash
# Set up everything the demo and the tests need, from the project's own files:
# a virtualenv in .venv with the pinned packages, and the pinned local Kinesis servers (npm) in
# .local-kinesis. Idempotent: a second run only checks. Java 17 and Node.js/npm come with the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
for tool in "$PYTHON" java node npm; do
  command -v "$tool" >/dev/null || { echo "bootstrap: '$tool' is required but not found" >&2; exit 1; }
done
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.pyspark-kinesis-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev]"
  touch "$stamp"
fi
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
.venv/bin/python -c "from pyspark_kinesis.tools.local import ensure_installed; ensure_installed()"
