"""Leaving two nested loops at once (``return`` or ``break`` from the inner one): right, or refused, never wrong.

Until 2026-12-06 reverse mode read the value at such a way out with the inner loop's count taken from the slot of a
reverse loop counter Enzyme had not set yet: ``grad`` of "the first element above a threshold" gave
``cos(x[i + 1, 0])`` for ``cos(x[i, j])``, a bilinear interpolation's gradient crashed the process, a ``vjp``
returned uninitialized memory (found by a user-style probe). :mod:`pyjlad.loop_exit_latches` now takes such ways
out at the outer loop's latch. Still wrong (strict expected failures, README's Limitations): a second array read,
or an array written, at the found indices after both loops. Oracles are hand-derived; forward mode agrees.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

X = np.arange(1, 21, dtype=float).reshape(4, 5) / 10.0  # 0.1 ... 2.0


@njit
def first_above(x, thr):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > thr:
                return np.sin(x[i, j])
    return 0.0


@njit
def first_above_by_flag(x, thr):
    found = False
    v = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > thr:
                v = x[i, j]
                found = True
                break
        if found:
            break
    return np.sin(v) if found else 0.0


@njit
def first_above_while(x, thr):
    i = 0
    while i < x.shape[0]:
        j = 0
        while j < x.shape[1]:
            if x[i, j] > thr:
                return np.sin(x[i, j])
            j += 1
        i += 1
    return 0.0


@njit
def first_above_flat(x, thr, m):
    for i in range(x.shape[0] // m):
        for j in range(m):
            if x[i * m + j] > thr:
                return np.sin(x[i * m + j])
    return 0.0


def _expected(thr: float) -> tuple[np.ndarray, np.ndarray]:
    """The gradient and Hessian diagonal of ``sin`` of the first element above ``thr`` (row-major), by hand."""
    gradient, curvature = np.zeros(X.size), np.zeros(X.size)
    above = np.flatnonzero(X.ravel() > thr)
    if above.size:
        k = above[0]
        gradient[k], curvature[k] = np.cos(X.ravel()[k]), -np.sin(X.ravel()[k])
    return gradient.reshape(X.shape), curvature.reshape(X.shape)


# the first element above: in the first row, a middle one, the last row, none
THRESHOLDS = [0.05, 0.75, 1.85, 5.0]


@pytest.mark.parametrize("thr", THRESHOLDS)
@pytest.mark.parametrize("f", [first_above, first_above_by_flag, first_above_while], ids=lambda f: f.__name__)
def test_the_gradient_and_hessian_of_a_search_that_returns_from_two_loops(f, thr) -> None:
    x = X.copy()
    gradient, curvature = _expected(thr)
    np.testing.assert_allclose(pyjlad.grad(f)(x, thr), gradient, rtol=1e-15, atol=0)
    hessian = pyjlad.hessian(f, x, thr).reshape(X.size, X.size)
    np.testing.assert_allclose(hessian, np.diag(curvature.ravel()), rtol=1e-15, atol=0)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("thr", THRESHOLDS)
def test_a_flat_array_indexed_by_two_loop_counters(thr) -> None:
    gradient, _ = _expected(thr)
    np.testing.assert_allclose(pyjlad.grad(first_above_flat)(X.ravel().copy(), thr, 5), gradient.ravel(),
                               rtol=1e-15, atol=0)


@njit
def bilinear(table, xs, ys, px, py):
    """The textbook search for the cell holding (px, py), returning the interpolant from inside it."""
    for i in range(xs.shape[0] - 1):
        if xs[i + 1] >= px:
            for j in range(ys.shape[0] - 1):
                if ys[j + 1] >= py:
                    tx = (px - xs[i]) / (xs[i + 1] - xs[i])
                    ty = (py - ys[j]) / (ys[j + 1] - ys[j])
                    return ((1 - tx) * (1 - ty) * table[i, j] + tx * (1 - ty) * table[i + 1, j]
                            + (1 - tx) * ty * table[i, j + 1] + tx * ty * table[i + 1, j + 1])
    return 0.0


def test_a_bilinear_interpolation_with_respect_to_its_table_and_its_point() -> None:
    """It crashed the process (a read past the table) until 2026-12-06."""
    xs, ys = np.linspace(0.0, 1.0, 5), np.linspace(0.0, 2.0, 6)
    table = np.random.default_rng(0).normal(size=(5, 6))
    before = table.copy()
    px, py = 0.6, 1.1
    i, j = 2, 2  # the cell: xs[2] = 0.5 <= px <= 0.75, ys[2] = 0.8 <= py <= 1.2
    tx, ty = (px - xs[i]) / (xs[i + 1] - xs[i]), (py - ys[j]) / (ys[j + 1] - ys[j])
    d_table = np.zeros_like(table)
    d_table[i, j], d_table[i + 1, j] = (1 - tx) * (1 - ty), tx * (1 - ty)
    d_table[i, j + 1], d_table[i + 1, j + 1] = (1 - tx) * ty, tx * ty
    np.testing.assert_allclose(pyjlad.grad(bilinear)(table, xs, ys, px, py), d_table, rtol=1e-14, atol=1e-15)
    t = table
    d_px = ((1 - ty) * (t[i + 1, j] - t[i, j]) + ty * (t[i + 1, j + 1] - t[i, j + 1])) / (xs[i + 1] - xs[i])
    d_py = ((1 - tx) * (t[i, j + 1] - t[i, j]) + tx * (t[i + 1, j + 1] - t[i + 1, j])) / (ys[j + 1] - ys[j])
    np.testing.assert_allclose(pyjlad.gradient(bilinear, table, xs, ys, px, py, wrt=(3, 4)), (d_px, d_py),
                               rtol=1e-13)
    np.testing.assert_array_equal(table, before)


@njit
def product_at_first_above(x, y, thr):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > thr:
                return x[i, j] * y[i, j]
    return 0.0


@njit
def row_written_at_first_above(x, w, thr):
    out = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > thr:
                out[j] = np.sin(x[i, j]) * w
                return out
    return out


@pytest.mark.xfail(strict=True, reason="known: Enzyme reads these before the reverse loop counter is set (README, "
                                       "Limitations)")
def test_a_second_array_read_at_the_found_indices_in_reverse_mode() -> None:
    """Still wrong (0.6 and 0 for 1.3 and 0.8): Enzyme computes the second read's address at the way out before the
    outer reverse loop sets its counter."""
    x, y = X.copy(), X[::-1].copy()
    dx, dy = pyjlad.gradient(product_at_first_above, x, y, 0.75, wrt=(0, 1))
    assert dx[1, 2] == pytest.approx(y[1, 2]) and dy[1, 2] == pytest.approx(x[1, 2])


@pytest.mark.xfail(strict=True, reason="known: Enzyme reads these before the reverse loop counter is set (README, "
                                       "Limitations)")
def test_a_store_at_the_found_indices_in_reverse_mode() -> None:
    """Still wrong (zeros, or uninitialized memory): the store's address, as above."""
    _, (dx, dw, _) = pyjlad.vjp(row_written_at_first_above, (X.copy(), 1.0, 0.75), np.ones(5))
    assert dx[1, 2] == pytest.approx(np.cos(0.8)) and dw == pytest.approx(np.sin(0.8))


def test_forward_mode_of_those_shapes_is_right() -> None:
    x, y = X.copy(), X[::-1].copy()
    hit = np.zeros_like(X)
    hit[1, 2] = 1.0  # the first element above 0.75: X[1, 2] = 0.8
    _, tangent = pyjlad.jvp(product_at_first_above, (x, y, 0.75), (hit, np.zeros_like(y), 0.0))
    assert tangent == pytest.approx(y[1, 2], rel=1e-15)
    jac = pyjlad.jacobian(row_written_at_first_above, x, 1.0, 0.75, mode="forward")
    expected = np.zeros((5, 4, 5))
    expected[2, 1, 2] = np.cos(0.8)
    np.testing.assert_allclose(jac, expected, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(x, X)
