"""Parallel derivatives of ``prange`` code with arrays held constant (issue 17, ``PYJLAD_PARALLEL_DERIVATIVES``).

Numba passes a parallel loop its arrays through an array of pointers in memory; for an array held
constant (not in ``wrt``, a ``None`` tangent, ``in_axes=None``, a temporary computed from constants)
Enzyme stored the array's own pointer as its shadow, and the derivative of the loop body accumulated
adjoints into the caller's array (reverse mode) or read the array as its own tangent (forward mode).
A loop body copying a constant array (``v.copy()``, ``v * 1.0``, a ``memcpy`` either way) read the array as
its own tangent even under Enzyme's runtime activity: ``jvp`` and Hessian-vector products were silently
wrong until forward sweeps gave such arrays zeroed shadows (:func:`pyjlad.parallel_derivatives.tangent_shadowed_abi`).
Every case: a hand-derived oracle from copies taken before the call, at 1 and 2 threads, twice in a
row (a changed input would change the second result), the caller's arrays unchanged, the parallel
derivative used (a fallback warning is an error).
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange
from test_parallel_derivatives import shared_tanh  # sum(tanh(w @ v)), its rows in parallel

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
from pyjlad.openmp import libomp_path

pytestmark = pytest.mark.skipif(libomp_path() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed")
rng = np.random.default_rng(1717)
THREADS = (1, 2)


@njit(parallel=True)
def dot(x, y):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] * y[i]
    return s


@njit(parallel=True)
def two_loops(x, y):
    s = 0.0
    for i in prange(x.shape[0]):
        s += np.cos(x[i]) * y[i]
    t = 0.0
    for i in prange(x.shape[0]):
        t += x[i] * y[i] * y[i]
    return s + t


@njit(parallel=True)
def weighted(x):
    w = np.arange(x.shape[0]) * 0.5 + 1.0  # a temporary computed from constants, read in the loop
    s = 0.0
    for i in prange(x.shape[0]):
        s += w[i] * np.sin(x[i])
    return s


@njit(parallel=True)
def copied(x, v):
    s = 0.0
    for i in prange(x.shape[0]):
        c = v.copy()  # a copy of the constant array per iteration
        s += x[i] * x[i] * c[0] * c[1]
    return s


@njit(parallel=True)
def scaled_copy(x, v):
    s = 0.0
    for i in prange(x.shape[0]):
        c = v * 1.0  # LLVM makes it a copy too
        s += np.sin(x[i]) * c[i % v.shape[0]]
    return s


@njit(parallel=True)
def matrix_copy(x, w):
    n, k = w.shape
    out = np.zeros((x.shape[0], k))
    for i in prange(x.shape[0]):
        c = x[i] * w.copy()
        out[i, :] = c[i % n, :]
    return np.sum(out ** 2)


def _run(threads: int, call):
    numba.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        return call()


def _check_twice(call, expected, arrays, rtol=1e-12):
    copies = [a.copy() for a in arrays]
    for threads in THREADS:
        for _ in range(2):
            got = _run(threads, call)
            for g, e in zip(got if isinstance(got, tuple) else (got,), expected):
                np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-13)
            for a, c in zip(arrays, copies):
                np.testing.assert_array_equal(a, c)


def _case(n=40):
    return rng.uniform(-1.0, 1.0, n), rng.uniform(-1.0, 1.0, n)


def test_reverse_mode_with_a_constant_array_argument(parallel_on) -> None:
    x, y = _case()
    x0, y0 = x.copy(), y.copy()
    _check_twice(lambda: pyjlad.gradient(dot, x, y, wrt=1), [x0], (x, y))
    _check_twice(lambda: pyjlad.gradient(dot, x, y, wrt=0), [y0], (x, y))
    _check_twice(lambda: pyjlad.gradient(two_loops, x, y, wrt=1), [np.cos(x0) + 2 * x0 * y0], (x, y))
    _check_twice(lambda: pyjlad.gradient(two_loops, x, y, wrt=0), [-np.sin(x0) * y0 + y0 * y0], (x, y))


def test_reverse_mode_with_a_constant_matrix_and_a_constant_temporary(parallel_on) -> None:
    w, v = rng.normal(size=(24, 6)), rng.normal(size=6) / 4
    w0, v0 = w.copy(), v.copy()
    sech2 = 1.0 / np.cosh(w0 @ v0) ** 2
    _check_twice(lambda: pyjlad.gradient(shared_tanh, w, v, wrt=1), [w0.T @ sech2], (w, v))
    x = rng.uniform(-1.0, 1.0, 33)
    x0 = x.copy()
    weights = np.arange(33) * 0.5 + 1.0
    _check_twice(lambda: pyjlad.gradient(weighted, x), [weights * np.cos(x0)], (x,))


def test_forward_mode_with_a_constant_array(parallel_on) -> None:
    """A ``None`` tangent holds the array constant: its tangent is zero, not the array itself."""
    x, y = _case()
    ty = rng.normal(size=x.shape[0])
    x0, y0, ty0 = x.copy(), y.copy(), ty.copy()
    _check_twice(lambda: pyjlad.jvp(dot, (x, y), (None, ty)), [np.sum(x0 * y0), np.sum(x0 * ty0)], (x, y, ty))
    _check_twice(lambda: pyjlad.jvp(two_loops, (x, y), (None, ty)),
                 [np.sum(np.cos(x0) * y0 + x0 * y0 * y0), np.sum((np.cos(x0) + 2 * x0 * y0) * ty0)], (x, y, ty))
    xt = rng.uniform(-1.0, 1.0, 33)
    t = rng.normal(size=33)
    xt0, t0 = xt.copy(), t.copy()
    weights = np.arange(33) * 0.5 + 1.0
    _check_twice(lambda: pyjlad.jvp(weighted, (xt,), (t,)),
                 [np.sum(weights * np.sin(xt0)), np.sum(weights * np.cos(xt0) * t0)], (xt, t))


def test_vmap_over_a_constant_array_and_grad_called_from_njit(parallel_on) -> None:
    x = rng.uniform(-1.0, 1.0, 8)
    ys = rng.normal(size=(3, 8))
    x0 = x.copy()
    per_sample = pyjlad.vmap(pyjlad.grad(dot, wrt=1), in_axes=(None, 0))
    _check_twice(lambda: per_sample(x, ys), [np.tile(x0, (3, 1))], (x, ys))
    dcos = pyjlad.grad(two_loops, wrt=1)

    @njit
    def caller(a, b):
        return dcos(a, b)

    a, b = _case(12)
    a0, b0 = a.copy(), b.copy()
    _check_twice(lambda: caller(a, b), [np.cos(a0) + 2 * a0 * b0], (a, b))


def test_hvp_with_a_constant_array_and_a_constant_temporary(parallel_on) -> None:
    """A Hessian-vector product's loops read private copies of what every row reads, and of its tangents: a
    constant array's tangent copy is the value's own (its shadow is the array), so it stays constant.
    d2/dx2 of cos(x) y + x y^2 is -cos(x) y; of y: 2 x; of w sin(x): -w sin(x)."""
    x, y = _case()
    t = rng.normal(size=x.shape[0])
    x0, y0, t0 = x.copy(), y.copy(), t.copy()
    _check_twice(lambda: pyjlad.hvp(two_loops, (x, y), t, wrt=0), [-np.cos(x0) * y0 * t0], (x, y, t))
    _check_twice(lambda: pyjlad.hvp(two_loops, (x, y), t, wrt=1), [2.0 * x0 * t0], (x, y, t))
    w, v = rng.normal(size=(24, 6)), rng.normal(size=6) / 4
    tv = rng.normal(size=6)
    w0, v0, tv0 = w.copy(), v.copy(), tv.copy()
    z = np.tanh(w0 @ v0)
    expected = w0.T @ (-2.0 * z * (1.0 - z ** 2) * (w0 @ tv0))  # d/dv of sum(tanh(w v)) along tv
    _check_twice(lambda: pyjlad.hvp(shared_tanh, (w, v), tv, wrt=1), [expected], (w, v, tv))
    xt = rng.uniform(-1.0, 1.0, 33)
    tt = rng.normal(size=33)
    xt0, tt0 = xt.copy(), tt.copy()
    weights = np.arange(33) * 0.5 + 1.0
    _check_twice(lambda: pyjlad.hvp(weighted, (xt,), tt), [-weights * np.sin(xt0) * tt0], (xt, tt))


def test_forward_mode_and_hvp_through_a_copy_of_a_constant_array(parallel_on) -> None:
    """d/dx of x^2 v0 v1 is 2 x v0 v1, d2/dx2 2 v0 v1; of sin(x) v[i % k]: cos(x) v[i % k], -sin(x) v[i % k];
    of sum_i x_i^2 |w[i % n]|^2: 2 x_i |w[i % n]|^2, 2 |w[i % n]|^2."""
    x, t = rng.uniform(-1.0, 1.0, 30), rng.normal(size=30)
    v, w = rng.normal(size=4), rng.normal(size=(5, 3))
    x0, t0, v0, w0 = x.copy(), t.copy(), v.copy(), w.copy()
    _check_twice(lambda: pyjlad.jvp(copied, (x, v), (t, None)),
                 [np.sum(x0 ** 2) * v0[0] * v0[1], np.sum(2 * x0 * t0) * v0[0] * v0[1]], (x, v, t))
    _check_twice(lambda: pyjlad.hvp(copied, (x, v), t, wrt=0), [2 * v0[0] * v0[1] * t0], (x, v, t))
    vi = v0[np.arange(30) % 4]
    _check_twice(lambda: pyjlad.jvp(scaled_copy, (x, v), (t, None)),
                 [np.sum(np.sin(x0) * vi), np.sum(np.cos(x0) * vi * t0)], (x, v, t))
    _check_twice(lambda: pyjlad.hvp(scaled_copy, (x, v), t, wrt=0), [-np.sin(x0) * vi * t0], (x, v, t))
    rows = np.sum(w0[np.arange(30) % 5] ** 2, axis=1)
    _check_twice(lambda: pyjlad.jvp(matrix_copy, (x, w), (t, None)),
                 [np.sum(x0 ** 2 * rows), np.sum(2 * x0 * rows * t0)], (x, w, t))
    _check_twice(lambda: pyjlad.hvp(matrix_copy, (x, w), t, wrt=0), [2 * rows * t0], (x, w, t))
