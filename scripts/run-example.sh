#!/usr/bin/env bash
# The main job: set up (idempotent), then differentiate a few Numba functions and
# print each gradient next to a central finite-difference check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYJLAD_VENV:-.venv}/bin/python" examples/quickstart.py "$@"
