"""Hessian-vector products of loop nests Numba's O3 lays out out of order, against JAX in float64.

Enzyme v0.0.289's forward mode visits a function's blocks in the order they are written. Where
Numba's optimizer left a loop nest's outer header after its inner loop (a block using a value written
before the block defining it), the Hessian-vector product (reverse over forward) came out wrong with no
error: `w = a[:, 0].copy(); sum_ij w[i] a[i, j] w[j]` and the corpus's power iteration (found by
``tools/corpus.py``). pyjlad now lays out every function's blocks in dominance order before Enzyme runs
(:mod:`pyjlad.block_order`, ``pyjlad.engines.differentiate._enzyme_input``). Each program here reads a
temporary array the function filled in an earlier loop inside a later loop nest; each Hessian-vector
product was wrong before.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from corpus.family_numerics import power_iteration, power_iteration_jax  # noqa: E402 (the corpus's own program)


@njit
def copied_column(a):
    n = a.shape[0]
    w = np.empty(n)
    for i in range(n):
        w[i] = a[i, 0]
    rq = 0.0
    for i in range(n):
        for j in range(n):
            rq += w[i] * a[i, j] * w[j]
    return rq


def copied_column_jax(a):
    w = a[:, 0]
    return w @ a @ w


@njit
def row_sums(a):
    n = a.shape[0]
    w = np.empty(n)
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += a[i, j]
        w[i] = s
    rq = 0.0
    for i in range(n):
        for j in range(n):
            rq += w[i] * a[i, j] * w[j]
    return rq


def row_sums_jax(a):
    w = jnp.sum(a, axis=1)
    return w @ a @ w


@njit
def halved_product(a):
    n = a.shape[0]
    v = np.ones(n)
    w = np.empty(n)
    u = np.empty(n)
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += a[i, j] * v[j]
        w[i] = s
    for i in range(n):
        u[i] = w[i] * 0.5
    rq = 0.0
    for i in range(n):
        for j in range(n):
            rq += u[i] * a[i, j] * u[j]
    return rq


def halved_product_jax(a):
    u = (a @ jnp.ones(a.shape[0])) * 0.5
    return u @ a @ u


CASES = {
    "copied column": (copied_column, copied_column_jax, ()),
    "row sums": (row_sums, row_sums_jax, ()),
    "halved product": (halved_product, halved_product_jax, ()),
    "power iteration, 1 step": (power_iteration, power_iteration_jax, (1,)),
    "power iteration, 30 steps": (power_iteration, power_iteration_jax, (30,)),
}


def _matrix(rng: np.random.Generator, n: int = 4) -> np.ndarray:
    b = rng.standard_normal((n, n))
    return b @ b.T + n * np.eye(n)


@pytest.mark.parametrize("name", list(CASES))
def test_hvp_of_a_loop_nest_reading_a_temporary_matches_jax(name: str) -> None:
    f, twin, rest = CASES[name]
    rng = np.random.default_rng(1)
    a, v = _matrix(rng), rng.standard_normal((4, 4))
    a0, v0 = a.copy(), v.copy()
    expected = np.asarray(jax.jvp(jax.grad(lambda x: twin(x, *rest)), (jnp.asarray(a0),), (jnp.asarray(v0),))[1])
    got = pyjlad.hvp(f, (a, *rest), v)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(v, v0)


@pytest.mark.parametrize("name", ["copied column", "power iteration, 30 steps"])
def test_hessian_column_by_column_matches_jax(name: str) -> None:
    # chunk=1 takes one Hessian-vector product per column: the same sweep as hvp.
    f, twin, rest = CASES[name]
    a = _matrix(np.random.default_rng(2))
    a0 = a.copy()
    expected = np.asarray(jax.hessian(lambda x: twin(x, *rest))(jnp.asarray(a0)))
    np.testing.assert_allclose(pyjlad.hessian(f, a, *rest, chunk=1), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pyjlad.hessian(f, a, *rest), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(a, a0)
