#!/usr/bin/env bash
# The benchmark suite: set up (idempotent, peers included), then run it. Prints the
# table and writes benchmarks/RESULTS.md, benchmarks/results.json and benchmarks/results.png.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
py="${PYJLAD_VENV:-.venv}/bin/python"
"$py" -m pip install -q --disable-pip-version-check -e ".[bench]" 2>&1 | grep -v "^WARNING: Location" || true
exec "$py" benchmarks/suite.py "$@"
