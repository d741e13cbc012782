"""Tape bytes and times of Hessian-vector products of loops over constant data (issue 20: smaller tapes).

Usage: ``.venv/bin/python benchmarks/hvp_tapes.py [--n 20000]``.

For each kernel below (``n`` samples of 32 features; tests/test_hvp_tapes.py checks the same kernels): the
bytes one ``pyjlad.hvp`` call allocates in large blocks, measured as ``tape_bytes.py`` measures a gradient's
(pyjlad's block pool keeps every block of 64 KiB or more the call freed, each counted as its power-of-two
size), beside the constant data the product reads; the function's, the product's and ``jax.jit`` of
``jax.jvp(jax.grad)``'s best per-call times in the same run. Each product is checked against JAX (float64)
first. Prints markdown.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np
from numba import njit, prange

HERE = Path(__file__).resolve().parent


@njit
def classifier(w, x, y):
    """Softmax cross-entropy, ``w @ x[i]`` written as loops (twice: the row maximum, then the sum). ``prange``
    is ``range`` here; ``njit(parallel=True)`` of it is tests/test_invariant_reads.py's parallel classifier."""
    loss = 0.0
    for i in prange(x.shape[0]):
        m = -1e300
        for r in range(w.shape[0]):
            acc = 0.0
            for c in range(w.shape[1]):
                acc += w[r, c] * x[i, c]
            m = max(m, acc)
        s = 0.0
        zy = 0.0
        for r in range(w.shape[0]):
            acc = 0.0
            for c in range(w.shape[1]):
                acc += w[r, c] * x[i, c]
            s += np.exp(acc - m)
            if r == y[i]:
                zy = acc
        loss += m + np.log(s) - zy
    return loss / x.shape[0]


@njit
def least_squares(w, a, b):
    """``sum((a @ w - b) ** 2)`` as loops: a linear model, its Hessian ``2 a.T a``."""
    s = 0.0
    for i in range(a.shape[0]):
        r = -b[i]
        for j in range(a.shape[1]):
            r += a[i, j] * w[j]
        s += r * r
    return s


@njit
def exp_features(w, x, y):
    """``sum(y[i] exp(w[j] x[i, j]))``: a product whose reverse sweep needs the tangent ``v`` itself."""
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += y[i] * np.exp(w[j] * x[i, j])
    return s


def jax_twins(jnp, nn) -> dict:
    """The kernels in ``jax.numpy`` (``nn`` is ``jax.nn``), by name."""
    def classifier_twin(w, x, y):
        z = x @ w.T
        return jnp.mean(nn.logsumexp(z, axis=1) - z[jnp.arange(x.shape[0]), y])

    return {
        "classifier": classifier_twin,
        "least squares": lambda w, a, b: jnp.sum((a @ w - b) ** 2),
        "exp features": lambda w, x, y: jnp.sum(y[:, None] * jnp.exp(w[None, :] * x)),
    }


def cases(n: int, rng: np.random.Generator, dtype=np.float64) -> dict:
    """name -> (kernel, arguments): ``n`` samples of 32 features; the product is with respect to argument 0."""
    return {
        "classifier": (classifier, ((rng.normal(size=(10, 32)) / 4).astype(dtype),
                                    rng.normal(size=(n, 32)).astype(dtype), rng.integers(0, 10, n))),
        "least squares": (least_squares, (rng.normal(size=32).astype(dtype), rng.normal(size=(n, 32)).astype(dtype),
                                          rng.normal(size=n).astype(dtype))),
        "exp features": (exp_features, ((rng.normal(size=32) / 4).astype(dtype),
                                        rng.normal(size=(n, 32)).astype(dtype), rng.normal(size=n).astype(dtype))),
    }


def hvp_tape_bytes(product, args: tuple, v) -> int:
    """Bytes one warmed call of ``product`` (a :func:`pyjlad.hvp_fn`) allocates in blocks the pool keeps."""
    from pyjlad.engines import pool

    return pool.kept_by(lambda: product(args, v))


def _jax_product(jax, twin):
    """``(w, v, *rest) -> jax.jvp(jax.grad(twin))`` at ``w`` along ``v``: JAX's Hessian-vector product."""
    def product(w, v, *rest):
        return jax.jvp(lambda a: jax.grad(twin)(a, *rest), (w,), (v,))[1]
    return product


def main() -> None:
    import jax
    import numba

    sys.path.insert(0, str(HERE))  # when run as a script; importing the kernels (the tests) leaves the path alone
    from machine import describe  # beside this script
    from tape_bytes import best_time

    import pyjlad

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000, help="samples")
    n = parser.parse_args().n
    jax.config.update("jax_enable_x64", True)
    twins = jax_twins(jax.numpy, jax.nn)
    rng = np.random.default_rng(0)
    rows = []
    for name, (f, args) in cases(n, rng).items():
        v = rng.normal(size=args[0].shape)
        jitted = jax.jit(_jax_product(jax, twins[name]))
        jargs = [jax.numpy.asarray(a) for a in (args[0], v, *args[1:])]
        expected = np.asarray(jitted(*jargs))
        product = pyjlad.hvp_fn(f, 0)
        np.testing.assert_allclose(product(args, v), expected, rtol=1e-9, atol=1e-12)
        kept = hvp_tape_bytes(product, args, v)
        primal = best_time(lambda f=f, args=args: f(*args), budget=0.5)
        hvp = best_time(lambda product=product, args=args, v=v: product(args, v), budget=0.5)
        peer = best_time(lambda jitted=jitted, jargs=jargs: jitted(*jargs).block_until_ready(), budget=0.5)
        rows.append((name, kept, args[1].nbytes, primal, hvp, peer))

    print("### Tape bytes per Hessian-vector product\n")
    print(f"Command: `python benchmarks/hvp_tapes.py --n {n}`; machine: {describe()} (shared); Python "
          f"{platform.python_version()}, numba {numba.__version__}, jax {jax.__version__}, pyjlad "
          f"{pyjlad.__version__}. {n} samples of 32 features, the product with respect to the weights; each "
          "checked against `jax.jvp(jax.grad)` (float64) first.\n")
    print("| kernel | blocks one product allocates (pool) | constant data read | function | `pyjlad.hvp` | ratio "
          "| `jax.jit(jvp(grad))` |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, kept, data, primal, hvp, peer in rows:
        print(f"| {name} | {kept / 2**20:.2f} MiB | {data / 2**20:.2f} MiB | {primal * 1e3:.3f} ms "
              f"| {hvp * 1e3:.3f} ms | {hvp / primal:.2f} | {peer * 1e3:.3f} ms |")
    print("\nTimes are the best per-call times of a few batches, measured one after the other in this run; the "
          "ratio is the product's time / the function's.")


if __name__ == "__main__":
    main()
