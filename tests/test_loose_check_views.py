"""Loose-typed derivatives of functions given strided views are judged at points with the views' strides.

Before: the gradient of ``np.sum(np.sort(x) * np.arange(n))`` at ``x = base[::2]`` was refused ("cannot be
trusted") though it was right, and so was every derivative Enzyme builds only with loose types (functions that
sort) at a strided, reversed or column view. The check (pyjlad/engines/loose_check.py) runs the derivative
once more at a point near the call's, in the call's own shadows, which the derivative addresses with the
strides of the arguments it was first called with; that point was made of compact copies, so the shadows
were read at the wrong places and the rerun's derivative came out wrong (a user-style probe, 2026-12-07).

Oracles: ``jax`` in float64 on the same programs (``jnp.sort``), from copies taken before the calls; every
caller array (and the array a view is of) is checked unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


@njit
def rank_weighted_squares(x):
    y = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = x[i]
    y.sort()
    return np.sum(y * y * np.arange(x.shape[0]))


def rank_weighted_squares_jax(x):
    return jnp.sum(jnp.sort(x) ** 2 * jnp.arange(x.shape[0]))


@njit
def sorted_times_ranks(x):
    return np.sum(np.sort(x) * np.arange(x.shape[0]))


def sorted_times_ranks_jax(x):
    return jnp.sum(jnp.sort(x) * jnp.arange(x.shape[0]))


def _views():
    """name -> (base array, the view of it the function is given): strided, reversed, a column."""
    base = np.random.default_rng(7).permutation(np.linspace(-2.0, 3.0, 24)) + 0.01 * np.arange(24)
    return {
        "every_second": (base, base[::2]),
        "reversed_every_third": (base, base[::-3]),
        "column": (base.reshape(8, 3), base.reshape(8, 3)[:, 1]),
    }


def _called(view_name: str, call):
    """``call(view)``'s result, with the view and its base checked unchanged after it."""
    base, view = _views()[view_name]
    base_before = base.copy()
    assert not view.flags.c_contiguous
    result = call(view)
    np.testing.assert_array_equal(base, base_before)
    return result


@pytest.mark.parametrize("view", list(_views()))
@pytest.mark.parametrize(("f", "twin"), [(sorted_times_ranks, sorted_times_ranks_jax),
                                         (rank_weighted_squares, rank_weighted_squares_jax)],
                         ids=["np_sort", "sorted_in_place"])
def test_gradient_at_a_view_matches_jax(f, twin, view: str) -> None:
    x = np.array(_views()[view][1])
    expected = np.asarray(jax.grad(twin)(jnp.asarray(x)))
    got = _called(view, pyjlad.grad(f))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("view", ["every_second", "column"])
def test_tangent_at_a_view_matches_jax(view: str) -> None:
    x = np.array(_views()[view][1])
    t = np.linspace(-1.0, 1.0, x.shape[0])
    value, tangent = jax.jvp(rank_weighted_squares_jax, (jnp.asarray(x),), (jnp.asarray(t),))
    t_before = t.copy()
    got = _called(view, lambda v: pyjlad.jvp(rank_weighted_squares, (v,), (t,)))
    np.testing.assert_allclose(got, (float(value), float(tangent)), rtol=1e-12)
    np.testing.assert_array_equal(t, t_before)


@pytest.mark.parametrize("view", ["every_second", "reversed_every_third"])
def test_hessian_vector_product_at_a_view_matches_jax(view: str) -> None:
    x = np.array(_views()[view][1])
    v = np.cos(np.arange(x.shape[0]))
    expected = np.asarray(jax.jvp(jax.grad(rank_weighted_squares_jax), (jnp.asarray(x),), (jnp.asarray(v),))[1])
    v_before = v.copy()
    got = _called(view, lambda a: pyjlad.hvp(rank_weighted_squares, (a,), v))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(v, v_before)
