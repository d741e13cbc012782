#!/usr/bin/env bash
# The whole test suite: set up (idempotent, with test tools), lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
py="${PYJLAD_VENV:-.venv}/bin/python"
"$py" -m ruff check pyjlad tests examples benchmarks tools notebooks
# -n auto: one pytest-xdist worker per CPU (pass -n 0 to run in one process); --dist loadgroup: meant to
# keep the files tests/conftest.py names (expensive shared fixtures) each on one worker (see there); the
# 25 slowest tests listed at the end (what to split off into a full-run command if the suite grows too slow).
exec "$py" -m pytest -n auto --dist loadgroup --durations=25 "$@"
