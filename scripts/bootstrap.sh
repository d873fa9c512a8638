#!/usr/bin/env bash
# Set up everything the demo and the tests need, from the project's own files: a virtualenv with the
# package and its development tools at the exact versions of a constraints file, and the pinned local
# Kinesis servers (npm) in .local-kinesis. Idempotent: a second run only checks. A Java 17 JDK (java,
# javac) and Node.js/npm come with the machine.
#   VENV (default .venv)                         where the virtualenv lives
#   PYSPARK_KINESIS_CONSTRAINTS (default constraints/dev.txt)   which exact versions to install
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
CONSTRAINTS="${PYSPARK_KINESIS_CONSTRAINTS:-constraints/dev.txt}"
# (javac: the test of the name clash with a JVM source called "kinesis" builds one; a JDK has it)
for tool in "$PYTHON" java javac node npm; do
  command -v "$tool" >/dev/null || { echo "bootstrap: '$tool' is required but not found" >&2; exit 1; }
done
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.pyspark-kinesis-installed"
wanted="$(cat pyproject.toml "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  # (compiled to bytecode here, not left to first use: where PYTHONDONTWRITEBYTECODE is set, as on
  # this machine and in many container images, every Spark Python process would compile the modules it
  # imports again; that made the main CI job 20% slower when tried)
  "$VENV/bin/python" -m pip install --quiet -c "$CONSTRAINTS" -e ".[dev,s3]"
  "$VENV/bin/python" -m pip check
  echo "$wanted" > "$stamp"
fi
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
"$VENV/bin/python" -c "from pyspark_kinesis.cli.local_kinesis import ensure_installed; ensure_installed()"
