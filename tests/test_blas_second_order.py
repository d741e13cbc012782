"""Hessians through matrix products of constant arrays: the products retried as loops.

pyjlad's Hessian-vector product is reverse over forward: Enzyme differentiates, in reverse mode,
the forward-mode derivative it built. Its forward-mode rule for a matrix product whose result
carries a tangent scales that tangent with ``cblas_dlascl``, an external function its reverse mode
has no derivative for, so the Hessian of ``v @ (A @ A.T) @ v`` or ``sum(solve(A.T @ A, v) ** 2)``
with respect to ``v`` was refused with Enzyme's own words ("No augmented forward pass found for
cblas_dlascl"). :func:`pyjlad.engines.differentiate.run_enzyme` now retries such a module with
Numba's BLAS helpers as the loops of ``pyjlad/runtime/blas_loops.ll``, which Enzyme
differentiates twice like any loop; a module Enzyme's BLAS rules serve (``v @ (S @ v)``) keeps
them.

Every Hessian and Hessian-vector product is compared with JAX in float64 (computed from copies
of the inputs), and the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261202)
A43, S44 = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 4))
V3, V4 = RNG.standard_normal(3), RNG.standard_normal(4)


def _case(name, numba_body, jax_body, args):
    return pytest.param(numba_body, jax_body, args, id=name)


# (Numba function, JAX twin, arguments): scalar functions of (a constant matrix, the vector v).
CASES = [
    _case("v @ (A @ A.T) @ v", lambda a, v: v @ ((a @ a.T) @ v), lambda a, v: v @ ((a @ a.T) @ v), (A43, V4)),
    _case("sum(((A @ A.T) @ v) ** 2)", lambda a, v: np.sum(((a @ a.T) @ v) ** 2),
          lambda a, v: jnp.sum(((a @ a.T) @ v) ** 2), (A43, V4)),
    _case("sum(solve(A.T @ A, v) ** 2)", lambda a, v: np.sum(np.linalg.solve(a.T @ a, v) ** 2),
          lambda a, v: jnp.sum(jnp.linalg.solve(a.T @ a, v) ** 2), (A43, V3)),
    _case("sum(sin(A.T @ A @ v))", lambda a, v: np.sum(np.sin(a.T @ a @ v)),
          lambda a, v: jnp.sum(jnp.sin(a.T @ a @ v)), (A43, V3)),
    # BLAS rules suffice here (no product of constants): no retry, the same answer.
    _case("v @ (S @ v)", lambda s, v: v @ (s @ v), lambda s, v: v @ (s @ v), (S44, V4)),
]


@pytest.mark.parametrize("body, jbody, args", CASES)
def test_hvp_and_hessian_against_jax(body, jbody, args):
    before = tuple(a.copy() for a in args)
    f = njit(body)
    direction = RNG.standard_normal(args[1].shape)
    hessian = np.asarray(jax.hessian(lambda v: jbody(jnp.asarray(before[0]), v))(jnp.asarray(before[1])))
    np.testing.assert_allclose(pyjlad.hvp(f, args, direction, wrt=1), hessian @ direction, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(pyjlad.hessian(f, *args, wrt=1), hessian, rtol=1e-10, atol=1e-11)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


def test_float32_hvp_through_a_product_of_constants():
    args = (A43.astype(np.float32), V4.astype(np.float32))
    before = tuple(a.copy() for a in args)
    direction = RNG.standard_normal(4)
    f = njit(lambda a, v: v @ ((a @ a.T) @ v))
    # The oracle in float64 at the float32 inputs.
    a64 = jnp.asarray(before[0], dtype=jnp.float64)
    expected = np.asarray(jax.hessian(lambda v: v @ ((a64 @ a64.T) @ v))(jnp.asarray(before[1], dtype=jnp.float64))
                          ) @ direction
    got = pyjlad.hvp(f, args, direction.astype(np.float32), wrt=1)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(expected))))
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
