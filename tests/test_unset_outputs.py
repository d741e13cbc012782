"""Forward-mode derivatives through a matrix product of constant arrays, on a heap full of NaN.

BLAS overwrites the output of ``gemm``/``gemv`` when ``beta = 0`` (what Numba passes): the
memory of a new array may hold anything. In forward mode Enzyme gives a new array's shadow
fresh, unset memory too, and its BLAS rules scale that shadow by ``beta`` (``cblas_dlascl``,
``cblas_dscal``) instead of overwriting it: ``0 * NaN`` is NaN. So the forward-mode derivative
of ``np.linalg.solve(A.T @ A, v)`` with respect to ``v`` (``A`` constant) was NaN whenever the
C library handed out a block that last held a NaN or an infinity: seen once in CI, as a
Jacobian column of NaN. ``pyjlad/runtime/cblas.ll`` now writes the output zero before the
call when ``beta = 0``, and Enzyme zeroes the shadow alongside.

The tests make the failure certain rather than rare: before each derivative they fill the C
library's cache of small free blocks (glibc's per-thread cache: seven blocks of each size up
to 1 KiB) with NaN, so the derivative's new arrays and their shadows start as NaN. Each is
compared with JAX in float64 (from copies of the inputs), and the caller's arrays are checked
unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from corpus.heap import poison_small_free_blocks
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261201)
A43, A33, W = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 3)), RNG.standard_normal(3)
V3, V4 = RNG.standard_normal(3), RNG.standard_normal(4)


def _case(name, numba_body, jax_body, args, wrt):
    return pytest.param(numba_body, jax_body, args, wrt, id=name)


# (Numba function, JAX twin, arguments, the argument differentiated): each has a product of constants.
CASES = [
    _case("solve(A.T @ A, v)", lambda a, v: np.linalg.solve(a.T @ a, v),
          lambda a, v: jnp.linalg.solve(a.T @ a, v), (A43, V3), 1),
    _case("(A @ A.T) @ v", lambda a, v: (a @ a.T) @ v, lambda a, v: (a @ a.T) @ v, (A43, V4), 1),
    _case("sin((A @ A.T) @ v)", lambda a, v: np.sin((a @ a.T) @ v), lambda a, v: jnp.sin((a @ a.T) @ v),
          (A43, V4), 1),
    _case("(A @ w) * v", lambda a, w, v: (a @ w) * v, lambda a, w, v: (a @ w) * v, (A43, W, V4), 2),
    _case("inv(A) @ (A @ v)", lambda a, v: np.linalg.inv(a) @ (a @ a @ v),
          lambda a, v: jnp.linalg.inv(a) @ (a @ a @ v), (A33, V3), 1),
]


def _tangent_oracle(jax_body, before, wrt, tangent):
    def along(x):
        args = [jnp.asarray(a) for a in before]
        args[wrt] = x
        return jax_body(*args)
    return np.asarray(jax.jvp(along, (jnp.asarray(before[wrt]),), (jnp.asarray(tangent),))[1])


@pytest.mark.parametrize("body, jbody, args, wrt", CASES)
def test_jvp_on_a_heap_of_nan(body, jbody, args, wrt):
    before = tuple(a.copy() for a in args)
    f = njit(body)
    tangent = RNG.standard_normal(args[wrt].shape)
    tangents = tuple(tangent if i == wrt else None for i in range(len(args)))
    expected = _tangent_oracle(jbody, before, wrt, tangent)
    for _ in range(3):  # the first call builds; each call finds NaN where it allocates
        poison_small_free_blocks()
        _, got = pyjlad.jvp(f, args, tangents)
        np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-12)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("body, jbody, args, wrt", CASES[:2])
def test_forward_jacobian_on_a_heap_of_nan(body, jbody, args, wrt):
    before = tuple(a.copy() for a in args)
    f = njit(body)
    expected = np.asarray(jax.jacobian(jbody, argnums=wrt)(*map(jnp.asarray, before)))
    pyjlad.jacobian(f, *args, wrt=wrt, mode="forward")  # built
    poison_small_free_blocks()
    got = pyjlad.jacobian(f, *args, wrt=wrt, mode="forward")
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-12)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


def test_float32_jvp_on_a_heap_of_nan():
    args = (A43.astype(np.float32), V3.astype(np.float32))
    before = tuple(a.copy() for a in args)
    tangent = RNG.standard_normal(3)
    f = njit(lambda a, v: np.linalg.solve(a.T @ a, v))
    # The oracle in float64 at the float32 inputs.
    expected = _tangent_oracle(lambda a, v: jnp.linalg.solve(a.T @ a, v),
                               tuple(a.astype(np.float64) for a in before), 1, tangent)
    for _ in range(2):
        poison_small_free_blocks()
        _, got = pyjlad.jvp(f, args, (None, tangent.astype(np.float32)))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(expected))))
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
