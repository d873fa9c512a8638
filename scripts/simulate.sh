#!/usr/bin/env bash
# The deterministic simulation (tests/sim): seeds of simulated query days against the connector's real
# driver, ledger and executor code. A failing seed is shrunk and its schedule printed (`--replay FILE`
# runs it again). Examples:
#   bash scripts/simulate.sh --seeds 200 --days 30          # 6,000 query-days
#   bash scripts/simulate.sh --seeds 1 --first 17 --days 7  # one seed
#   bash scripts/simulate.sh --replay schedule.json
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >/dev/null
exec "${VENV:-.venv}/bin/python" -m tests.sim.run "$@"
