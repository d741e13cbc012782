"""Hessian-vector products of loops over constant data keep no copy of that data (issue 20: smaller tapes).

A Hessian-vector product is Enzyme's reverse sweep over the forward derivative it builds of the function
(:func:`pyjlad.engines.hvp_driver.hvp_driver`). That forward derivative used to write the result's tangent
through the shadow of Numba's result pointer, a parameter Enzyme gives no ``noalias``, after every read of
the inputs; the reverse sweep could then not tell that store from the inputs and kept a copy of every value
it read: the softmax classifier's product over 20,000 samples kept 133 MiB (a copy of ``x[i]`` per row of
weights, twice), 27 times the data. The entry's copy the products differentiate now returns its result
(:func:`pyjlad.engines.entry_status.result_by_value`), and nothing is kept per element read.

Each product is checked against ``jax.jvp(jax.grad(f))`` in float64 (from copies taken before the call),
its arguments unchanged, and its tape measured as the benchmark suite measures it (the block pool keeps the
blocks of 64 KiB or more one warmed call allocates): under one copy of the constant data, where it was
several before.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines import pool

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(2026_12_02)


@njit
def classifier(w, x, y):
    """Softmax cross-entropy, ``w @ x[i]`` written as loops (twice: the row maximum, then the sum)."""
    loss = 0.0
    for i in range(x.shape[0]):
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


def jax_classifier(w, x, y):
    z = x @ w.T
    return jnp.mean(jax.nn.logsumexp(z, axis=1) - z[jnp.arange(x.shape[0]), y])


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


def jax_least_squares(w, a, b):
    return jnp.sum((a @ w - b) ** 2)


@njit
def exp_features(w, x, y):
    """A product that needs the tangent ``v`` in its reverse sweep: ``sum(exp(w[j] x[i, j]))`` weighted by y."""
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += y[i] * np.exp(w[j] * x[i, j])
    return s


def jax_exp_features(w, x, y):
    return jnp.sum(y[:, None] * jnp.exp(w[None, :] * x))


def _classifier_args(n: int, dtype=np.float64):
    w = (RNG.normal(size=(10, 32)) / 4).astype(dtype)
    return w, RNG.normal(size=(n, 32)).astype(dtype), RNG.integers(0, 10, n)


def _least_squares_args(n: int, dtype=np.float64):
    return RNG.normal(size=32).astype(dtype), RNG.normal(size=(n, 32)).astype(dtype), RNG.normal(size=n).astype(dtype)


def _exp_features_args(n: int, dtype=np.float64):
    return (RNG.normal(size=32) / 4).astype(dtype), RNG.normal(size=(n, 32)).astype(dtype), \
        RNG.normal(size=n).astype(dtype)


CASES = {
    "classifier": (classifier, jax_classifier, _classifier_args),
    "least squares": (least_squares, jax_least_squares, _least_squares_args),
    "exp features": (exp_features, jax_exp_features, _exp_features_args),
}
#: The most each product may keep, as a fraction of the constant data it reads (8192 rows of 32 doubles, 2 MiB).
#: The classifier keeps its 20 dot products per sample (cheaper than computing them again; 2.25 MiB as the
#: pool counts it); the others keep nothing per element. Before: 68 MiB, 2.06 MiB and 6.06 MiB.
MOST_KEPT = {"classifier": 2.0, "least squares": 0.5, "exp features": 0.5}


@pytest.mark.parametrize("name", list(CASES))
def test_products_against_jax(name) -> None:
    f, jf, make = CASES[name]
    args = make(40)
    v = RNG.normal(size=args[0].shape)
    before = [a.copy() for a in args]
    v0 = v.copy()
    _, expected = jax.jvp(jax.grad(lambda w: jf(w, *map(jnp.asarray, before[1:]))), (jnp.asarray(before[0]),),
                          (jnp.asarray(v0),))
    got = pyjlad.hvp(f, args, v)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-10, atol=1e-12)
    for a, b in zip(args, before, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(v, v0)


def test_float32_product_against_jax() -> None:
    """The entry's copy returns a float32 result by value too."""
    w, a, b = _least_squares_args(30, np.float32)
    v = RNG.normal(size=w.shape).astype(np.float32)
    expected = 2 * a.astype(np.float64).T @ (a.astype(np.float64) @ v.astype(np.float64))
    got = pyjlad.hvp(least_squares, (w, a, b), v)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("name", list(CASES))
def test_products_keep_no_copy_of_the_data(name) -> None:
    f, _, make = CASES[name]
    args = make(8192)
    v = RNG.normal(size=args[0].shape)
    product = pyjlad.hvp_fn(f, 0)
    kept = pool.kept_by(lambda: product(args, v))
    data = args[1].nbytes  # the constant array every element of which the product reads
    assert kept < MOST_KEPT[name] * data, f"the product of {name} keeps {kept} bytes, the data it reads is {data}"
