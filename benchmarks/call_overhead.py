"""Per-call cost of a reused ``pyjlad.grad`` callable, next to the Numba function itself.

Usage: ``.venv/bin/python benchmarks/call_overhead.py`` (after ``scripts/setup.sh``).
Both are timed in the same run, interleaved, and reported as medians of many
repeats; the ratio is the figure to compare across machines.
"""

from __future__ import annotations

import math
import platform
import timeit

import llvmlite
import numba
import numpy as np
from numba import njit

import pyjlad


@njit
def two_scalars(x, y):
    return math.sin(x) * y + x * x


@njit
def array_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * x[i]
    return s


WEIGHTS = np.linspace(0.5, 1.5, 1000)


def weighted_square(x):
    """A plain Python function reading a global array (pyjlad compiles it with ``numba.njit``, and checks at each
    call whether the array changed: ``pyjlad.frozen_globals.recompile_if_changed``)."""
    return np.sum(WEIGHTS * x * x)


def median_time(fn, number: int, repeat: int = 15) -> float:
    return float(np.median(timeit.repeat(fn, number=number, repeat=repeat)) / number)


def measure(name: str, f, df, args, number: int) -> dict:
    f(*args)
    df(*args)
    t_f = median_time(lambda: f(*args), number)
    t_df = median_time(lambda: df(*args), number)
    overhead = t_df - t_f
    print(f"{name:<34} {t_f * 1e6:10.2f} {t_df * 1e6:12.2f} {t_df / t_f:8.2f} {overhead * 1e6:12.2f}")
    return {"name": name, "primal_us": t_f * 1e6, "grad_us": t_df * 1e6}


def main() -> None:
    print(f"pyjlad {pyjlad.__version__}, numba {numba.__version__}, llvmlite {llvmlite.__version__}, "
          f"numpy {np.__version__}, Python {platform.python_version()}, {platform.processor() or platform.machine()}")
    print(f"{'workload':<34} {'f (us)':>10} {'grad f (us)':>12} {'ratio':>8} {'grad - f (us)':>12}")
    measure("two scalars, grad(f, wrt=(0, 1))", two_scalars, pyjlad.grad(two_scalars, wrt=(0, 1)),
            (0.3, 1.7), number=20000)
    x = np.linspace(0.0, 1.0, 1000)
    measure("1,000-element array loop, grad(f)", array_loop, pyjlad.grad(array_loop), (x,), number=2000)
    jitted = njit(weighted_square)
    measure("1,000-element global, @njit f", jitted, pyjlad.grad(jitted), (x,), number=2000)
    measure("the same, plain Python f", jitted, pyjlad.grad(weighted_square), (x,), number=2000)


if __name__ == "__main__":
    main()
