"""Property tests: random inputs, gradients against hand-derived formulas."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from numba import njit

import pyjlad

finite = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)


@njit
def mixed_terms(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] ** 3 + math.sin(c * x[i]) + math.exp(-x[i] * x[i])
    return s


@settings(max_examples=40, deadline=None)
@given(x=arrays(np.float64, st.integers(1, 40), elements=finite), c=finite)
def test_mixed_terms(x: np.ndarray, c: float) -> None:
    gx, gc = pyjlad.gradient(mixed_terms, x, c, wrt=(0, 1))
    np.testing.assert_allclose(
        gx, 3 * c * x ** 2 + c * np.cos(c * x) - 2 * x * np.exp(-x * x), rtol=1e-12, atol=1e-12
    )
    assert math.isclose(gc, float(np.sum(x ** 3 + x * np.cos(c * x))), rel_tol=1e-12, abs_tol=1e-12)


@njit
def soft_abs_2d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += math.sqrt(a[i, j] * a[i, j] + 0.01) * (i - j)
    return s


@settings(max_examples=30, deadline=None)
@given(a=arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=finite),
       transpose=st.booleans())
def test_soft_abs_2d_any_layout(a: np.ndarray, transpose: bool) -> None:
    a = a.T if transpose else a
    g = pyjlad.gradient(soft_abs_2d, a)
    i = np.arange(a.shape[0])[:, None]
    j = np.arange(a.shape[1])[None, :]
    np.testing.assert_allclose(g, a / np.sqrt(a * a + 0.01) * (i - j), rtol=1e-12, atol=1e-12)
