"""Recurrences that read back what they wrote: a known wrong answer of Enzyme v0.0.289, recorded.

An exponential filter ``out[i] = a * x[i] + (1 - a) * out[i - 1]`` or a second-order recurrence ``y[i] = x[i] + a *
y[i - 1] - a * a * y[i - 2] / 4``, written into an array: Enzyme's reverse mode takes the loads of ``y[i - 1]`` for
loop invariant and copies the whole array into its cache before the loop writes it (its loop-invariant cache
hoisting, seen in its raw output), so derivatives with respect to the coefficient read memory not yet written: NaN
or wrong, with no error (found by the differential corpus, ``statistics/ema-filter``). Forward mode is right.
Turning the hoisting off (``-enzyme-loop-invariant-cache=false``) made these right but made the gradient of the
corpus's two-layer MLP wrong (``ml/mlp-two-hidden-flat``, with pyjlad's memory scopes on), so it is not done; the
cases below are expected to fail (``xfail(strict=True)``: a case that starts agreeing fails the suite, so that the
record is updated). See README, "Limitations (today)".
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

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
def _second_order(x, a):
    y = np.empty_like(x)
    y[0] = x[0]
    y[1] = x[1]
    for i in range(2, x.shape[0]):
        y[i] = x[i] + a * y[i - 1] - 0.25 * a * a * y[i - 2]
    return y


def _second_order_jax(x, a):
    def step(carry, xi):
        y1, y2 = carry
        y = xi + a * y1 - 0.25 * a * a * y2
        return (y, y1), y

    _, rest = jax.lax.scan(step, (x[1], x[0]), x[2:])
    return jnp.concatenate([x[:2], rest])


_KNOWN_WRONG = pytest.mark.xfail(strict=True, reason="Enzyme v0.0.289 hoists the cache of loads the loop writes "
                                 "(README, Limitations): derivative with respect to the coefficient wrong")


def _assert_jacobian(got, expected) -> None:
    for part, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(part, np.asarray(want), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("f", "twin"), [(_filter_returned, _filter_jax), (_second_order, _second_order_jax)])
def test_forward_mode_jacobians_match_jax(f, twin) -> None:
    x, a = RNG.standard_normal(9), 0.3
    x0 = x.copy()
    expected = jax.jacobian(twin, argnums=(0, 1))(jnp.asarray(x0), a)
    _assert_jacobian(pyjlad.jacobian(f, x, a, wrt=(0, 1), mode="forward"), expected)
    np.testing.assert_array_equal(x, x0)


@_KNOWN_WRONG
@pytest.mark.parametrize(("f", "twin", "chunk"), [(_filter_returned, _filter_jax, None),
                                                 (_second_order, _second_order_jax, None),
                                                 (_second_order, _second_order_jax, 1)])
def test_reverse_mode_jacobians_known_wrong(f, twin, chunk) -> None:
    x, a = RNG.standard_normal(9), 0.3
    expected = jax.jacobian(twin, argnums=(0, 1))(jnp.asarray(x.copy()), a)
    _assert_jacobian(pyjlad.jacobian(f, x, a, wrt=(0, 1), chunk=chunk), expected)


@_KNOWN_WRONG
def test_filter_written_into_an_argument_known_wrong() -> None:
    x, a = RNG.standard_normal(9), 0.3
    expected = jax.jacobian(_filter_jax, argnums=(0, 1))(jnp.asarray(x.copy()), a)
    _assert_jacobian(pyjlad.jacobian(_filter_into, x, a, np.zeros_like(x), wrt=(0, 1)), expected)


@_KNOWN_WRONG
def test_gradient_through_a_second_order_recurrence_known_wrong() -> None:
    x, a = RNG.standard_normal(9), 0.3
    expected = jax.grad(lambda x_, a_: jnp.sum(_second_order_jax(x_, a_) ** 2), argnums=1)(jnp.asarray(x.copy()), a)
    got = pyjlad.grad(njit(lambda x_, a_: np.sum(_second_order(x_, a_) ** 2)), argnums=1)(x, a)
    np.testing.assert_allclose(got, float(expected), rtol=1e-12)
