"""Assignments of an array into a slice of a 2-D or 3-D array (``g[1:, :] = x``), differentiated.

Numba 0.61 on checks the shapes of such an assignment with ``raise_with_shape_context``, whose message is
built with a list of strings that grows (``NRT_MemInfo_varsize_realloc``): Enzyme refused the whole function
("No create nofree of empty function"), so every gradient of a function with this everyday idiom failed, with
Enzyme's words as the only explanation. The raising function is now an inactive stub
(:func:`pyjlad.stubs.raise_only_stub`); a mismatch still raises Numba's own ``ValueError``. Oracle: ``jax`` in
float64 on twins written with ``.at[...].set``; inputs copied before each call and checked unchanged after.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def _rows_update(p, g0):
    g = g0.copy()
    for _ in range(3):
        g[1:, :] = g[1:, :] * p[0] + g[:-1, :] * p[1] * p[1]
    return np.sum(g * g)


def _rows_update_jax(p, g0):
    g = g0
    for _ in range(3):
        g = g.at[1:, :].set(g[1:, :] * p[0] + g[:-1, :] * p[1] * p[1])
    return jnp.sum(g * g)


def _first_axis_only(p, g0):
    g = g0.copy()
    g[1:] = np.sin(g[:-1] * p[0]) + p[1]
    return np.sum(g ** 3)


def _first_axis_only_jax(p, g0):
    g = g0.at[1:].set(jnp.sin(g0[:-1] * p[0]) + p[1])
    return jnp.sum(g ** 3)


def _inner_block(p, g0):
    g = np.zeros((g0.shape[0] + 2, g0.shape[1] + 2))
    g[1:-1, 1:-1] = g0 * p[0]
    lap = g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] - 4.0 * g[1:-1, 1:-1]
    return np.sum(lap * lap) * p[1]


def _inner_block_jax(p, g0):
    g = jnp.zeros((g0.shape[0] + 2, g0.shape[1] + 2)).at[1:-1, 1:-1].set(g0 * p[0])
    lap = g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] - 4.0 * g[1:-1, 1:-1]
    return jnp.sum(lap * lap) * p[1]


def _cube(p, g0):
    c = np.zeros((2, g0.shape[0], g0.shape[1]))
    c[0, :, :] = g0
    c[1, :, 1:] = g0[:, :-1] * p[0] + p[1] * g0[:, 1:]
    return np.sum(np.exp(c[:, 1:, :] * p[1]))


def _cube_jax(p, g0):
    c = jnp.zeros((2, g0.shape[0], g0.shape[1])).at[0, :, :].set(g0)
    c = c.at[1, :, 1:].set(g0[:, :-1] * p[0] + p[1] * g0[:, 1:])
    return jnp.sum(jnp.exp(c[:, 1:, :] * p[1]))


CASES = {
    "rows updated from the rows above": (_rows_update, _rows_update_jax),
    "g[1:] = ... of a 2-D array": (_first_axis_only, _first_axis_only_jax),
    "a padded copy, its interior assigned": (_inner_block, _inner_block_jax),
    "slices of a 3-D array assigned": (_cube, _cube_jax),
}


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    return np.array([0.45, 0.35]), np.arange(12.0).reshape(4, 3) / 10.0 - 0.3


@pytest.mark.parametrize("case", CASES)
def test_the_gradient_through_a_slice_assignment_is_right(case: str) -> None:
    function, twin = CASES[case]
    p, g0 = _inputs()
    before = (p.copy(), g0.copy())
    expected = jax.grad(twin, argnums=(0, 1))(jnp.asarray(before[0]), jnp.asarray(before[1]))
    dp, dg = pyjlad.grad(njit(function), wrt=(0, 1))(p, g0)
    np.testing.assert_allclose(dp, np.asarray(expected[0]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dg, np.asarray(expected[1]), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(p, before[0])
    np.testing.assert_array_equal(g0, before[1])


@pytest.mark.parametrize("case", ["rows updated from the rows above", "slices of a 3-D array assigned"])
def test_the_hessian_through_a_slice_assignment_is_right(case: str) -> None:
    function, twin = CASES[case]
    p, g0 = _inputs()
    before = (p.copy(), g0.copy())
    expected = jax.hessian(twin)(jnp.asarray(before[0]), jnp.asarray(before[1]))
    np.testing.assert_allclose(pyjlad.hessian(njit(function), p, g0), np.asarray(expected), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(p, before[0])
    np.testing.assert_array_equal(g0, before[1])


def test_a_shape_mismatch_still_raises_numbas_value_error() -> None:
    @njit
    def mismatched(p, g0):
        g = g0.copy()
        g[1:, :] = g0 * p[0]  # 3 rows from 4
        return np.sum(g)

    p, g0 = _inputs()
    with pytest.raises(ValueError, match=r"cannot assign slice of shape \(3, 3\) from input of shape \(4, 3\)"):
        mismatched(p, g0)
    with pytest.raises(ValueError, match=r"cannot assign slice of shape \(3, 3\) from input of shape \(4, 3\)"):
        pyjlad.grad(mismatched)(p, g0)
