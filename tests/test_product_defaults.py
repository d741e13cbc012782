"""The products (``jvp``, ``vjp``, ``hvp``, ``hessian``, ``jacobian``) fill in a function's omitted defaults.

``grad`` and ``gradient`` always did (as JAX does); the products refused the call ("pass every argument,
defaults included"). Now an omitted default that is a number (float, int or bool) is passed, as a
constant; any other (``None``) is filled in by Numba in a wrapper taking the given arguments. The products
return what they return for the arguments given (``vjp``: one cotangent per given primal). Oracles: ``jax``
in float64 on twins with the defaults written in, or closed forms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)


@njit
def energy(x, scale=2.0, power=3, squared=False):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** power
    return scale * (s * s if squared else s)


def energy_jax(x, scale=2.0, power=3, squared=False):
    s = jnp.sum(x ** power)
    return scale * (s * s if squared else s)


@njit
def damped(x, rate=0.5):
    return np.exp(-rate * x) * x


def damped_jax(x, rate=0.5):
    return jnp.exp(-rate * x) * x


X = np.array([0.3, -1.2, 0.8])
T = np.array([1.0, 0.5, -2.0])


def _point():
    return X.copy(), X.copy()


def test_jvp_and_vjp_fill_in_defaults() -> None:
    x, before = _point()
    value, tangent = pyjlad.jvp(energy, (x,), (T,))
    want = jax.jvp(energy_jax, (before,), (T,))
    np.testing.assert_allclose([value, tangent], [float(want[0]), float(want[1])], rtol=1e-12)
    value, cotangents = pyjlad.vjp(damped, (x,), T)
    want_value, pullback = jax.vjp(damped_jax, before)
    assert len(cotangents) == 1  # one per given primal, none for the filled-in rate
    np.testing.assert_allclose(value, np.asarray(want_value), rtol=1e-12)
    np.testing.assert_allclose(cotangents[0], np.asarray(pullback(T)[0]), rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def test_defaults_given_in_part_and_used_by_branches() -> None:
    x, before = _point()
    _, tangent = pyjlad.jvp(energy, (x, 1.5, 2), (T, 0.25, None))
    want = jax.jvp(lambda x, s: energy_jax(x, s, 2), (before, 1.5), (T, 0.25))[1]
    np.testing.assert_allclose(tangent, float(want), rtol=1e-12)
    got = pyjlad.hessian(energy, x, 1.0, 2)  # squared=False filled in: the Hessian of sum(x**2) is 2 I
    np.testing.assert_allclose(got, 2.0 * np.eye(3), rtol=1e-12)
    got = pyjlad.hessian(energy, x, 1.0, 1, True)  # (sum x)^2: every entry 2
    np.testing.assert_allclose(got, np.full((3, 3), 2.0), rtol=1e-12)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("chunk", [1, None], ids=["column by column", "vector mode"])
def test_hessian_and_hvp_fill_in_defaults(chunk) -> None:
    x, before = _point()
    want = np.asarray(jax.hessian(energy_jax)(before))
    np.testing.assert_allclose(pyjlad.hessian(energy, x, chunk=chunk), want, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.hvp(energy, (x,), T), want @ T, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.hvp(energy, (x,), T, -1), want @ T, rtol=1e-12)  # -1: the last given
    assert pyjlad.hessian(lambda a, b=3.0: a * a * b, 2.0) == pytest.approx(6.0, rel=1e-14)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_jacobian_fills_in_defaults(mode) -> None:
    x, before = _point()
    got = pyjlad.jacobian(damped, x, mode=mode)
    np.testing.assert_allclose(got, np.asarray(jax.jacobian(damped_jax)(before)), rtol=1e-12)
    got = pyjlad.jacobian(damped, x, wrt=-1, mode=mode)  # -1: counted among the given arguments
    np.testing.assert_allclose(got, np.asarray(jax.jacobian(damped_jax)(before)), rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def test_batched_products_fill_in_defaults() -> None:
    x, before = _point()
    directions = np.stack([T, 2.0 * T])
    jac = np.asarray(jax.jacobian(damped_jax)(before))
    _, tangents = pyjlad.jvp(damped, (x,), (directions,), batched=True)
    np.testing.assert_allclose(tangents, directions @ jac.T, rtol=1e-12)
    _, (cotangents,) = pyjlad.vjp(damped, (x,), directions, batched=True)
    np.testing.assert_allclose(cotangents, directions @ jac, rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def test_tuple_arguments_with_defaults() -> None:
    @njit
    def spring(state, k=4.0):
        position, velocity = state
        return 0.5 * k * position * position + 0.5 * velocity * velocity

    _, tangent = pyjlad.jvp(spring, ((1.5, -0.5),), ((1.0, 2.0),))
    assert tangent == pytest.approx(4.0 * 1.5 * 1.0 - 0.5 * 2.0, rel=1e-14)
    _, (cotangent,) = pyjlad.vjp(spring, ((1.5, -0.5),), 1.0)
    assert cotangent == pytest.approx((6.0, -0.5), rel=1e-14)


@pytest.mark.parametrize("transform", ["hessian", "jacobian"])
def test_a_product_called_without_the_point_says_how_to_call_it(transform) -> None:
    with pytest.raises(TypeError, match=rf"write pyjlad\.{transform}\(f, x\) \(JAX's jax\.{transform}\(f\)\(x\)"):
        getattr(pyjlad, transform)(damped)
