#!/usr/bin/env bash
# The toolchain's `wheel` route on glibc >= 2.39, checked on this Debian 12 machine (glibc 2.36) inside a
# Debian 13 (trixie, glibc 2.41) chroot that has no LLVM at all, as the unprivileged user nobody:
#
#   bash tools/wheel_route_check.sh [DIR]     # needs root (debootstrap, chroot, mounts) and network
#
# debootstraps trixie into DIR (default /tmp/pyjlad-trixie), makes a venv there with numba and this
# checkout (editable), runs `python -m pyjlad toolchain install` as nobody with a cache of its own
# (the default route picks `wheel`: no opt-15 in the chroot), prints doctor's report, and checks a
# gradient, a Hessian and a JVP against hand-derived values. Not part of the test suite (root, mounts).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/tmp/pyjlad-trixie}
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
if [ ! -x "$root/usr/bin/python3" ]; then
  mkdir -p "$root"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates trixie "$root" \
    http://deb.debian.org/debian
fi
cp /etc/resolv.conf "$root/etc/"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
mountpoint -q "$root/proc" || mount --bind /proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
trap 'umount "$root/proc" "$root/dev" 2>/dev/null || true' EXIT
rm -rf "$root/src" && mkdir "$root/src" && (cd "$repo" && git archive HEAD | tar -x -C "$root/src")
export PIP_CERT=/etc/ssl/certs/ca-certificates.crt
chroot "$root" /bin/bash -c "[ -x /venv/bin/python ] || python3 -m venv /venv;
  /venv/bin/pip install -q numba platformdirs filelock && /venv/bin/pip install -q --no-deps -e /src"
chroot "$root" /bin/bash -c "rm -rf /tmp/user && mkdir /tmp/user && chown nobody /tmp/user"
chroot "$root" /usr/bin/ldd --version | head -1
chroot "$root" /bin/bash -c "command -v opt-15 opt llvm-link patchelf || echo 'no LLVM tools, no patchelf here'"
chroot "$root" /usr/sbin/runuser -u nobody -- env HOME=/tmp/user PYJLAD_CACHE_DIR=/tmp/user/cache \
  PIP_CERT="$PIP_CERT" /bin/bash -c 'cd /tmp/user && id -un &&
  /venv/bin/python -m pyjlad toolchain install && /venv/bin/python -m pyjlad doctor | head -5 &&
  /venv/bin/python - <<PY
import math
import numpy as np
import pyjlad

x = np.array([0.5, 1.0])
g = pyjlad.gradient(lambda v: np.sum(np.sin(v) * v), x)
assert np.allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-14, atol=0), g
h = pyjlad.hessian(lambda v: v[0] ** 2 * v[1], np.array([1.0, 3.0]))
assert h.tolist() == [[6.0, 2.0], [2.0, 0.0]], h
_, t = pyjlad.jvp(lambda v: np.sum(np.exp(v)), (x,), (np.ones(2),))
assert math.isclose(t, math.exp(0.5) + math.e, rel_tol=1e-14), t
print("wheel route: gradient, Hessian and JVP equal the hand-derived values")
PY'
