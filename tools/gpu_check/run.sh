#!/usr/bin/env bash
# On a GPU machine: unpack .gpu/ (tools/gpu_check/bundle.sh), run the GPU tests and the GPU benchmark.
#
#   bash .gpu/run.sh                      # from the repository root; results under $OUT (default /tmp/gpu-out)
#   SKIP_BENCH=1 TESTS="tests/test_gpu_run.py -k tape" bash .gpu/run.sh
#   SCALING=1,2,4,8,16 bash .gpu/run.sh   # first, benchmarks/parallel_scaling.py on the machine's CPU cores
#
# Uses the machine's python3 with its numba, numba-cuda, cuda-core, CuPy and JAX; pyjlad from this checkout.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
mkdir -p /tmp/tc && tar xJf .gpu/toolchain.tar.xz -C /tmp/tc || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/*.whl || exit 4
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L; nproc; head -1 /etc/os-release; ldd --version | head -1
python3 -m pip list 2>/dev/null | grep -iE "^(cuda-core|cuda-bindings|numba-cuda|numba|cupy-cuda13x|jax|jaxlib|pytest|numpy) "
export LD_LIBRARY_PATH=/tmp/tc/llvm15/lib
if ldd /tmp/tc/llvm15/bin/opt /tmp/tc/llvm15/lib/libLLVM-15.so.1 | grep -q "not found"; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/tmp/tc/fallback   # Debian 12's libedit/libxml2/ICU, only if missing
fi
export PYJLAD_OPT=/tmp/tc/llvm15/bin/opt PYJLAD_ENZYME_PLUGIN=/tmp/tc/llvm15/lib/LLVMEnzyme-15.so
export PYJLAD_CACHE_DIR=${PYJLAD_CACHE_DIR:-/tmp/pjcache}
# LLVM 15's OpenMP runtime where pyjlad.openmp looks first; GNU's libatomic where the machine has none.
mkdir -p /usr/lib/llvm-15/lib && cp /tmp/tc/llvm15/lib/libomp.so.5 /usr/lib/llvm-15/lib/
[ -e /usr/lib/x86_64-linux-gnu/libatomic.so.1 ] || cp /tmp/tc/fallback/libatomic.so.1 /usr/lib/x86_64-linux-gnu/
python3 -m pyjlad doctor 2>&1 | head -5
if [ -n "${SCALING:-}" ]; then
  JAX_PLATFORMS=cpu timeout "${SCALING_TIMEOUT:-300}" python3 benchmarks/parallel_scaling.py --threads "$SCALING" \
    --json "$OUT/parallel_scaling.json" 2>&1 | tee "$OUT/parallel_scaling.log"
  echo "scaling rc=${PIPESTATUS[0]}"
fi
set -o pipefail
# shellcheck disable=SC2086 - TESTS is a list of pytest arguments
timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -rA -s -v ${TESTS:-tests/test_gpu_run.py} 2>&1 \
  | tee "$OUT/gpu_tests.log" | tail -40
echo "pytest rc=$?"
[ -n "${SKIP_BENCH:-}" ] && exit 0
timeout "${BENCH_TIMEOUT:-150}" python3 benchmarks/gpu_batched.py --json "$OUT/gpu_batched.json" 2>&1 \
  | tee "$OUT/gpu_bench.log"
echo "bench rc=$?"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
