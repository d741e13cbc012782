"""A function that writes into its argument and returns an array: ``jvp`` and ``vjp`` run it once on the caller's
arrays (as a plain call would, the README's documented write) and differentiate it at the point it was called at,
on private copies (pyjlad/product_args.py: passed_arrays). Found by a user-style probe (2026-12-04): README said the
caller's array was written twice. Oracle: ``jax`` in float64 on the equivalent pure function, from copies taken
before the call."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


@njit
def step_in_place(u, d, k, nsteps):
    n = u.shape[0]
    tmp = np.empty(n)
    for _ in range(nsteps):
        for i in range(1, n - 1):
            tmp[i] = u[i] + d * (u[i - 1] - 2 * u[i] + u[i + 1]) - k * u[i] ** 3
        for i in range(1, n - 1):
            u[i] = tmp[i]
    return u


def step_twin(u, d, k, nsteps):
    for _ in range(nsteps):
        u = u.at[1:-1].set(u[1:-1] + d * (u[:-2] - 2 * u[1:-1] + u[2:]) - k * u[1:-1] ** 3)
    return u


U0 = np.random.default_rng(21).standard_normal(6)
ONE_STEP = np.asarray(step_twin(jnp.asarray(U0), 0.2, 0.1, 3))


@pytest.mark.parametrize("calls", [1, 2])  # the second call reuses the compiled sweep
def test_jvp_writes_the_callers_array_once_and_differentiates_at_the_call_point(calls: int) -> None:
    t = np.linspace(-1.0, 1.0, 6)
    _, expected = jax.jvp(lambda u: step_twin(u, 0.2, 0.1, 3), (jnp.asarray(U0),), (jnp.asarray(t),))
    for _ in range(calls):
        u = U0.copy()
        value, tangent = pyjlad.jvp(step_in_place, (u, 0.2, 0.1, 3), (t.copy(), None, None, None))
        np.testing.assert_allclose(u, ONE_STEP, rtol=1e-13)
        np.testing.assert_allclose(value, ONE_STEP, rtol=1e-13)
        np.testing.assert_allclose(tangent, np.asarray(expected), rtol=1e-12)


@pytest.mark.parametrize("calls", [1, 2])
def test_vjp_writes_the_callers_array_once_and_differentiates_at_the_call_point(calls: int) -> None:
    w = np.arange(1.0, 7.0)
    _, pullback = jax.vjp(lambda u, d: step_twin(u, d, 0.1, 3), jnp.asarray(U0), 0.2)
    expected_u, expected_d = pullback(jnp.asarray(w))
    for _ in range(calls):
        u = U0.copy()
        value, (du, dd, dk, dn) = pyjlad.vjp(step_in_place, (u, 0.2, 0.1, 3), w.copy())
        np.testing.assert_allclose(u, ONE_STEP, rtol=1e-13)
        np.testing.assert_allclose(value, ONE_STEP, rtol=1e-13)
        np.testing.assert_allclose(du, np.asarray(expected_u), rtol=1e-12)
        np.testing.assert_allclose(dd, float(expected_d), rtol=1e-12)
