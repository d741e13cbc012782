"""pyjlad's LAPACK loops (``pyjlad/lapack.py``) on matrices that need row interchanges, against closed forms.

The loops replace Numba's LAPACK helpers in differentiated code. Most linear-algebra tests use
diagonally dominant matrices, where partial pivoting never swaps a row; here the diagonal is
made small so that nearly every step of the LU factorization interchanges rows, at every size
from 1 to 9 (the loops' inner trip counts go to 0 at the edges of each triangle). Oracles are the
textbook derivatives evaluated with NumPy's LAPACK (float64):

* ``d sum(W * inv(A)) / dA = -inv(A)^T W inv(A)^T``
* ``x = solve(A, B)``: ``d sum(W * x) / dB = G = inv(A)^T W`` and ``/ dA = -G x^T``
* ``d det(A) / dA = det(A) inv(A)^T``, ``d log|det(A)| / dA = inv(A)^T``
* forward mode: ``d inv(A)[V] = -inv(A) V inv(A)``

and the caller's arrays are compared with copies taken before each call.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

SIZES = (1, 2, 3, 5, 8, 9)


def _pivoting_matrix(n: int, seed: int = 0) -> np.ndarray:
    """A well-conditioned matrix whose LU factorization with partial pivoting swaps rows at most steps."""
    rng = np.random.default_rng(seed + n)
    perm = rng.permutation(n)
    if n > 1 and np.all(perm == np.arange(n)):
        perm = np.roll(perm, 1)
    a = np.eye(n)[perm] * 3.0 + 0.3 * rng.normal(size=(n, n))
    np.fill_diagonal(a, 1e-3 * rng.normal(size=n))  # never the largest in its column
    assert np.linalg.cond(a) < 1e4
    return a


@njit
def weighted_inverse(a, w):
    return np.sum(w * np.linalg.inv(a))


@njit
def weighted_solution(a, b, w):
    return np.sum(w * np.linalg.solve(a, b))


@njit
def determinant(a):
    return np.linalg.det(a)


@njit
def log_abs_determinant(a):
    return np.linalg.slogdet(a)[1]


@njit
def inverse(a):
    return np.linalg.inv(a)


@njit
def inverses_in_a_loop(a, scales, w):
    """The shape of seed 003's ``remote_stats``: a small inverse per iteration of a long loop."""
    s = 0.0
    for k in range(scales.shape[0]):
        s += np.sum(w * np.linalg.inv(scales[k] * a))
    return s


def _unchanged(*pairs):
    for before, after in pairs:
        np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("n", SIZES)
def test_inverse_gradient_with_row_interchanges(n) -> None:
    a = _pivoting_matrix(n)
    w = np.random.default_rng(n).normal(size=(n, n))
    a0, w0 = a.copy(), w.copy()
    ai = np.linalg.inv(a0)
    got = pyjlad.gradient(weighted_inverse, a, w)
    np.testing.assert_allclose(got, -(ai.T @ w0 @ ai.T), rtol=1e-9, atol=1e-11)
    _unchanged((a0, a), (w0, w))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("columns", [None, 3], ids=["vector", "matrix"])
def test_solve_gradients_with_row_interchanges(n, columns) -> None:
    a = _pivoting_matrix(n, seed=1)
    rng = np.random.default_rng(10 + n)
    shape = (n,) if columns is None else (n, columns)
    b, w = rng.normal(size=shape), rng.normal(size=shape)
    a0, b0, w0 = a.copy(), b.copy(), w.copy()
    x = np.linalg.solve(a0, b0)
    g = np.linalg.solve(a0.T, w0)
    ga, gb = pyjlad.gradient(weighted_solution, a, b, w, wrt=(0, 1))
    np.testing.assert_allclose(gb, g, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(ga, -(g.reshape(n, -1) @ x.reshape(n, -1).T), rtol=1e-9, atol=1e-11)
    _unchanged((a0, a), (b0, b), (w0, w))


@pytest.mark.parametrize("n", SIZES)
def test_determinant_gradients_with_row_interchanges(n) -> None:
    a = _pivoting_matrix(n, seed=2)
    a0 = a.copy()
    ai_t = np.linalg.inv(a0).T
    np.testing.assert_allclose(pyjlad.gradient(determinant, a), np.linalg.det(a0) * ai_t, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(pyjlad.gradient(log_abs_determinant, a), ai_t, rtol=1e-9, atol=1e-11)
    _unchanged((a0, a))


@pytest.mark.parametrize("n", (2, 5, 8))
def test_inverse_forward_mode_with_row_interchanges(n) -> None:
    a = _pivoting_matrix(n, seed=3)
    v = np.random.default_rng(20 + n).normal(size=(n, n))
    a0, v0 = a.copy(), v.copy()
    ai = np.linalg.inv(a0)
    value, tangent = pyjlad.jvp(inverse, (a,), (v,))
    np.testing.assert_allclose(value, ai, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tangent, -(ai @ v0 @ ai), rtol=1e-9, atol=1e-11)
    _unchanged((a0, a), (v0, v))


def test_many_small_inverses_in_a_loop() -> None:
    n, count = 8, 300
    a = _pivoting_matrix(n, seed=4)
    scales = np.linspace(0.5, 2.0, count)
    w = np.random.default_rng(5).normal(size=(n, n))
    a0, s0, w0 = a.copy(), scales.copy(), w.copy()
    ai = np.linalg.inv(a0)
    # inv(s A) = inv(A) / s, so the gradient is the single-matrix one summed with weights 1 / s
    expected = -(ai.T @ w0 @ ai.T) * np.sum(1.0 / s0)
    np.testing.assert_allclose(pyjlad.gradient(inverses_in_a_loop, a, scales, w), expected, rtol=1e-9)
    _unchanged((a0, a), (s0, scales), (w0, w))
