#!/usr/bin/env bash
# The benchmarks, a developer's command (not part of the package): bash scripts/bench.sh <name> [options]
# (`bash scripts/bench.sh --help` lists them: assign, sink, sink-cpu, decode, memory, glue-decode, read, scheduled, latency, flood, api, offsets, planner, cpu).
# Each starts its own local servers on 127.0.0.1 and prints its figures; --write updates docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
source scripts/local-env.sh
exec .venv/bin/python -m benchmarks "$@"
