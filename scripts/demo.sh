#!/usr/bin/env bash
# Set up a virtual environment from the package registry and run the demo: the
# benchmark scenarios with and without typecheck_guard, side by side (bench --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[test]'
"$VENV/bin/typecheck-guard" bench "$@"
