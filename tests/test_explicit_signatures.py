"""Functions compiled with explicit signatures (``@njit("float64(float64[:])")``) differentiate.

Numba compiles such a function for its signatures only and raises ``RuntimeError("compilation
disabled")`` when asked to compile it for the exact types of a call (``array(float64, 1d, C)`` for a
signature's ``float64[:]``, layout ``A``); pyjlad let that error through, so every transform of such a
function failed. Now the signature Numba would dispatch the call to is differentiated. Oracles: hand-derived
derivatives, from copies taken before the call.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad


@njit("float64(float64[:])")
def fourth_powers(x):
    return np.sum(x ** 4)


@njit(["float64(float64[::1], float64)", "float64(float64[:, :], float64)"])
def scaled_squares(x, a):
    return a * np.sum(x * x)


@njit("float64[:](float64[:], float64)")
def scaled_cubes(x, a):
    return a * x ** 3


X = np.array([0.5, -1.25, 2.0, 0.75])


def test_grad_of_a_function_with_one_explicit_signature():
    for x in (X.copy(), X[::-1], np.asfortranarray(X)):
        before = x.copy()
        np.testing.assert_allclose(pyjlad.grad(fourth_powers)(x), 4 * before ** 3, rtol=1e-14)
        np.testing.assert_array_equal(x, before)


def test_each_of_several_signatures_is_differentiated():
    x = X.copy()
    gx, ga = pyjlad.grad(scaled_squares, wrt=(0, 1))(x, 1.5)
    np.testing.assert_allclose(gx, 3.0 * X, rtol=1e-14)
    assert ga == pytest.approx(np.sum(X * X), rel=1e-14)
    np.testing.assert_array_equal(x, X)
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(pyjlad.grad(scaled_squares)(m, 0.5), np.arange(6.0).reshape(2, 3), rtol=1e-14)
    np.testing.assert_array_equal(m, np.arange(6.0).reshape(2, 3))


def test_forward_mode_and_jacobian_of_an_explicit_signature():
    x, ones = X.copy(), np.ones(4)
    value, tangent = pyjlad.jvp(fourth_powers, (x,), (ones,))
    assert value == pytest.approx(np.sum(X ** 4), rel=1e-14)
    assert tangent == pytest.approx(np.sum(4 * X ** 3), rel=1e-14)
    for mode in ("reverse", "forward"):
        np.testing.assert_allclose(pyjlad.jacobian(scaled_cubes, x, 2.0, mode=mode),
                                   np.diag(6.0 * X ** 2), rtol=1e-14)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(ones, np.ones(4))


def test_types_no_signature_takes_are_refused_clearly():
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="compilation is disabled; its signatures are"):
        pyjlad.grad(fourth_powers)(np.ones((2, 2)))
