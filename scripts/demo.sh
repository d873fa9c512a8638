#!/usr/bin/env bash
# The demo: starts a local Kinesis, puts sample orders, runs Kinesis -> transform -> Parquet twice
# from one checkpoint, and prints what arrived.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
exec .venv/bin/pyspark-kinesis demo --workdir "${DEMO_DIR:-$PWD/demo-output}" "$@"
