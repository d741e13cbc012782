#!/usr/bin/env bash
# Build .gpu/: what tools/gpu_check/run.sh needs on a GPU machine that has no network and no LLVM 15
# (the device machines of this workplace: Ubuntu 24.04, Python 3.12, numba, numba-cuda, cuda-core, CuPy, JAX).
#
#   bash tools/gpu_check/bundle.sh        # here, after scripts/setup.sh (needs apt-get download and pip download)
#
# .gpu/toolchain.tar.xz: Debian 12's LLVM 15 opt/llc/llvm-link/llvm-dis/llvm-as with libLLVM-15 and libz3,
# LLVM 15's OpenMP runtime (libomp5-15, for parallel derivatives) and GNU's libatomic,
# pyjlad's installed Enzyme plugin, and a fallback set of libraries libLLVM-15 needs (libedit, libxml2,
# ICU) used only where the GPU machine lacks them. Wheels: platformdirs (pyjlad's dependency missing there)
# and numpy 2.4.6 (numba-cuda 0.30.4 does not import under NumPy 2.5: np.row_stack was removed).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu
mkdir -p "$out" .git/info
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download llvm-15 libllvm15 libz3-4 libomp5-15 libatomic1 libedit2 libxml2 libicu72 libbsd0 \
  libmd0 >/dev/null)
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
mkdir -p "$work/pack/llvm15/bin" "$work/pack/llvm15/lib" "$work/pack/fallback"
for tool in opt llc llvm-link llvm-dis llvm-as; do cp "$work/root/usr/lib/llvm-15/bin/$tool" "$work/pack/llvm15/bin/"; done
lib="$work/root/usr/lib/x86_64-linux-gnu"
cp -L "$lib/libLLVM-15.so.1" "$lib/libz3.so.4" "$work/root/usr/lib/llvm-15/lib/libomp.so.5" "$work/pack/llvm15/lib/"
cp -L "$lib/libatomic.so.1" "$work/pack/fallback/"
cp -L "$lib"/{libbsd.so.0,libedit.so.2,libicudata.so.72,libicuuc.so.72,libmd.so.0,libxml2.so.2} "$work/pack/fallback/"
plugin=$(.venv/bin/python -c "from pyjlad.toolchain import locate; print(locate().plugin)")
cp "$plugin" "$work/pack/llvm15/lib/LLVMEnzyme-15.so"
tar -C "$work/pack" -cf - llvm15 fallback | xz -6 -T2 > "$out/toolchain.tar.xz"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$out" numpy==2.4.6 platformdirs
cp tools/gpu_check/run.sh "$out/run.sh"
du -sh "$out"
