"""Cost of calling a pyjlad derivative from ``@njit`` code, next to the function itself (issue 16).

Usage: ``.venv/bin/python benchmarks/numba_call_overhead.py``.

For a two-float function and a sum over a 1,000-element array, each timed loop runs
inside ``@njit`` code and calls, ``n`` times: the primal; a hand-written gradient
(the ideal: what a derivative inlined by a person costs); the pyjlad derivative
reached as a global. Reported as nanoseconds per call (the minimum over repeats,
each loop interleaved with the others), with the Python-level call of the same
derivative for comparison. The derivative's own arithmetic (a forward and a
reverse sweep) is part of its time: the overhead of the call path is its time
less the hand-written gradient's.
"""

from __future__ import annotations

import math
import os
import platform
import time

import numba
import numpy as np
from numba import njit

import pyjlad


@njit
def two_floats(a, b):
    return math.sin(a) * b + a * a * b


@njit
def two_floats_grad(a, b):
    return math.cos(a) * b + 2.0 * a * b, math.sin(a) + a * a


@njit
def sin_dot(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * x[i]
    return s


@njit
def sin_dot_grad(x):
    g = np.zeros(x.shape, x.dtype)
    for i in range(x.shape[0]):
        g[i] = math.sin(x[i]) + x[i] * math.cos(x[i])
    return g


D_TWO = pyjlad.grad(two_floats, wrt=(0, 1))
D_SIN_DOT = pyjlad.grad(sin_dot)


@njit
def loop_primal_two(n, b):
    s = 0.0
    for i in range(n):
        s += two_floats(i * 1e-6, b)
    return s


@njit
def loop_hand_two(n, b):
    s = 0.0
    for i in range(n):
        da, db = two_floats_grad(i * 1e-6, b)
        s += da + db
    return s


@njit
def loop_pyjlad_two(n, b):
    s = 0.0
    for i in range(n):
        da, db = D_TWO(i * 1e-6, b)
        s += da + db
    return s


@njit
def loop_primal_array(n, x):
    s = 0.0
    for _ in range(n):
        s += sin_dot(x)
    return s


@njit
def loop_hand_array(n, x):
    s = 0.0
    for _ in range(n):
        s += sin_dot_grad(x)[0]
    return s


@njit
def loop_pyjlad_array(n, x):
    s = 0.0
    for _ in range(n):
        s += D_SIN_DOT(x)[0]
    return s


def _ns_per_call(fn, n: int, *args, repeats: int = 7) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(n, *args)
        times.append((time.perf_counter() - start) / n * 1e9)
    return times


def _python_ns_per_call(fn, args, n: int, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter() - start) / n * 1e9)
    return best


def _measure(loops: dict[str, object], n: int, *args) -> dict[str, float]:
    for fn in loops.values():
        fn(10, *args)  # compile (the derivative is built here)
    best = dict.fromkeys(loops, math.inf)
    for _ in range(5):  # interleaved rounds: a busy neighbour slows all three alike
        for name, fn in loops.items():
            best[name] = min(best[name], min(_ns_per_call(fn, n, *args, repeats=3)))
    return best


def main() -> None:
    import jax

    print("## Calling a derivative from `@njit` code (issue 16)\n")
    print("command: `.venv/bin/python benchmarks/numba_call_overhead.py`  ")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; versions: numba "
          f"{numba.__version__}, pyjlad {pyjlad.__version__}, jax {jax.__version__} (not timed here)  ")
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}\n")
    x = np.linspace(0.0, 1.0, 1000)
    cases = [
        ("two floats", {"primal": loop_primal_two, "hand-written grad": loop_hand_two,
                        "pyjlad grad": loop_pyjlad_two}, 2_000_000, (0.5,), D_TWO, (0.3, 0.5)),
        ("1,000-element loop", {"primal": loop_primal_array, "hand-written grad": loop_hand_array,
                                 "pyjlad grad": loop_pyjlad_array}, 20_000, (x,), D_SIN_DOT, (x,)),
        ("the same loop over 1 element", {"primal": loop_primal_array, "hand-written grad": loop_hand_array,
                                          "pyjlad grad": loop_pyjlad_array}, 2_000_000, (x[:1].copy(),),
         D_SIN_DOT, (x[:1].copy(),)),
    ]
    print("| function | primal in @njit | hand-written grad in @njit | pyjlad grad in @njit "
          "| pyjlad - hand-written | pyjlad grad from Python |")
    print("|---|---:|---:|---:|---:|---:|")
    overheads = []
    for title, loops, n, args, derivative, py_args in cases:
        best = _measure(loops, n, *args)
        python = _python_ns_per_call(derivative, py_args, 20_000 if n > 100_000 else 2_000)
        overhead = best["pyjlad grad"] - best["hand-written grad"]
        overheads.append(overhead)
        print(f"| {title} | {best['primal']:,.1f} ns | {best['hand-written grad']:,.1f} ns "
              f"| {best['pyjlad grad']:,.1f} ns | {overhead:,.1f} ns | {python:,.0f} ns |")
    fixed = max(overheads[0], overheads[2])
    print(f"\nGoal: under 20 ns of overhead per call from `@njit` code: {fixed:,.1f} ns at most where the call "
          f"dominates (two floats, one element: {'met' if fixed < 20 else 'not met'}). Times per call, the "
          "minimum over interleaved repeats. The derivative's own arithmetic (a forward and a reverse sweep "
          "built by Enzyme) is part of its time, so what the call path adds is its time less the hand-written "
          "gradient's where the arithmetic is negligible; both array gradients allocate their result per "
          f"call. Over 1,000 elements Enzyme's derivative itself is slower than the hand-written one "
          f"({overheads[1] / 1000:,.1f} ns per element): that is the arithmetic Enzyme generates, not the call.")


if __name__ == "__main__":
    main()
