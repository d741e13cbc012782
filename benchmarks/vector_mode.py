"""Jacobians and Hessians in Enzyme's vector mode, against one sweep per row and JAX (issue 20).

Usage: ``.venv/bin/python benchmarks/vector_mode.py [--n 64] [--repeats 7]``.

The functions, written with loops under ``@njit`` (their ``jax.numpy`` twins for JAX):
``layer(W, x, b) = tanh(W @ x + b)`` with ``n`` outputs and ``n`` inputs (Jacobian with
respect to ``x``, both modes), and ``loss(x, W) = sum(softplus(W @ x)) + |x|^2 / 2`` with
``n`` inputs (a dense Hessian). pyjlad is timed at several chunk widths (directions per
sweep; ``chunk=1`` is one sweep per row or column, what pyjlad did before vector mode) and
JAX as ``jax.jit(jax.jacfwd / jacrev / hessian)`` in float64 on the same CPU. Each figure is
the median over ``repeats`` rounds of the per-call time of a loop sized to ~50 ms,
the rounds interleaving all variants; compilation is done before timing. Ratios are taken
within this one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numba
import numpy as np
from numba import njit

import pyjlad

CHUNKS = (1, 4, 8, 16, 32, 64)


@njit
def layer(w, x, b):
    n, m = w.shape
    y = np.empty(n)
    for i in range(n):
        acc = b[i]
        for j in range(m):
            acc += w[i, j] * x[j]
        y[i] = np.tanh(acc)
    return y


@njit
def loss(x, w):
    acc = 0.0
    n, m = w.shape
    for i in range(n):
        z = 0.0
        for j in range(m):
            z += w[i, j] * x[j]
        acc += np.log1p(np.exp(z))
    for j in range(m):
        acc += 0.5 * x[j] * x[j]
    return acc


def _per_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    reps = max(1, int(0.05 / once))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def _measure(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name].append(_per_call(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    from machine import describe  # beside this script, on the path when it runs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(20)
    n = opts.n
    w = rng.normal(size=(n, n)) / np.sqrt(n)
    x = rng.normal(size=n)
    b = rng.normal(size=n)

    def layer_jax(x_):
        return jnp.tanh(w @ x_ + b)

    def loss_jax(x_):
        return jnp.sum(jnp.log1p(jnp.exp(w @ x_))) + 0.5 * jnp.sum(x_ * x_)

    jax_fns = {"forward": jax.jit(jax.jacfwd(layer_jax)), "reverse": jax.jit(jax.jacrev(layer_jax)),
               "hessian": jax.jit(jax.hessian(loss_jax))}
    rows = []
    for task in ("forward", "reverse", "hessian"):
        variants: dict[str, Callable[[], object]] = {}
        for chunk in CHUNKS:
            if task == "hessian":
                variants[f"pyjlad chunk={chunk}"] = lambda c=chunk: pyjlad.hessian(loss, x, w, chunk=c)
            else:
                variants[f"pyjlad chunk={chunk}"] = lambda c=chunk, t=task: pyjlad.jacobian(layer, w, x, b, wrt=1,
                                                                                            mode=t, chunk=c)
        jfn = jax_fns[task]
        variants["jax.jit"] = lambda jfn=jfn: jfn(x).block_until_ready()
        want = np.asarray(jfn(x))
        for name, fn in variants.items():  # compile, and check against JAX
            got = np.asarray(fn())
            if not np.allclose(got, want, rtol=1e-10, atol=1e-12):
                raise SystemExit(f"{task} {name}: differs from JAX by {np.abs(got - want).max():.3g}")
        rows.append((task, _measure(variants, opts.repeats)))

    titles = {"forward": f"Jacobian {n}x{n}, mode='forward'", "reverse": f"Jacobian {n}x{n}, mode='reverse'",
              "hessian": f"Hessian {n}x{n}"}
    print("## Vector mode: Jacobians and Hessians, several directions per sweep (issue 20)\n")
    print(f"command: `.venv/bin/python benchmarks/vector_mode.py --n {n} --repeats {opts.repeats}`  ")
    print(f"machine: {describe()}; versions: numba "
          f"{numba.__version__}, pyjlad {pyjlad.__version__}, jax {jax.__version__}  ")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}; default chunk: "
          f"{pyjlad.vector_products.DEFAULT_CHUNK}\n")
    names = [f"pyjlad chunk={c}" for c in CHUNKS]
    print("| task | " + " | ".join(names) + " | jax.jit | chunk=1 / best chunk | best chunk / jax |")
    print("|---|" + "---:|" * (len(names) + 3))
    for task, t in rows:
        best = min(names[1:], key=lambda k: t[k])
        print(f"| {titles[task]} | " + " | ".join(f"{t[k] * 1e6:,.1f} us" for k in names)
              + f" | {t['jax.jit'] * 1e6:,.1f} us | {t[names[0]] / t[best]:.1f}x | {t[best] / t['jax.jit']:.2f}"
              + f" ({best.split('=')[1]}) |")
    print("\nMedian per-call time over the rounds; every result checked against JAX (float64) first. "
          "`chunk=1` is one sweep per row (column), as before vector mode. A last column under 1 means "
          "pyjlad is faster than `jax.jit`.")


if __name__ == "__main__":
    main()
