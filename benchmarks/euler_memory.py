"""Peak memory of a reverse-mode gradient through a 10^5-step explicit Euler integration.

Usage: ``.venv/bin/python benchmarks/euler_memory.py``

Reverse mode must keep what the backward sweep needs from every step (Enzyme
caches it on a tape). The step count is an argument, so the gradient is
compiled and warmed on 10 steps first; the figure is the growth of the
process's peak resident set size (``ru_maxrss``) caused by the 10^5-step
gradient alone, next to the size of the states it must remember.
"""

from __future__ import annotations

import math
import resource

import numpy as np
from numba import njit

import pyjlad


@njit
def euler(x0, k, steps):
    x = x0.copy()
    dt = 1e-5
    for _ in range(steps):
        for j in range(x.shape[0]):
            x[j] = x[j] + dt * (-k * x[j] + math.sin(x[(j + 1) % x.shape[0]]))
    return np.sum(x * x)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    x0 = np.array([1.0, -0.5, 0.25])
    df = pyjlad.grad(euler, wrt=(0, 1))
    df(x0, 0.7, 10)  # compile and warm
    euler(x0, 0.7, 100_000)
    before = peak_rss_mib()
    gx, gk = df(x0, 0.7, 100_000)
    after = peak_rss_mib()
    states = 100_000 * x0.size * 8 / 2**20
    print(f"gradient wrt x0 {np.array2string(gx, precision=6)}, wrt k {gk:.6f}")
    print(f"peak RSS before the 10^5-step gradient: {before:.1f} MiB, after: {after:.1f} MiB, "
          f"growth {after - before:.1f} MiB (the 10^5 states themselves are {states:.1f} MiB)")


if __name__ == "__main__":
    main()
