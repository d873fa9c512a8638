#!/usr/bin/env bash
# The chaos suite (not part of the default tests; a short smoke run of it is): many runs of a streaming
# query under injected faults, checked for exactly-once and per-key order. About 1.5-3 minutes per run.
#   bash scripts/chaos.sh --runs 20 --seconds 45 --seed 1 --write docs/chaos.md
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-000000000000}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
export AWS_EC2_METADATA_DISABLED=true AWS_REGION="${AWS_REGION:-us-east-1}" SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m tests.chaos.run "$@"
