"""pyjlad quick start: gradients of Numba functions, each checked by finite differences.

Run with ``bash scripts/run-example.sh`` (sets everything up first).
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import cfunc, njit, types

import pyjlad


@njit
def sin_loop(x):
    """sum_i sin(x_i) * x_i, an array loop."""
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * x[i]
    return s


@njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@njit
def damped_oscillator(k, c, x0):
    """Final position of x'' = -k x - c x' after 10,000 explicit Euler steps."""
    x, v, dt = x0, 0.0, 1e-3
    for _ in range(10_000):
        x, v = x + dt * v, v + dt * (-k * x - c * v)
    return x


@cfunc(types.double(types.double, types.double))
def product(a, b):  # seed 000: a @cfunc, differentiated through its inner function
    return a * b


def central_difference(f, args, index, h=1e-6):
    args = list(args)
    x = args[index]
    if isinstance(x, np.ndarray):
        g = np.empty_like(x)
        for i in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[i] += h
            minus[i] -= h
            args[index] = plus
            fp = f(*args)
            args[index] = minus
            g[i] = (fp - f(*args)) / (2 * h)
        return g
    args[index] = x + h
    fp = f(*args)
    args[index] = x - h
    return (fp - f(*args)) / (2 * h)


def report(name, f, args, wrt, primal=None):
    start = time.perf_counter()
    grads = pyjlad.gradient(f, *args, wrt=wrt)
    elapsed = time.perf_counter() - start
    grads = grads if isinstance(wrt, tuple) else (grads,)
    indices = wrt if isinstance(wrt, tuple) else (wrt,)
    primal = primal or f
    print(f"\n{name}  (first gradient incl. compile: {elapsed:.2f} s)")
    worst = 0.0
    for index, g in zip(indices, grads):
        fd = central_difference(primal, args, index)
        err = float(np.max(np.abs(np.asarray(g) - fd) / (1.0 + np.abs(fd))))
        worst = max(worst, err)
        show_g = np.array2string(np.asarray(g)[:4], precision=6) if np.ndim(g) else f"{g:.8f}"
        show_fd = np.array2string(np.asarray(fd)[:4], precision=6) if np.ndim(fd) else f"{fd:.8f}"
        print(f"  d/d arg{index}: pyjlad {show_g}   finite diff {show_fd}")
    print(f"  max relative difference to finite differences: {worst:.1e}")
    return worst


def main() -> int:
    rng = np.random.default_rng(0)
    worst = [
        report("sum(sin(x) * x), 1000 points", sin_loop, (np.linspace(0.0, 1.0, 1000),), 0),
        report("Rosenbrock, 6 dimensions", rosenbrock, (rng.uniform(-1, 1, 6),), 0),
        report("damped oscillator after 10^4 Euler steps", damped_oscillator, (4.0, 0.3, 1.0), (0, 1, 2)),
        report("@cfunc a*b at (2, 3) (seed 000)", product, (2.0, 3.0), (0, 1),
               primal=lambda a, b: a * b),
    ]
    ok = max(worst) < 1e-5
    print(f"\n{'OK' if ok else 'MISMATCH'}: all gradients agree with finite differences" if ok
          else "\nMISMATCH: a gradient disagrees with finite differences")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
