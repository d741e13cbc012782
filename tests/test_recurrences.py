"""Recurrences that read back what the loop wrote: reverse-mode derivatives against JAX.

An exponential filter ``out[i] = a * x[i] + (1 - a) * out[i - 1]`` or a second-order recurrence ``y[i] = x[i] + a *
y[i - 1] - a * a * y[i - 2] / 4``, written into an array. Enzyme v0.0.289's loop-invariant cache took the load of
``y[i - 1]`` for one no store of the loop overwrites (its check looks at one iteration) and copied the whole array
before the loop wrote it, so derivatives with respect to the coefficient read memory not yet written: NaN, or wrong
with no error (found by the differential corpus, ``statistics/ema-filter``). pyjlad turns that cache off
(``pyjlad.engines.differentiate.NO_HOISTED_CACHES``); every case below was wrong before (the reverse-mode ones; the
forward-mode one checks the oracle itself).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from corpus.family_statistics import ar2_filter as _second_order  # noqa: E402
from corpus.family_statistics import ar2_filter_jax as _second_order_jax  # noqa: E402
from corpus.family_statistics import ema_filter as _filter_returned  # noqa: E402 (the corpus's)
from corpus.family_statistics import ema_filter_jax as _filter_jax  # noqa: E402

RNG = np.random.default_rng(20261201)


@njit
def _filter_into(x, a, out):
    t = np.empty_like(x)
    t[0] = x[0]
    for i in range(1, x.shape[0]):
        t[i] = a * x[i] + (1.0 - a) * t[i - 1]
    out[:] = t


@njit
def _backward(x, a):
    # the recurrence run from the end: y[i] reads y[i + 1]
    y = np.empty_like(x)
    n = x.shape[0]
    y[n - 1] = x[n - 1]
    for i in range(n - 2, -1, -1):
        y[i] = x[i] + a * y[i + 1]
    return y


def _backward_jax(x, a):
    def step(prev, xi):
        new = xi + a * prev
        return new, new

    _, rest = jax.lax.scan(step, x[-1], x[:-1][::-1])
    return jnp.concatenate([rest[::-1], x[-1:]])


@njit
def _in_place_copy(x, a):
    # a copy updated in place: z[i] reads the z[i - 1] this loop wrote
    z = x.copy()
    for i in range(1, z.shape[0]):
        z[i] += a * z[i - 1]
    return z


def _in_place_copy_jax(x, a):
    def step(prev, xi):
        new = xi + a * prev
        return new, new

    _, rest = jax.lax.scan(step, x[0], x[1:])
    return jnp.concatenate([x[:1], rest])


@njit
def _rows(x, a):
    # a 2-D recurrence: each row from the previous one, an inner loop over columns
    y = np.empty_like(x)
    y[0, :] = x[0, :]
    for i in range(1, x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = x[i, j] + a * np.tanh(y[i - 1, j])
    return y


def _rows_jax(x, a):
    def step(prev, xi):
        new = xi + a * jnp.tanh(prev)
        return new, new

    _, rest = jax.lax.scan(step, x[0], x[1:])
    return jnp.concatenate([x[:1], rest])


CASES = [
    pytest.param(_filter_returned, _filter_jax, (9,), id="filter"),
    pytest.param(_second_order, _second_order_jax, (9,), id="second-order"),
    pytest.param(_backward, _backward_jax, (7,), id="backward"),
    pytest.param(_in_place_copy, _in_place_copy_jax, (8,), id="in-place-copy"),
    pytest.param(_rows, _rows_jax, (5, 3), id="rows"),
]


def _assert_jacobian(got, expected) -> None:
    for part, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(part, np.asarray(want), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("f", "twin", "shape"), CASES)
@pytest.mark.parametrize("chunk", [None, 1], ids=["vector", "one-per-sweep"])
def test_reverse_mode_jacobians_match_jax(f, twin, shape, chunk) -> None:
    x, a = RNG.standard_normal(shape), 0.3
    x0 = x.copy()
    expected = jax.jacobian(twin, argnums=(0, 1))(jnp.asarray(x0), a)
    _assert_jacobian(pyjlad.jacobian(f, x, a, wrt=(0, 1), chunk=chunk), expected)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize(("f", "twin", "shape"), CASES[:2])
def test_forward_mode_jacobians_match_jax(f, twin, shape) -> None:
    x, a = RNG.standard_normal(shape), 0.3
    x0 = x.copy()
    expected = jax.jacobian(twin, argnums=(0, 1))(jnp.asarray(x0), a)
    _assert_jacobian(pyjlad.jacobian(f, x, a, wrt=(0, 1), mode="forward"), expected)
    np.testing.assert_array_equal(x, x0)


def test_filter_written_into_an_argument() -> None:
    x, a = RNG.standard_normal(9), 0.3
    x0 = x.copy()
    expected = jax.jacobian(_filter_jax, argnums=(0, 1))(jnp.asarray(x0), a)
    _assert_jacobian(pyjlad.jacobian(_filter_into, x, a, np.zeros_like(x), wrt=(0, 1)), expected)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize(("f", "twin", "shape"), CASES)
def test_gradient_of_a_loss_through_the_recurrence(f, twin, shape) -> None:
    x, a = RNG.standard_normal(shape), 0.3
    loss = njit(lambda x_, a_: np.sum(f(x_, a_) ** 2))
    x0 = x.copy()
    expected = jax.grad(lambda x_, a_: jnp.sum(twin(x_, a_) ** 2), argnums=(0, 1))(jnp.asarray(x0), a)
    got = pyjlad.grad(loss, argnums=(0, 1))(x, a)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_allclose(got[0], np.asarray(expected[0]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[1], float(expected[1]), rtol=1e-12)
