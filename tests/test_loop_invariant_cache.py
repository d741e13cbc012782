"""Loops that read back what they wrote: no Enzyme cache hoisted out of them (``NO_INVARIANT_CACHE``).

Enzyme v0.0.289's loop-invariant cache took ``out[i - 1]`` of an exponential filter ``out[i] = a * x[i] + (1 - a)
* out[i - 1]`` for loop invariant and copied the whole array before the loop wrote it: the Jacobian (vector mode)
with respect to ``x`` and ``a`` together was NaN or wrong in the ``a`` part, with no error, whether the filter
writes into an argument or returns its array (found by the differential corpus, ``statistics/ema-filter``). The
class checked here against JAX in float64: a first-order filter and a second-order recurrence, returned or
written into an argument, Jacobians by vector mode (several chunk sizes) and forward mode, the caller's arrays
unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261201)


@njit
def _filter_returned(x, a):
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = a * x[i] + (1.0 - a) * out[i - 1]
    return out


@njit
def _filter_into(x, a, out):
    t = np.empty_like(x)
    t[0] = x[0]
    for i in range(1, x.shape[0]):
        t[i] = a * x[i] + (1.0 - a) * t[i - 1]
    out[:] = t


@njit
def _second_order(x, a):
    y = np.empty_like(x)
    y[0] = x[0]
    y[1] = x[1]
    for i in range(2, x.shape[0]):
        y[i] = x[i] + a * y[i - 1] - 0.25 * a * a * y[i - 2]
    return y


def _filter_jax(x, a):
    def step(prev, xi):
        new = a * xi + (1.0 - a) * prev
        return new, new

    _, rest = jax.lax.scan(step, x[0], x[1:])
    return jnp.concatenate([x[:1], rest])


def _second_order_jax(x, a):
    def step(carry, xi):
        y1, y2 = carry
        y = xi + a * y1 - 0.25 * a * a * y2
        return (y, y1), y

    _, rest = jax.lax.scan(step, (x[1], x[0]), x[2:])
    return jnp.concatenate([x[:2], rest])


def _written_into(x, a):
    out = np.zeros_like(x)
    return pyjlad.jacobian(_filter_into, x, a, out, wrt=(0, 1))


@pytest.mark.parametrize(("jacobian", "twin"), [
    (lambda x, a, **kw: pyjlad.jacobian(_filter_returned, x, a, wrt=(0, 1), **kw), _filter_jax),
    (lambda x, a, **kw: pyjlad.jacobian(_second_order, x, a, wrt=(0, 1), **kw), _second_order_jax),
])
@pytest.mark.parametrize("options", [{}, {"chunk": 1}, {"chunk": 3}, {"mode": "forward"}])
def test_recurrences_jacobian_matches_jax(jacobian, twin, options) -> None:
    x, a = RNG.standard_normal(9), 0.3
    x0 = x.copy()
    expected = jax.jacobian(twin, argnums=(0, 1))(jnp.asarray(x0), a)
    got = jacobian(x, a, **options)
    for part, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(part, np.asarray(want), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x0)


def test_filter_written_into_an_argument_matches_jax() -> None:
    x, a = RNG.standard_normal(9), 0.3
    x0 = x.copy()
    expected = jax.jacobian(_filter_jax, argnums=(0, 1))(jnp.asarray(x0), a)
    got = _written_into(x, a)
    for part, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(part, np.asarray(want), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x0)
