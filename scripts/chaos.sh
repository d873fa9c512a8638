#!/usr/bin/env bash
# The chaos suite (not part of the default tests; a short smoke run of it is): many runs of a streaming
# query under injected faults, checked for exactly-once and per-key order. About 1.5-3 minutes per run.
#   bash scripts/chaos.sh --runs 20 --seconds 45 --seed 1 --write docs/chaos.md
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
source scripts/local-env.sh
exec .venv/bin/python -m tests.chaos.run "$@"
