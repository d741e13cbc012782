#!/usr/bin/env bash
# The whole test suite: set up (idempotent, with test tools), lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
py="${PYJLAD_VENV:-.venv}/bin/python"
"$py" -m ruff check pyjlad tests examples benchmarks tools notebooks
# -n auto: one pytest-xdist worker per CPU (pass -n 0 to run in one process).
exec "$py" -m pytest -n auto "$@"
