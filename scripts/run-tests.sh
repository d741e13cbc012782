#!/usr/bin/env bash
# The test suite: set up (idempotent, with test tools), lint, then pytest. --full (passed on to pytest, see
# conftest.py) runs every case of the heaviest parametrized tests, which the default run samples
# (tests/sampled_tests.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
py="${PYJLAD_VENV:-.venv}/bin/python"
"$py" -m ruff check pyjlad tests examples benchmarks tools notebooks
# -n auto: one pytest-xdist worker per CPU (pass -n 0 to run in one process); --dist loadfile: each test
# file runs whole on one worker, so a file's module fixtures (the corpus run, the reliability probes, the
# wheel) are built once (xdist 3.8's `loadgroup` marks have no effect under pytest 9.2, whose node ids
# no longer come from the `_nodeid` xdist rewrites); the 25 slowest tests listed at the end (what to split
# off into a full-run command if the suite grows too slow).
exec "$py" -m pytest -n auto --dist loadfile --durations=25 "$@"
