"""Gradients of loops that allocate a temporary per iteration, with and without pyjlad's memory scopes.

Usage: ``.venv/bin/python benchmarks/temporaries.py [--samples 20000]``.

A softmax classifier's mean cross-entropy (10x32 weights) written three ways: loops with the
scores ``z`` allocated once before the sample loop, the same loops with ``z = np.empty(k)`` inside it,
and NumPy (``w @ x[i]``, ``np.exp(z - m)``: Numba allocates each result). For each: the function's
time, the gradient's (``pyjlad.grad`` with respect to the weights) with ``PYJLAD_SCOPE_TEMPORARIES``
on (the default: :mod:`pyjlad.memory_scopes`) and off, their ratios to the function, the bytes one
gradient call allocates in blocks of 64 KiB or more (pyjlad's block pool, as ``tape_bytes.py``
counts them) and ``jax.jit(jax.grad)`` of the same loss. Every gradient is checked against
``jax.grad`` (float64) first. One process, everything timed in the same run. Prints markdown.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np
from numba import njit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import describe  # noqa: E402
from tape_bytes import best_time, tape_bytes  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests"))
from corpus.family_ml import classifier_numpy as numpy_form  # noqa: E402 (the differential corpus's programs)
from corpus.family_ml import classifier_per_sample as per_sample  # noqa: E402


@njit
def hoisted(w, x, y):
    """Loops; the scores' array allocated once."""
    n, k, d = x.shape[0], w.shape[0], w.shape[1]
    loss = 0.0
    z = np.empty(k)
    for i in range(n):
        for a in range(k):
            s = 0.0
            for b in range(d):
                s += w[a, b] * x[i, b]
            z[a] = s
        m = z[0]
        for a in range(1, k):
            m = max(m, z[a])
        t = 0.0
        for a in range(k):
            t += math.exp(z[a] - m)
        loss += m + math.log(t) - z[y[i]]
    return loss / n


FORMS = {"loops, `z` allocated once": hoisted, "loops, `z = np.empty(k)` per sample": per_sample,
         "NumPy per sample (`w @ x[i]`, `np.exp(z - m)`)": numpy_form}


def _measured(f, args: tuple, scoped: bool, oracle: np.ndarray) -> tuple[float, int]:
    """Seconds per call and tape bytes of ``pyjlad.grad(f, wrt=0)`` built and run with
    ``PYJLAD_SCOPE_TEMPORARIES`` as ``scoped`` says (a dispatcher of its own, so that no derivative is shared)."""
    import pyjlad

    g = njit(f.py_func)
    os.environ["PYJLAD_SCOPE_TEMPORARIES"] = "1" if scoped else "0"
    try:
        df = pyjlad.grad(g, wrt=0)
        error = float(np.max(np.abs(df(*args) - oracle)))
        if error > 1e-12:
            raise SystemExit(f"{f.__name__} (scoped={scoped}): gradient off by {error:.3g} from jax.grad")
        return best_time(lambda: df(*args)), tape_bytes(g, args, (0,))
    finally:
        os.environ.pop("PYJLAD_SCOPE_TEMPORARIES", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    ns = parser.parse_args()
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    w, x, y = rng.normal(size=(10, 32)) / 4, rng.normal(size=(ns.samples, 32)), rng.integers(0, 10, ns.samples)

    def loss_jax(w_, x_, y_):
        z = x_ @ w_.T
        return jnp.mean(jax.nn.logsumexp(z, axis=1) - z[jnp.arange(y_.shape[0]), y_])

    xj, yj = jnp.asarray(x), jnp.asarray(y)
    oracle = np.asarray(jax.grad(loss_jax)(jnp.asarray(w), xj, yj))
    jax_grad = jax.jit(jax.grad(loss_jax))
    jax_ms = best_time(lambda: jax_grad(w, xj, yj).block_until_ready()) * 1e3

    print(f"command: `python benchmarks/temporaries.py --samples {ns.samples}`  ")
    print(f"machine: {describe()}  ")
    print(f"softmax classifier, {ns.samples:,} samples, 10x32 weights; gradient with respect to the weights, "
          f"each checked against `jax.grad` (float64) first; `jax.jit(jax.grad)`: {jax_ms:.2f} ms\n")
    print("| form | function | gradient, scoped | ratio | tape | gradient, not scoped | ratio | tape |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, f in FORMS.items():
        primal = best_time(lambda f=f: f(w, x, y))
        cells = [label, f"{primal * 1e3:.2f} ms"]
        for scoped in (True, False):
            seconds, kept = _measured(f, (w, x, y), scoped, oracle)
            cells += [f"{seconds * 1e3:.2f} ms", f"{seconds / primal:.1f}", f"{kept / 2**20:.1f} MiB"]
        print("| " + " | ".join(cells) + " |")
    print("\nRatio: gradient time / function time, in this run. Tape: the blocks of 64 KiB or more one gradient "
          "call allocates (pyjlad's block pool, each block counted as its power-of-two size); the samples are "
          f"{x.nbytes / 2**20:.1f} MiB.")


if __name__ == "__main__":
    main()
