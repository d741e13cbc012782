"""Resident memory each distinct differentiated function costs, and what dropping it returns.

Usage: ``.venv/bin/python benchmarks/memory_per_function.py [--functions 40]``

Creates ``--functions`` distinct ``@njit`` functions (each a different constant, so each is
compiled and differentiated on its own) in two phases, in one process:

1. Numba alone: each function compiled and called once;
2. pyjlad: each function's gradient taken once (export, Enzyme, JIT load of the sweep).

It prints the growth of the process's resident set size (``VmRSS``) per function in each
phase, what dropping the pyjlad-phase functions returns to the operating system, and the
growth per function of a new batch taken after the drop (memory the allocator kept from the
dropped functions is reused there). The disk cache
is pointed at a fresh temporary directory so every gradient really runs Enzyme.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
from pathlib import Path


def rss_mib() -> float:
    """The process's resident set size now, in MiB (Linux ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def make(k: int):
    """A distinct ``@njit`` function (its constant ``k`` is part of its code)."""
    from numba import njit

    namespace: dict = {}
    exec(f"def f{k}(x):\n    s = 0.0\n    for i in range(x.shape[0]):\n        s += x[i] * x[i] * {k + 1}.0\n"
         "    return s\n", {"np": __import__("numpy")}, namespace)
    return njit(namespace[f"f{k}"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=40)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="pyjlad-memory-")
    toolchain = Path(os.environ.get("PYJLAD_CACHE_DIR", Path.home() / ".cache" / "pyjlad")) / "toolchain"
    shutil.copytree(toolchain, Path(scratch) / "toolchain")
    os.environ["PYJLAD_CACHE_DIR"] = scratch
    import numpy as np

    import pyjlad

    x = np.linspace(0.0, 1.0, 8)
    n = args.functions
    warm = make(10**6)
    warm(x)
    pyjlad.gradient(warm, x)  # imports, the pool, the first JIT: not per-function costs
    gc.collect()

    start = rss_mib()
    numba_only = [make(k) for k in range(n)]
    for f in numba_only:
        f(x)
    numba_each = (rss_mib() - start) / n

    start = rss_mib()
    functions = [make(n + k) for k in range(n)]
    for k, f in enumerate(functions):
        g = pyjlad.gradient(f, x)
        np.testing.assert_allclose(g, 2.0 * (n + k + 1) * x, rtol=1e-14)
    grown = rss_mib()
    pyjlad_each = (grown - start) / n
    del functions, f, g
    gc.collect()
    returned = (grown - rss_mib()) / n

    start = rss_mib()
    again = [make(2 * n + k) for k in range(n)]
    for f in again:
        pyjlad.gradient(f, x)
    reused_each = (rss_mib() - start) / n

    print(f"{n} functions per phase, RSS growth per function: Numba compile and call {numba_each:.2f} MiB; "
          f"Numba compile plus pyjlad gradient {pyjlad_each:.2f} MiB; "
          f"returned to the OS per function after dropping them {returned:.2f} MiB; "
          f"growth per function of a new batch after the drop {reused_each:.2f} MiB")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
