"""A derivative called with a scalar of another type than before is compiled for that type, not converted.

A sweep's caller is an ``@njit`` function whose compiling pyjlad disables (it compiles it itself, after the
Enzyme build). Numba's dispatcher then converts an argument to a type compiled before where it can: called
first with ``a=2`` and then with ``a=2.5``, the gradient was ``2 * x * 2`` (2.5 truncated to 2; 0.5 to 0),
``np.float32`` then a Python float computed in float32, ``np.uint64`` then ``-3`` raised ``OverflowError``,
``np.int8`` then ``300`` used 44; every transform, no error (found by a user-style probe, 2026-12-04). Oracles:
hand-derived derivatives of ``a * sum(x * x)`` and ``n * sum(x)``, the function itself for values.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

X = np.array([0.5, -1.0, 2.0])


def _scaled_squares():
    @njit
    def f(x, a):
        return np.sum(x * x) * a
    return f


PAIRS = [(2, 2.5), (True, 0.5), (2.5, 3), (np.int8(3), 300), (np.int32(3), 2 ** 40), (np.uint64(3), -3),
         (np.float32(1.5), 0.123456789012345), (3, np.float32(0.25)), (1.5, np.float64(0.75))]
IDS = [f"{type(a).__name__} then {type(b).__name__}" for a, b in PAIRS]


@pytest.mark.parametrize("first, then", PAIRS, ids=IDS)
def test_gradient_and_value_follow_the_constant_as_passed(first, then) -> None:
    f = _scaled_squares()
    for a in (first, then, first):  # and back: each type keeps its own derivative
        x = X.copy()
        value, gradient = pyjlad.value_and_gradient(f, x, a)
        want = float(a) * X
        np.testing.assert_allclose(pyjlad.gradient(f, x, a), 2.0 * want, rtol=1e-15)
        np.testing.assert_allclose(gradient, 2.0 * want, rtol=1e-15)
        assert value == f(X.copy(), a)
        np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("first, then", PAIRS[:3], ids=IDS[:3])
def test_every_transform_follows_the_constant(first, then) -> None:
    f = _scaled_squares()
    v = np.array([1.0, 0.5, -2.0])
    for a in (first, then):
        scale = float(a)
        np.testing.assert_allclose(pyjlad.grad(f)(X.copy(), a), 2.0 * scale * X, rtol=1e-15)
        _, tangent = pyjlad.jvp(f, (X.copy(), a), (v, None))
        assert tangent == pytest.approx(2.0 * scale * X @ v, rel=1e-15)
        _, (cotangent, of_a) = pyjlad.vjp(f, (X.copy(), a), 1.0)
        np.testing.assert_allclose(cotangent, 2.0 * scale * X, rtol=1e-15)
        if isinstance(a, float):
            assert of_a == pytest.approx(float(X @ X), rel=1e-15)
        else:  # an int or bool: a constant
            assert of_a is None
        np.testing.assert_allclose(pyjlad.hvp(f, (X.copy(), a), v), 2.0 * scale * v, rtol=1e-15)
        np.testing.assert_allclose(pyjlad.hessian(f, X.copy(), a), 2.0 * scale * np.eye(3), rtol=1e-15)


def test_the_differentiated_scalar_keeps_its_precision() -> None:
    @njit
    def g(t, a):
        return np.sin(t) * a

    for t in (np.float32(0.7), 0.123456789012345, np.float32(0.25)):
        got = pyjlad.gradient(g, t, 1.0)
        assert got == pytest.approx(float(np.cos(t)), rel=1e-6 if isinstance(t, np.float32) else 1e-15)
