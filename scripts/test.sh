#!/usr/bin/env bash
# Set up a virtual environment from the package registry and run the whole test
# suite, on as many pytest-xdist workers as the machine has cores (at most 4; most
# tests start a Python that imports JAX, so they run side by side well).
# Usage: bash scripts/test.sh [extra pytest args]   (`-n 0`: in one process)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[test]'
"$VENV/bin/python" -m pytest -n auto --maxprocesses=4 "$@"
