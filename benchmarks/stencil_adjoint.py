"""Why the heat stencil's gradient costs several times its function: the form of its reverse sweep (issue 20).

Usage: ``.venv/bin/python benchmarks/stencil_adjoint.py [--repeats 5]``.

The heat stencil of the main table (``workloads.heat_energy``: 256x256, 100 steps, zero outside
the grid) is differentiated three ways, each checked against ``jax.grad`` of its JAX twin
(float64) before timing:

* ``pyjlad.grad`` (Enzyme);
* by hand in Numba, the reverse sweep in *scatter* form, the form Enzyme's adjoint of a loop
  has: each cell's adjoint is added into the adjoints of the five cells it read (a read-modify-write
  of ``du[i, j - 1]``, ``du[i, j]``, ``du[i, j + 1]`` and the rows above and below);
* by hand in Numba, the reverse sweep in *gather* form: each cell's adjoint is read from the
  adjoints of the cells that read it (the stencil is its own transpose), one write per cell.

Both hand-written gradients keep what Enzyme keeps (each step's Laplacian, for kappa's adjoint:
50 MiB, one grid per step) and run the same forward sweep, timed alone too; they are compiled with
``fastmath`` (Enzyme's adjoint adds with fast-math flags too). The scatter form's stores to neighbouring addresses in
consecutive iterations are what LLVM cannot vectorize; the gather form vectorizes like the
function. Ratios are to the function's time in the same run (best per-call time of a few batches).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workloads as w  # noqa: E402
from machine import describe  # noqa: E402
from tape_bytes import best_time  # noqa: E402

import pyjlad  # noqa: E402


@njit(fastmath=True)
def _taped_forward(u0, kappa, lap):
    """The function's steps, keeping each step's Laplacian in ``lap``; returns the final grid."""
    n = u0.shape[0]
    u = u0.copy()
    v = np.empty_like(u)
    c = w.ALPHA * kappa
    for s in range(w.HEAT_STEPS):
        for i in range(n):
            for j in range(n):
                up = u[i - 1, j] if i > 0 else 0.0
                down = u[i + 1, j] if i < n - 1 else 0.0
                left = u[i, j - 1] if j > 0 else 0.0
                right = u[i, j + 1] if j < n - 1 else 0.0
                lap[s, i, j] = up + down + left + right - 4.0 * u[i, j]
                v[i, j] = u[i, j] + c * lap[s, i, j]
        u, v = v, u
    return u


@njit(fastmath=True)
def _scatter_reverse(g, kappa, lap):
    """Adjoints of ``u0`` and ``kappa`` from ``g`` (the final grid's adjoint), each cell adding into its readers."""
    n = g.shape[0]
    c = w.ALPHA * kappa
    dk = 0.0
    du = np.zeros_like(g)
    for s in range(w.HEAT_STEPS - 1, -1, -1):
        for i in range(n - 1, -1, -1):
            for j in range(n - 1, -1, -1):
                d = g[i, j]
                dk += w.ALPHA * lap[s, i, j] * d
                h = c * d
                du[i, j] += d - 4.0 * h
                if j < n - 1:
                    du[i, j + 1] += h
                if j > 0:
                    du[i, j - 1] += h
                if i < n - 1:
                    du[i + 1, j] += h
                if i > 0:
                    du[i - 1, j] += h
        g, du = du, g
        du[:] = 0.0
    return g, dk


@njit(fastmath=True)
def _gather_reverse(g, kappa, lap):
    """The same adjoints, each cell's read from the cells that read it (one write per cell)."""
    n = g.shape[0]
    c = w.ALPHA * kappa
    dk = 0.0
    du = np.empty_like(g)
    for s in range(w.HEAT_STEPS - 1, -1, -1):
        for i in range(n):
            for j in range(n):
                dk += w.ALPHA * lap[s, i, j] * g[i, j]
                up = g[i - 1, j] if i > 0 else 0.0
                down = g[i + 1, j] if i < n - 1 else 0.0
                left = g[i, j - 1] if j > 0 else 0.0
                right = g[i, j + 1] if j < n - 1 else 0.0
                du[i, j] = g[i, j] + c * (up + down + left + right - 4.0 * g[i, j])
        g, du = du, g
    return g, dk


def _by_hand(reverse):
    lap = np.empty((w.HEAT_STEPS, w.GRID, w.GRID))

    def gradient(u0, kappa):
        u = _taped_forward(u0, kappa, lap)
        return reverse(2.0 * u, kappa, lap)
    return gradient


def _best(fn, repeats: int) -> float:
    """Best per-call time over ``repeats`` batches of about 0.2 s each."""
    return best_time(fn, budget=0.2 * repeats, repeats=repeats)


def main() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    rng = np.random.default_rng(3)
    u0, kappa = rng.uniform(0.0, 1.0, (w.GRID, w.GRID)), 0.9
    oracle = jax.jit(jax.grad(w.heat_jax(), argnums=(0, 1)))(u0.copy(), kappa)
    ways = {
        "`pyjlad.grad` (Enzyme: scatter form)": pyjlad.grad(w.heat_energy, wrt=(0, 1)),
        "by hand, scatter form": _by_hand(_scatter_reverse),
        "by hand, gather form": _by_hand(_gather_reverse),
    }
    for name, gradient in ways.items():
        du, dk = gradient(u0.copy(), kappa)
        np.testing.assert_allclose(du, np.asarray(oracle[0]), rtol=1e-9, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(dk, float(oracle[1]), rtol=1e-9, err_msg=name)
    function = _best(lambda: w.heat_energy(u0, kappa), opts.repeats)
    times = {name: _best(lambda g=gradient: g(u0, kappa), opts.repeats) for name, gradient in ways.items()}
    lap = np.empty((w.HEAT_STEPS, w.GRID, w.GRID))
    times["by hand: its forward sweep alone, writing the Laplacians"] = _best(
        lambda: _taped_forward(u0, kappa, lap), opts.repeats)
    print("### The heat stencil's reverse sweep: scatter and gather form\n")
    print(f"command: `.venv/bin/python benchmarks/stencil_adjoint.py --repeats {opts.repeats}`  ")
    print(f"machine: {describe()}; versions: numba {numba.__version__}, pyjlad {pyjlad.__version__}, "
          f"jax {jax.__version__}  \nload average (1 min) after: {os.getloadavg()[0]:.2f}\n")
    print(f"heat {w.GRID}x{w.GRID}, {w.HEAT_STEPS} steps; every gradient checked against `jax.grad` (float64) "
          "first.\n")
    print("| gradient | time | ratio to the function |")
    print("|---|---:|---:|")
    print(f"| the function | {function * 1e3:.2f} ms | 1.00 |")
    for name, t in times.items():
        print(f"| {name} | {t * 1e3:.2f} ms | {t / function:.2f} |")


if __name__ == "__main__":
    main()
