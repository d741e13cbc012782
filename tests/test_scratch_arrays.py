"""A float array that is not differentiated but that the function writes (a scratch buffer filled from
differentiated values and read back) carries derivatives all the same.

Enzyme assumes a constant argument's memory holds no derivative; given such a buffer as constant it
dropped the path through it: `grad` returned tanh(2x) instead of tanh(2x) + 2x(1 - tanh^2(2x)),
forward mode the same, and `hessian` zeros. Every sweep kind now gives a written constant float array
a zeroed shadow of its own (`ArrayArg.shadowed_when_constant`). Oracles: JAX in float64 on the same
computation without the buffer, from copies taken before the call.
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
def through_scratch(x, s):
    for i in range(x.size):
        s[i] = 2.0 * x[i]
    return np.sum(np.tanh(s) * x)


@njit
def fill(s, x):
    for i in range(x.size):
        s[i] = np.sin(x[i])


@njit
def through_callee_scratch(x, s):
    fill(s, x)
    total = 0.0
    for i in range(x.size):
        total += s[i] * s[i] * x[i]
    return total


@njit
def through_2d_scratch(x, s):
    n = x.size
    for i in range(n):
        for j in range(n):
            s[i, j] = x[i] * x[j]
    return np.sum(np.exp(-s)) + x[0]


def jax_scratch(x):
    return jnp.sum(jnp.tanh(2.0 * x) * x)


def jax_callee(x):
    return jnp.sum(jnp.sin(x) ** 2 * x)


def jax_2d(x):
    return jnp.sum(jnp.exp(-jnp.outer(x, x))) + x[0]


CASES = [
    pytest.param(through_scratch, jax_scratch, lambda n: np.full(n, 7.0), id="scratch"),
    pytest.param(through_callee_scratch, jax_callee, lambda n: np.zeros(n), id="scratch-written-by-a-callee"),
    pytest.param(through_2d_scratch, jax_2d, lambda n: np.ones((n, n)), id="2-d-scratch"),
]


def _x(n: int = 5) -> np.ndarray:
    return np.linspace(0.1, 0.9, n)


@pytest.mark.parametrize(("f", "oracle", "scratch"), CASES)
def test_gradient_and_value_and_grad(f, oracle, scratch) -> None:
    x = _x()
    x0 = x.copy()
    want = np.asarray(jax.grad(oracle)(jnp.asarray(x0)))
    np.testing.assert_allclose(pyjlad.grad(f)(x, scratch(x.size)), want, rtol=1e-13, atol=1e-15)
    value, g = pyjlad.value_and_grad(f)(x, scratch(x.size))
    np.testing.assert_allclose(value, float(oracle(jnp.asarray(x0))), rtol=1e-13)
    np.testing.assert_allclose(g, want, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize(("f", "oracle", "scratch"), CASES)
def test_forward_mode(f, oracle, scratch) -> None:
    x, v = _x(), np.cos(np.arange(5.0))
    x0 = x.copy()
    _, want = jax.jvp(oracle, (jnp.asarray(x0),), (jnp.asarray(v),))
    _, tangent = pyjlad.jvp(f, (x, scratch(x.size)), (v, None))
    np.testing.assert_allclose(tangent, float(want), rtol=1e-13)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("chunk", [1, 4, None])
@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize(("f", "oracle", "scratch"), CASES)
def test_jacobian(f, oracle, scratch, mode, chunk) -> None:
    x = _x()
    x0 = x.copy()
    want = np.asarray(jax.grad(oracle)(jnp.asarray(x0)))
    kwargs = {} if chunk is None else {"chunk": chunk}
    jac = pyjlad.jacobian(f, x, scratch(x.size), mode=mode, **kwargs)
    np.testing.assert_allclose(jac, want, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("chunk", [1, None])
@pytest.mark.parametrize(("f", "oracle", "scratch"), CASES)
def test_hessian_and_hvp(f, oracle, scratch, chunk) -> None:
    x = _x()
    x0 = x.copy()
    want = np.asarray(jax.hessian(oracle)(jnp.asarray(x0)))
    kwargs = {} if chunk is None else {"chunk": chunk}
    np.testing.assert_allclose(pyjlad.hessian(f, x, scratch(x.size), **kwargs), want, rtol=1e-12, atol=1e-14)
    v = np.linspace(-1.0, 1.0, x.size)
    np.testing.assert_allclose(pyjlad.hvp(f, (x, scratch(x.size)), v), want @ v, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x0)


def test_gradient_called_from_njit_code() -> None:
    df = pyjlad.grad(through_scratch)

    @njit
    def caller(x, s):
        return df(x, s)

    x = _x()
    want = np.asarray(jax.grad(jax_scratch)(jnp.asarray(x.copy())))
    np.testing.assert_allclose(caller(x, np.zeros(x.size)), want, rtol=1e-13, atol=1e-15)
