"""Gradients of piecewise-linear interpolation against ``jax.grad`` (float64): README, "Limitations".

``np.interp`` agrees with ``jnp.interp`` between the points ``xp`` and with respect to ``fp`` everywhere; at an
``x`` exactly on a point, Numba's implementation returns ``fp[j]`` from a branch whose derivative in ``x`` is 0
(JAX: a one-sided slope). The interpolation written out with ``np.searchsorted`` and ``np.clip``, the form
README suggests for such ``x``, agrees with JAX there too: ``tests/test_index_arrays.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyjlad
from tests.test_index_arrays import assert_gradient_agrees

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

XP = np.array([-2.0, -0.5, 0.0, 0.7, 1.5, 3.0])
FP = np.array([4.0, 0.25, 0.0, 0.49, 2.25, 9.0])


def _library(x, fp):
    return np.sum(np.interp(x, XP, fp) * x)


def _library_jax(x, fp):
    return jnp.sum(jnp.interp(x, jnp.asarray(XP), fp) * x)


def test_np_interp_between_points_agrees_with_jax() -> None:
    assert_gradient_agrees(_library, _library_jax, np.array([-1.3, 0.3, 2.9, -0.1]), FP.copy())


def test_np_interp_on_a_point_has_a_zero_slope_in_x_and_agrees_in_fp() -> None:
    x, fp = np.array([-0.5, 0.3, 0.7]), FP.copy()
    before = (x.copy(), fp.copy())
    gx, gfp = pyjlad.grad(_library, argnums=(0, 1))(x, fp)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(fp, before[1])
    wx, wfp = jax.grad(_library_jax, argnums=(0, 1))(*map(jnp.asarray, before))
    np.testing.assert_allclose(gfp, np.asarray(wfp), rtol=1e-12, atol=1e-14)
    # d/dx [interp(x) * x] = interp'(x) * x + interp(x); Numba's branch on a point makes interp'(x) = 0 there.
    np.testing.assert_allclose(gx[[0, 2]], FP[[1, 3]], rtol=1e-12)
    np.testing.assert_allclose(gx[1], np.asarray(wx)[1], rtol=1e-12)
    assert abs(gx[0] - float(wx[0])) > 0.2  # JAX's slope to the right: -0.5 * -0.5 + 0.25
