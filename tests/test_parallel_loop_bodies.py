"""Loop bodies Enzyme refused to differentiate in parallel until pyjlad typed them (:mod:`pyjlad.parfor_bodies`).

Each kernel indexes with ``i % m``: LLVM freezes the remainder it branches on and takes a 32-bit fast
path through a ``trunc`` of the divisor, a scalar the loop reads from memory Enzyme cannot type. Before,
each fell back to the serial derivative ("Assertion `addingType->isFPOrFPVectorTy()'", "Cannot deduce
adding type (cast)"). Now each must run in parallel (a fallback warning is an error here) and match
JAX float64 (float32 for the float32 kernel), computed from copies taken before the call, at 2 threads,
equal to rounding run to run, the caller's arrays unchanged.

The row kernels write each iteration's row of an array from a temporary array the iteration computes from a
shared input: the shape check of that write formats run-time values into its message, and the gufunc
wrapper's path turning such an exception into a Python one called the message's argument builder through a
pointer, which Enzyme refused ("No create nofree of unknown value"): the serial derivative ran instead,
with a warning (:func:`pyjlad.parfor_bodies.returning_error_paths`).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
from pyjlad.openmp import libomp_path

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

pytestmark = [pytest.mark.skipif(libomp_path() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed"),
              pytest.mark.usefixtures("parallel_two_threads")]


@njit(parallel=True)
def cyclic_weights(a, w):
    s = 0.0
    for i in prange(a.shape[0]):
        s += a[i] * w[i % w.shape[0]]
    return s


@njit(parallel=True)
def softmax_loss(x, w):
    n, k = x.shape[0], w.shape[1]
    total = 0.0
    for i in prange(n):
        z = np.empty(k)
        for c in range(k):
            acc = 0.0
            for d in range(x.shape[1]):
                acc += x[i, d] * w[d, c]
            z[c] = acc
        top = np.max(z)
        total += top + np.log(np.sum(np.exp(z - top))) - z[i % k]
    return total / n


@njit(parallel=True)
def cyclic_map(x, w):
    n = x.shape[0]
    out = np.empty(n, x.dtype)
    for i in prange(n):
        out[i] = np.tanh(x[i]) * w[i % w.shape[0]] + x[n - 1 - i]
    return out


@njit(parallel=True)
def loops_in_sequence(x, w):
    n = x.shape[0]
    a = np.empty(n)
    for i in prange(n):
        a[i] = np.exp(0.3 * x[i])
    b = np.empty(n)
    for i in prange(n):
        b[i] = a[i] * w[i] + a[(i + 1) % n]
    s = 0.0
    for i in prange(n):
        s += b[i] * b[i]
    return s


@njit(parallel=True)
def scaled_rows(m, w, b):
    n, k = b.shape
    ts = np.zeros((n, k))
    for i in prange(n):
        t = m[i] * w[0]  # a row of the shared w, scaled: a temporary array per iteration
        ts[i, :] = b[i, :] / t
    return np.sum(ts ** 2)


@njit(parallel=True)
def scaled_rows_2d(m, w, b):
    n, k = b.shape
    ts = np.zeros((n, k))
    for i in prange(n):
        t = m[i] * w
        ts[i, :] = b[i, :] / t[0]
    return np.sum(ts ** 2)


@njit(parallel=True)
def scaled_elements(m, w, b):
    n, k = b.shape
    ts = np.zeros((n, k))
    for i in prange(n):
        t = m[i] * w[0]
        for j in range(k):
            ts[i, j] = b[i, j] / t[j]
    return np.sum(ts ** 2)


@njit(parallel=True)
def standardized(mse, vinv, b):  # seed 003's remote_stats with the inverse given
    n, k = b.shape
    ts = np.zeros((n, k))
    for voxel in prange(n):
        var = mse[voxel] * vinv.copy()
        se = np.sqrt(np.diag(var))
        ts[voxel, :] = b[voxel, :] / se
    return np.sum(ts ** 2)


ROW_KERNELS = {
    "scaled_rows": (scaled_rows, lambda m, w, b: jnp.sum((b / (m[:, None] * w[0])) ** 2)),
    "scaled_rows_2d": (scaled_rows_2d, lambda m, w, b: jnp.sum((b / (m[:, None] * w[0])) ** 2)),
    "scaled_elements": (scaled_elements, lambda m, w, b: jnp.sum((b / (m[:, None] * w[0])) ** 2)),
    "standardized": (standardized, lambda m, w, b: jnp.sum(b ** 2 / (m[:, None] * jnp.diag(w)))),
}


def _strict(call):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        return call()


def _check(call, args, want, rtol):
    copies = [a.copy() for a in args]
    first = _strict(call)
    for _ in range(5):
        again = _strict(call)
        for g, g0 in zip(again, first):
            np.testing.assert_allclose(g, g0, rtol=1e-13, atol=1e-13 * np.abs(g0).max())
    for g, w in zip(first, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=rtol, atol=rtol)
    for a, a0 in zip(args, copies):
        np.testing.assert_array_equal(a, a0)


def test_cyclic_weights():
    rng = np.random.default_rng(1)
    a, w = rng.normal(size=301), rng.normal(size=7)
    a0, w0 = a.copy(), w.copy()
    want = jax.grad(lambda p, q: jnp.sum(p * q[jnp.arange(301) % 7]), argnums=(0, 1))(a0, w0)
    _check(lambda: pyjlad.grad(cyclic_weights, wrt=(0, 1))(a, w), (a, w), want, 1e-12)


def test_softmax_with_a_label_per_row():
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(200, 5)), rng.normal(size=(5, 3))
    x0, w0 = x.copy(), w.copy()

    def twin(p, q):
        z = p @ q
        return jnp.mean(jax.scipy.special.logsumexp(z, axis=1) - z[jnp.arange(200), jnp.arange(200) % 3])

    want = jax.grad(twin, argnums=(0, 1))(x0, w0)
    _check(lambda: pyjlad.grad(softmax_loss, wrt=(0, 1))(x, w), (x, w), want, 1e-12)


def test_float32_array_result_vjp():
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=64).astype(np.float32), rng.normal(size=4).astype(np.float32)
    ct = rng.normal(size=64).astype(np.float32)
    x0, w0 = x.copy(), w.copy()
    _, pullback = jax.vjp(lambda p, q: jnp.tanh(p) * jnp.tile(q, 16) + p[::-1], x0, w0)
    want = pullback(ct.copy())
    _check(lambda: pyjlad.vjp(cyclic_map, (x, w), ct)[1], (x, w, ct), want, 2e-5)


def test_loops_in_sequence_reading_a_neighbour_of_the_first_ones_result():
    rng = np.random.default_rng(4)
    x, w = rng.normal(size=40), rng.normal(size=40)
    x0, w0 = x.copy(), w.copy()

    def twin(p, q):
        a = jnp.exp(0.3 * p)
        b = a * q + jnp.roll(a, -1)
        return jnp.sum(b * b)

    want = jax.grad(twin, argnums=(0, 1))(x0, w0)
    _check(lambda: pyjlad.grad(loops_in_sequence, wrt=(0, 1))(x, w), (x, w), want, 1e-12)


@pytest.mark.parametrize("name", list(ROW_KERNELS))
def test_row_written_from_a_temporary_array(name):
    kernel, twin = ROW_KERNELS[name]
    rng = np.random.default_rng(5)
    m, w, b = rng.uniform(1.0, 2.0, 60), rng.uniform(1.0, 2.0, (4, 4)), rng.normal(size=(60, 4))
    copies = (m.copy(), w.copy(), b.copy())
    want = jax.grad(twin, argnums=(0, 1, 2))(*copies)
    _check(lambda: pyjlad.grad(kernel, wrt=(0, 1, 2))(m, w, b), (m, w, b), want, 1e-12)


def test_a_row_of_the_wrong_shape_still_raises_the_functions_error():
    rng = np.random.default_rng(6)
    m, w, b = rng.uniform(1.0, 2.0, 30), rng.uniform(1.0, 2.0, (5, 5)), rng.normal(size=(30, 4))
    with pytest.raises(Exception) as own:  # noqa: PT011 - whatever the function itself raises
        scaled_rows(m, w, b)
    with pytest.raises(type(own.value)) as info:
        _strict(lambda: pyjlad.grad(scaled_rows, wrt=(0, 1, 2))(m, w, b))
    assert repr(info.value.__context__) == repr(own.value.__context__) and "do not match" in repr(own.value.__context__)
    good = rng.uniform(1.0, 2.0, (4, 4))  # and the next call, with rows that fit, runs in parallel
    want = jax.grad(ROW_KERNELS["scaled_rows"][1], argnums=1)(m.copy(), good.copy(), b.copy())
    np.testing.assert_allclose(_strict(lambda: pyjlad.grad(scaled_rows, wrt=1)(m, good, b)), want, rtol=1e-12)
