"""NumPy functions Numba implements by ``@overload`` (``np.prod``, ``x.prod()``, ``np.nanprod``) inside
``@njit(fastmath=True)`` functions: gradients agree with JAX in float64.

Numba compiles such an implementation once per argument types and links it into every later caller; pyjlad's copy
for Enzyme got the user's vectorized code, a product reduction in vector lanes under fast-math, whose reverse-mode
derivative Enzyme v0.0.289 got wrong (``[24, 12, 16, 9]`` for ``[24, 12, 8, 6]``, no error) until 2026-12-06 (found
by a user-style probe). The copy now compiles them with its own settings (``pyjlad.enzyme_copy``). Sizes cover the
scalar loop (< 4), the 4-lane epilogue (4 to 31) and the 32-element main vector loop of an AVX-512 host.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest

import pyjlad

jax.config.update("jax_enable_x64", True)


@numba.njit(fastmath=True)
def product(x):
    return np.prod(x)


@numba.njit(fastmath=True)
def product_method(x):
    return x.prod()


@numba.njit(fastmath=True)
def nan_product(x):
    return np.nanprod(x)


@numba.njit(fastmath=True)
def log_geometric_mean(x):
    return np.log(np.prod(x)) / x.size


@numba.njit(fastmath={"reassoc"})
def in_a_loss(x):
    return np.prod(1.0 + 0.1 * x) + np.sum(x * x)


@numba.njit(fastmath=True)
def matrix_product(m):
    return np.prod(m)


TWINS = {
    product: jnp.prod,
    product_method: jnp.prod,
    nan_product: jnp.nanprod,
    log_geometric_mean: lambda x: jnp.log(jnp.prod(x)) / x.size,
    in_a_loss: lambda x: jnp.prod(1.0 + 0.1 * x) + jnp.sum(x * x),
}


def _point(n: int) -> np.ndarray:
    return np.random.default_rng(n).uniform(0.6, 1.4, n)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 31, 33, 100])
@pytest.mark.parametrize("f", list(TWINS), ids=lambda f: f.__name__)
def test_reverse_mode_gradients_of_fast_math_products(f, n) -> None:
    x = _point(n)
    before = x.copy()
    expected = np.asarray(jax.grad(TWINS[f])(before.copy()))
    np.testing.assert_allclose(pyjlad.gradient(f, x), expected, rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def test_the_other_products_of_a_fast_math_product() -> None:
    x = _point(9)
    before = x.copy()
    v = np.linspace(-1.0, 1.0, 9)
    _, pullback = pyjlad.vjp(product, (x,), 2.0)
    np.testing.assert_allclose(pullback[0], 2.0 * np.asarray(jax.grad(jnp.prod)(before.copy())), rtol=1e-12)
    expected_hvp = np.asarray(jax.hessian(jnp.prod)(before.copy())) @ v
    np.testing.assert_allclose(pyjlad.hvp(product, (x,), v), expected_hvp, rtol=1e-11)
    m = x.reshape(3, 3)
    np.testing.assert_allclose(pyjlad.gradient(matrix_product, m),
                               np.asarray(jax.grad(jnp.prod)(before.reshape(3, 3).copy())), rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def test_the_users_own_product_is_still_compiled_as_numba_compiles_it() -> None:
    """The copy's caches are its own: a function compiled after a derivative still gets Numba's implementation."""
    x = _point(40)
    pyjlad.gradient(product, x)

    @numba.njit(fastmath=True)
    def later(y):
        return np.prod(y)

    assert later(x) == pytest.approx(np.prod(x), rel=1e-13)
    assert "x double>" in later.inspect_llvm(later.signatures[0])  # vectorized, as Numba compiles it
