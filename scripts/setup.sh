#!/usr/bin/env bash
# Idempotent set-up on Debian 12: system packages, a virtual environment with
# pyjlad and its test dependencies, and the embedded engine's Enzyme toolchain.
# Quick when everything is already in place. Usage: scripts/setup.sh [--tests]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="${PYJLAD_VENV:-$root/.venv}"
want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

# System packages: LLVM 15's opt (Enzyme's host), its OpenMP runtime and patchelf; for the tests also
# llvm-as 16/19/22, which check that exported IR is portable across LLVM versions.
need=()
command -v opt-15 >/dev/null || need+=(llvm-15)
# LLVM 15's OpenMP runtime (__kmpc_*), for parallel derivatives of prange code (pyjlad.openmp).
[ -e /usr/lib/llvm-15/lib/libomp.so.5 ] || need+=(libomp5-15)
# GNU's libatomic: the atomic adds of those derivatives that LLVM compiles into library calls.
[ -e "/usr/lib/$(uname -m)-linux-gnu/libatomic.so.1" ] || need+=(libatomic1)
command -v patchelf >/dev/null || need+=(patchelf)
if [ "$want_tests" = 1 ]; then
  for v in 16 19 22; do command -v "llvm-as-$v" >/dev/null || need+=("llvm-$v"); done
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
      apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
  else
    echo "setup: missing ${need[*]}; run as root: apt-get update && apt-get install -y ${need[*]}" >&2
    exit 1
  fi
fi

# Virtual environment with pyjlad (editable) and, for the tests, its test extras.
extras=""
[ "$want_tests" = 1 ] && extras="[test]"
stamp="$venv/.pyjlad-installed$extras"
digest=$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
  echo "setup: pip install -e .$extras"
  if [ "$want_tests" = 1 ]; then
    # PyTorch's CPU build (a plain `torch` requirement would pull a multi-GB CUDA build).
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 \
      | grep -v "^WARNING: Location" || true
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".$extras" 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$venv/bin/python" -c "import pyjlad" # fail here, not later, if the install broke
  echo "$digest" > "$stamp"
fi

# The Enzyme toolchain (downloads and relinks the plugin once; verifies itself).
"$venv/bin/python" -m pyjlad toolchain install >/dev/null || "$venv/bin/python" -m pyjlad toolchain install
