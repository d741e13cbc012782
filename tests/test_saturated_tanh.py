"""Second derivatives of ``tanh`` where it saturates: finite, as JAX's (``pyjlad/special.py`` calls ``tanh`` on its
argument clamped to [-20, 20]).

Enzyme v0.0.289 differentiates ``tanh`` as ``1 / cosh(x)^2``, whose own derivative is ``inf / inf`` once
``cosh(x)^2`` overflows: until 2026-12-06 Hessians and Hessian-vector products were NaN from ``|x| > 355`` (``> 44``
in float32), and a saturated unit of a tanh network made a whole row of a Hessian-vector product NaN (a user-style
probe). Oracles: JAX (float64) from copies taken before each call.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)

POINTS = np.array([400.0, 0.5, -800.0, 30.0, 44.5, -45.0, 356.0, -0.3])


@njit
def summed(x):
    return np.sum(np.tanh(x) * np.arange(1.0, x.size + 1.0))


@njit
def looped(x):
    s = 0.0
    for i in range(x.size):
        s += math.tanh(x[i]) * (i + 1.0)
    return s


def summed_jax(x):
    return jnp.sum(jnp.tanh(x) * jnp.arange(1.0, x.size + 1.0))


@pytest.mark.parametrize("f", [summed, looped], ids=["np.tanh", "math.tanh"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hessian_of_a_saturated_tanh_is_jaxs(f, dtype):
    x = POINTS.astype(dtype)
    before = x.copy()
    expected = np.asarray(jax.hessian(summed_jax)(jnp.asarray(before, dtype=jnp.float64)))
    tolerance = 1e-12 if dtype == np.float64 else 1e-5
    hessian = pyjlad.hessian(f, x)
    assert np.all(np.isfinite(hessian))
    np.testing.assert_allclose(hessian, expected, rtol=tolerance, atol=tolerance)
    v = np.linspace(-1.0, 1.0, x.size).astype(dtype)
    np.testing.assert_allclose(pyjlad.hvp(f, (x,), v), expected @ v.astype(np.float64), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(pyjlad.gradient(f, x), np.asarray(jax.grad(summed_jax)(jnp.asarray(before, jnp.float64))),
                               rtol=tolerance, atol=tolerance)
    assert x.tobytes() == before.tobytes()


@njit
def tanh_network(w, X, y):
    h = np.tanh(X @ w[:3].reshape(3, 1) * w[3])
    return np.sum((h[:, 0] - y) ** 2)


def test_hessian_vector_product_of_a_network_with_a_saturated_unit():
    """The probe's shape: one hidden tanh unit whose pre-activations run from 20 to 1,100 in size."""
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((6, 3)) * 40.0, rng.standard_normal(6)
    w = np.array([0.9, -1.4, 2.2, 3.0])
    v = np.array([0.3, -0.2, 0.5, 1.0])
    copies = (w.copy(), X.copy(), y.copy())

    def network_jax(w):
        return jnp.sum((jnp.tanh(copies[1] @ w[:3] * w[3]) - copies[2]) ** 2)

    expected = jax.jvp(jax.grad(network_jax), (jnp.asarray(copies[0]),), (jnp.asarray(v),))[1]
    got = pyjlad.hvp(tanh_network, (w, X, y), v)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pyjlad.hessian(tanh_network, w, X, y), jax.hessian(network_jax)(jnp.asarray(copies[0])),
                               rtol=1e-10, atol=1e-12)
    for array, copy in zip((w, X, y), copies):
        assert array.tobytes() == copy.tobytes()


def test_the_clamp_keeps_tanh_of_negative_zero():
    """The value is the function's, -0.0 at -0.0."""
    value, tangent = pyjlad.jvp(njit(lambda x: math.tanh(x)), (-0.0,), (1.0,))
    assert math.copysign(1.0, value) == -1.0 and tangent == 1.0
