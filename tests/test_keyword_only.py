"""Functions with keyword-only parameters (``def f(x, *, scale=1.0)``).

Numba binds a keyword-only parameter when Python calls the function, but not in ``@njit`` code, where
pyjlad's wrapper of a call with keywords calls it ("missing a required argument: 'x'", blamed on the user's
function), nor passed by position, as pyjlad's sweeps pass arguments: ``gradient(f, x, scale=3.0)`` and
``gradient(f, x)`` failed (found by a user-style probe, 2026-12-04). pyjlad now differentiates a twin of the
function whose keyword-only parameters are ordinary ones (same code, order and defaults). Oracles: by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

X = np.array([0.5, -1.0, 2.0])


@njit
def scaled(x, *, scale=1.0, power=2):
    return np.sum(x ** power) * scale


@njit
def checked(x, *, limit):
    if x[0] > limit:
        raise ValueError("over the limit", x[0])
    return np.sum(x * x)


def test_keywords_and_defaults_as_python_binds_them() -> None:
    x = X.copy()
    np.testing.assert_allclose(pyjlad.gradient(scaled, x, scale=3.0), 6.0 * X, rtol=1e-15)
    np.testing.assert_allclose(pyjlad.gradient(scaled, x), 2.0 * X, rtol=1e-15)
    np.testing.assert_allclose(pyjlad.grad(scaled)(x, power=3, scale=0.5), 1.5 * X ** 2, rtol=1e-15)
    value, gradient = pyjlad.value_and_grad(scaled)(x, scale=2.0)
    assert value == pytest.approx(2.0 * float(X @ X), rel=1e-15)
    np.testing.assert_allclose(gradient, 4.0 * X, rtol=1e-15)
    np.testing.assert_array_equal(x, X)


def test_products_fill_in_the_keyword_only_defaults() -> None:
    v = np.array([1.0, 2.0, -1.0])
    _, tangent = pyjlad.jvp(scaled, (X.copy(),), (v,))
    assert tangent == pytest.approx(2.0 * float(X @ v), rel=1e-15)
    np.testing.assert_allclose(pyjlad.hessian(scaled, X.copy()), 2.0 * np.eye(3), rtol=1e-15)
    np.testing.assert_allclose(pyjlad.hvp(scaled, (X.copy(), 3.0), v), 6.0 * v, rtol=1e-15)


def test_a_keyword_only_parameter_without_default_and_the_functions_exception() -> None:
    np.testing.assert_allclose(pyjlad.gradient(checked, X.copy(), limit=1.0), 2.0 * X, rtol=1e-15)
    with pytest.raises(ValueError, match="over the limit"):
        pyjlad.gradient(checked, X.copy(), limit=0.0)
    g = pyjlad.grad(checked)

    @njit
    def inside(x, limit):
        return g(x, limit)

    np.testing.assert_allclose(inside(X.copy(), 1.0), 2.0 * X, rtol=1e-15)
    with pytest.raises(ValueError, match="over the limit"):
        inside(X.copy(), 0.0)


def test_an_order_python_can_bind_but_pyjlad_cannot_pass_is_refused_clearly() -> None:
    @njit
    def awkward(x, a=1.0, *, b):
        return np.sum(x) * a * b

    with pytest.raises(TypeError, match=r"b has no default after parameters that have one"):
        pyjlad.gradient(awkward, X.copy(), b=2.0)
