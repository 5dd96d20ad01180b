#!/usr/bin/env bash
# One command on a fresh machine: set up (nsys, and the pinned packages and perfgate in a virtual
# environment: the active one, else .venv) and run the gate on the default workloads:
# `pytest --perfgate -m perfgate` (CPU-sized settings where there is no GPU).
# Extra arguments go to pytest, e.g. `scripts/gate.sh --perfgate-update-baselines`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
venv=${VIRTUAL_ENV:-${PERFGATE_VENV:-.venv}}
exec "$venv/bin/python" -m pytest --perfgate -m perfgate -p no:cacheprovider "$@"
