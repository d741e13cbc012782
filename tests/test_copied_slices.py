"""Copies of a slice of a temporary array: ``y[k:].copy()``, ``.flatten()``, ``np.median(y[k:])``.

Enzyme learns a temporary array's element type from what the code stores at its start; a copy starting
further in (a ``memcpy`` from ``y.data + 8k``, inline or in a Numba helper) had no type, and the retry with
loose types took it for integers: a silently zero gradient. pyjlad now types such copies from the IR
(``pyjlad.ir.edit.type_float_copies``) before any loose-types retry; and ``np.diff``'s result, allocated on
one branch, is typed too (its meminfo is no longer joined to its data through the ``null`` both take on the
other branches). Oracle: JAX float64 (float32 at
float32 tolerance), from copies taken before the call; the caller's array is checked unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)


@njit
def copy_of_slice(x):
    y = x * 2.0
    w = y[1:].copy()
    return np.sum(w * w)


@njit
def flatten_of_slice(x):
    y = np.exp(x)
    z = y[2:5].flatten()
    return np.sum(z * z * z)


@njit
def median_of_slice(x):
    y = x * 2.0
    return np.median(y[1:])


@njit
def median_of_exp_slice(x):
    y = np.exp(x)
    return np.median(y[1:])


@njit
def median_of_copy(x):
    return np.median(x * 1.0)  # LLVM makes x * 1.0 a plain copy


@njit
def copy_of_a_difference(x):
    return np.sum(np.diff(x)[1:].copy() ** 2)


@njit
def median_of_a_difference(x):
    return np.median(np.diff(x)[1:])


@njit
def copy_of_a_second_difference(x):
    return np.sum(np.diff(x, 2)[1:].copy() ** 2)


@njit
def flatten_of_a_difference(x):
    return np.sum(np.diff(x)[1:].flatten() ** 3)


@njit
def copy_of_ediff1d(x):
    return np.sum(np.ediff1d(x)[2:].copy() ** 2)


@njit
def median_of_sorted_differences(x):
    return np.sum(np.concatenate((x, x[::-1]))[2:].copy() ** 2) + np.median(np.diff(np.sort(x)))


CASES = {
    "copy": (copy_of_slice, lambda v: jnp.sum((2.0 * v[1:]) ** 2)),
    "flatten": (flatten_of_slice, lambda v: jnp.sum(jnp.exp(v[2:5]) ** 3)),
    "median": (median_of_slice, lambda v: jnp.median(2.0 * v[1:])),
    "median exp": (median_of_exp_slice, lambda v: jnp.median(jnp.exp(v[1:]))),
    "median x*1": (median_of_copy, lambda v: jnp.median(v)),
    # np.diff allocates its result on one branch: the phis of its meminfo and of its data pointer both take
    # null on the others, and pyjlad's typing once joined them through that null (a type conflict, then loose
    # types: zero gradients)
    "diff copy": (copy_of_a_difference, lambda v: jnp.sum(jnp.diff(v)[1:] ** 2)),
    "diff median": (median_of_a_difference, lambda v: jnp.median(jnp.diff(v)[1:])),
    "diff 2 copy": (copy_of_a_second_difference, lambda v: jnp.sum(jnp.diff(v, 2)[1:] ** 2)),
    "diff flatten": (flatten_of_a_difference, lambda v: jnp.sum(jnp.diff(v)[1:] ** 3)),
    "ediff1d copy": (copy_of_ediff1d, lambda v: jnp.sum(jnp.ediff1d(v)[2:] ** 2)),
    "sorted diff median": (median_of_sorted_differences,
                           lambda v: jnp.sum(jnp.concatenate((v, v[::-1]))[2:] ** 2) + jnp.median(jnp.diff(jnp.sort(v)))),
}
# odd and even lengths: np.median selects one element or averages two
POINTS = [np.array([0.3, -1.2, 2.5, 0.7, -0.4, 1.9, 0.1]), np.array([0.9, -0.2, 1.4, 0.35, -1.1, 0.6, 2.2, -0.7])]


@pytest.mark.parametrize("point", range(len(POINTS)))
@pytest.mark.parametrize("name", list(CASES))
def test_gradient_through_a_copied_slice_matches_jax(name: str, point: int) -> None:
    f, twin = CASES[name]
    x = POINTS[point].copy()
    x0 = x.copy()
    expected = np.asarray(jax.grad(twin)(jnp.asarray(x0)))
    assert np.any(expected != 0.0)
    np.testing.assert_allclose(pyjlad.gradient(f, x), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x0)


def test_forward_mode_and_float32_through_a_copied_slice() -> None:
    x = POINTS[1].copy()
    t = np.linspace(-1.0, 1.0, x.shape[0])
    x0, t0 = x.copy(), t.copy()
    _, tangent = pyjlad.jvp(copy_of_slice, (x,), (t,))
    np.testing.assert_allclose(tangent, float(jax.jvp(CASES["copy"][1], (jnp.asarray(x0),), (jnp.asarray(t0),))[1]),
                               rtol=1e-12)
    x32 = x0.astype(np.float32)
    expected = np.asarray(jax.grad(CASES["copy"][1])(jnp.asarray(x32, dtype=jnp.float32)))
    np.testing.assert_allclose(pyjlad.gradient(copy_of_slice, x32), expected, rtol=1e-5)
    np.testing.assert_array_equal(x, x0)
