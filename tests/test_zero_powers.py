"""``x ** p`` computed by ``pow`` at ``x == 0``: derivatives agree with JAX in float64, and are 0, not NaN, where
``p == 0``.

Enzyme differentiates ``pow(x, p)`` as ``p * pow(x, p - 1)``: ``0 * inf`` at ``x = p = 0``. The polynomial
features ``np.power(x, np.arange(k))`` of a sample at 0 made the whole gradient NaN until 2026-12-06 (found by a
user-style probe); ``pyjlad.zero_powers`` takes the derivative at the base 1 there. The oracle of those is JAX on
the same integer exponents (Numba's ``np.arange`` is integer; it computes the power by ``pow`` of their float
values). For a float exponent JAX's own rule gives NaN at ``(0, 0)``; the derivative of the constant ``x ** 0 ==
1`` is 0 there, by hand.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest

import pyjlad

jax.config.update("jax_enable_x64", True)


@numba.njit
def polynomial(x, c):
    return np.sum(c * np.power(x, np.arange(c.size)))


@numba.njit
def power(x, p):
    return x ** p


@numba.njit
def math_power(x, p):
    return math.pow(x, p) + 2.0 * x


@numba.njit
def per_sample_features(xs, c):
    total = 0.0
    for i in range(xs.shape[0]):
        total += np.sum(c * np.power(xs[i], np.arange(c.size))) ** 2
    return total


def _jax_per_sample(xs, c):
    k = jnp.arange(c.size)
    return jnp.sum(jnp.sum(c * jnp.power(xs[:, None], k), axis=1) ** 2)


@pytest.mark.parametrize("x", [0.0, 0.5, -1.5])
def test_polynomial_features_at_and_away_from_zero(x) -> None:
    c = np.array([1.0, 2.0, 3.0, -0.5])
    before = c.copy()
    expected = jax.grad(lambda x, c: jnp.sum(c * jnp.power(x, jnp.arange(4))), argnums=(0, 1))(x, before.copy())
    dx, dc = pyjlad.gradient(polynomial, x, c, wrt=(0, 1))
    assert dx == pytest.approx(float(expected[0]), rel=1e-14, abs=0)
    np.testing.assert_allclose(dc, np.asarray(expected[1]), rtol=1e-14)
    np.testing.assert_array_equal(c, before)


@pytest.mark.parametrize(("x", "p"), [(0.0, 0.0), (0.0, 1.0), (0.0, 2.0), (0.0, 2.5), (3.0, 0.0), (0.5, 1.5)])
def test_a_power_with_respect_to_base_and_exponent(x, p) -> None:
    # at (0, 0), by hand (JAX's float rule gives NaN for d/dx): x ** 0 is 1 everywhere; d/dp = 0 ** 0 * log(0)
    # taken as 0, as JAX takes it
    expected = (0.0, 0.0) if x == p == 0.0 else jax.grad(lambda x, p: x ** p, argnums=(0, 1))(x, p)
    got = pyjlad.gradient(power, x, p, wrt=(0, 1))
    np.testing.assert_allclose(got, [float(e) for e in expected], rtol=1e-14, atol=0)
    _, tangent = pyjlad.jvp(power, (x, p), (1.0, 0.0))
    assert tangent == pytest.approx(float(expected[0]), rel=1e-14, abs=0)


def test_math_pow_and_single_precision_at_zero() -> None:
    assert pyjlad.gradient(math_power, 0.0, 0.0) == pytest.approx(2.0, rel=1e-15)
    g = pyjlad.gradient(power, np.float32(0.0), np.float32(0.0), wrt=(0, 1))
    assert np.isfinite(g).all() and np.allclose(g, 0.0)


def test_a_batch_with_one_sample_at_zero_its_gradient_and_hessian() -> None:
    xs, c = np.array([0.0, 1.0, -0.5]), np.array([1.0, 2.0, 3.0])
    before = xs.copy()
    np.testing.assert_allclose(pyjlad.gradient(per_sample_features, xs, c),
                               np.asarray(jax.grad(_jax_per_sample)(before.copy(), c.copy())), rtol=1e-14)
    np.testing.assert_allclose(pyjlad.hessian(per_sample_features, xs, c),
                               np.asarray(jax.hessian(_jax_per_sample)(before.copy(), c.copy())), rtol=1e-13)
    np.testing.assert_array_equal(xs, before)
