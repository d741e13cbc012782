"""Indices clamped with ``min``/``max`` differentiate (pyjlad/integer_minmax.py, the ``integer-min-max`` pass).

LLVM makes ``min(max(k, 1), n - 1)`` on integers ``@llvm.smax``/``@llvm.smin``; Enzyme v0.0.289 has no rule for
them and refused the function where it could not prove the index inactive: an index read from the array
``np.searchsorted`` returns ("cannot handle (reverse) unknown intrinsic llvm.smin", reported by pyjlad as a
defect). Oracles: ``jax.grad``/``jax.jvp`` in float64 of the same programs written in JAX, from copies taken
before the call; the caller's arrays are checked unchanged. The interpolation is the corpus program
``indexing/searchsorted-clamped-interp``.
"""

from __future__ import annotations

import jax
import numpy as np
from corpus.family_indexing import clamped_interpolation, clamped_interpolation_jax
from numba import njit

import pyjlad

jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(23)
GRID = np.linspace(-3.0, 3.0, 13)
VALUES = np.cos(GRID)
POINTS = RNG.uniform(-3.5, 3.5, 9)  # some outside the grid: the clamp decides


@njit
def clamped_gather(x, idx):
    s = 0.0
    for i in range(idx.shape[0]):
        k = min(max(idx[i], 0), x.shape[0] - 1)
        s += x[k] ** 3 * (i + 1)
    return s


def _args():
    return POINTS.copy(), GRID.copy(), VALUES.copy()


def test_gradient_through_an_index_clamped_after_searchsorted():
    args = _args()
    got = pyjlad.grad(clamped_interpolation, wrt=(0, 1, 2))(*args)
    want = jax.grad(clamped_interpolation_jax, argnums=(0, 1, 2))(*map(jnp.asarray, _args()))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    for a, b in zip(args, _args()):
        np.testing.assert_array_equal(a, b)


def test_forward_mode_through_the_clamped_index():
    tangents = (np.ones(9), np.zeros(13), np.sin(GRID))
    args = _args()
    value, tangent = pyjlad.jvp(clamped_interpolation, args, tangents)
    want = jax.jvp(clamped_interpolation_jax, tuple(map(jnp.asarray, _args())), tuple(map(jnp.asarray, tangents)))
    np.testing.assert_allclose((value, tangent), want, rtol=1e-12)
    for a, b in zip(args, _args()):
        np.testing.assert_array_equal(a, b)


def test_an_integer_array_argument_clamped_into_range():
    x = RNG.normal(size=6)
    idx = np.array([-2, 0, 3, 5, 9, 2])
    x_before, idx_before = x.copy(), idx.copy()
    got = pyjlad.grad(clamped_gather)(x, idx)
    want = jax.grad(lambda x: jnp.sum(x[jnp.clip(idx_before, 0, 5)] ** 3 * jnp.arange(1, 7)))(jnp.asarray(x_before))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(idx, idx_before)
