"""Copies of floats in functions that sort: typed for Enzyme before loose types (pyjlad.engines.differentiate).

Before: ``y.sort(); np.median(y[2:])`` gave a zero gradient, silently. Enzyme's type analysis stopped at its
first failure, a ``phi`` of Numba's quicksort (the partition stack's integers), so pyjlad retried with loose
types, under which Enzyme took the copy ``np.median`` makes of the slice (a ``memcpy`` at an offset into the
sorted array) for integers: no adjoint through it. So did every copy of floats in a function that sorts:
slices of a sorted array copied, flattened, concatenated or passed to ``np.median``/``np.percentile``, an
array copied by a loop and then copied again. Now the float copies are typed (``type_float_copies``) before any
loose-types attempt, whatever Enzyme's first failure was.

Oracles: ``jax.grad`` in float64 of the same program in ``jax.numpy`` (``jnp.sort``, ``jnp.median``,
``jnp.percentile`` share NumPy's definitions), on inputs without ties, from copies taken before the call;
the caller's arrays are checked unchanged.
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
def sorted_in_place_then_median_of_a_slice(x):
    y = x.copy()
    y.sort()
    return np.median(y[2:])


@njit
def np_sort_then_median_of_a_slice(x):
    y = np.sort(x)
    return np.median(y[2:])


@njit
def trimmed_mean(x):
    y = np.sort(x)
    return np.mean(y[1:-1].copy())


@njit
def sorted_slice_copied_then_squared(x):
    y = np.sort(x)
    z = y[3:].copy()
    return np.sum(z * z * x[:z.shape[0]])


@njit
def percentile_of_the_upper_part(x):
    y = np.sort(x)
    return np.percentile(y[2:], 30.0)


@njit
def sorted_parts_concatenated(x):
    y = np.sort(x)
    z = np.concatenate((y[:2], y[4:]))
    return np.sum(z ** 3)


@njit
def sorted_slice_assigned(x):
    y = np.sort(x)
    z = np.empty(y.shape[0] - 2)
    z[:] = y[2:]
    return np.sum(np.sin(z) * z)


@njit
def gathered_by_argsort_then_median(x):
    idx = np.argsort(x)
    y = x[idx]
    return np.median(y[1:]) * x[0]


@njit
def tail_above_a_searched_value(x):
    y = np.sort(x)
    i = np.searchsorted(y, 0.5)
    return np.sum(y[i:].copy() ** 2)


@njit
def list_sorted_then_median_of_a_slice(x):
    values = [v for v in x]
    values.sort()
    return np.median(np.array(values)[2:])


@njit
def cumulative_sums_sorted_then_copied(x):
    c = np.cumsum(x)
    c.sort()
    return np.sum(c[1:].copy() ** 2)


@njit
def two_medians(x):
    return np.median(np.sort(x)[1:]) + np.median(x[:5])


@njit
def sorted_temporary_sliced(x):
    return np.sum(np.sort(np.sin(x))[3:].copy() * 2.0)


@njit
def range_and_inner_squares(x):
    y = np.sort(x)
    inner = y[1:-1].copy()
    return y[-1] - y[0] + np.sum(inner ** 2)


@njit
def positive_part_of_the_sorted_tail(x):
    y = np.sort(x)
    z = np.where(y > 0, y, 0.0)
    return np.sum(z[1:].copy() ** 2)


@njit
def sorted_and_input_concatenated(x):
    z = np.concatenate((np.sort(x), x))
    return np.sum(z[3:].copy() ** 2)


@njit
def sorted_tail_flattened(x):
    return np.sum(np.sort(x)[2:].flatten() ** 2)


@njit
def sorted_tail_copied_by_a_loop_then_copied(x):
    y = np.sort(x)
    z = np.zeros(y.shape[0] - 1)
    for i in range(z.shape[0]):
        z[i] = y[i + 1]
    w = z.copy()
    return np.sum(w * 2.0)


@njit
def rows_sorted_then_medians(a):
    b = a.copy()
    total = 0.0
    for i in range(b.shape[0]):
        b[i].sort()
        total += np.median(b[i, 1:]) * (i + 1.0)
    return total


@njit
def sorted_in_a_loop(x, steps):
    y = x.copy()
    for _ in range(steps):
        y.sort()
        y = y[1:] * 1.5
    return np.median(y.copy()) + np.sum(y * y)


def _jax_twins():
    return {
        sorted_in_place_then_median_of_a_slice: lambda x: jnp.median(jnp.sort(x)[2:]),
        np_sort_then_median_of_a_slice: lambda x: jnp.median(jnp.sort(x)[2:]),
        trimmed_mean: lambda x: jnp.mean(jnp.sort(x)[1:-1]),
        sorted_slice_copied_then_squared: lambda x: jnp.sum(jnp.sort(x)[3:] ** 2 * x[:x.shape[0] - 3]),
        percentile_of_the_upper_part: lambda x: jnp.percentile(jnp.sort(x)[2:], 30.0),
        sorted_parts_concatenated: lambda x: jnp.sum(jnp.concatenate((jnp.sort(x)[:2], jnp.sort(x)[4:])) ** 3),
        sorted_slice_assigned: lambda x: jnp.sum(jnp.sin(jnp.sort(x)[2:]) * jnp.sort(x)[2:]),
        gathered_by_argsort_then_median: lambda x: jnp.median(x[jnp.argsort(x)][1:]) * x[0],
        # np.searchsorted (side="left") of a sorted array: the tail is the elements >= 0.5
        tail_above_a_searched_value: lambda x: jnp.sum(jnp.where(x >= 0.5, x, 0.0) ** 2),
        list_sorted_then_median_of_a_slice: lambda x: jnp.median(jnp.sort(x)[2:]),
        cumulative_sums_sorted_then_copied: lambda x: jnp.sum(jnp.sort(jnp.cumsum(x))[1:] ** 2),
        two_medians: lambda x: jnp.median(jnp.sort(x)[1:]) + jnp.median(x[:5]),
        sorted_temporary_sliced: lambda x: jnp.sum(jnp.sort(jnp.sin(x))[3:] * 2.0),
        range_and_inner_squares: lambda x: jnp.sort(x)[-1] - jnp.sort(x)[0] + jnp.sum(jnp.sort(x)[1:-1] ** 2),
        positive_part_of_the_sorted_tail: lambda x: jnp.sum(jnp.where(jnp.sort(x) > 0, jnp.sort(x), 0.0)[1:] ** 2),
        sorted_and_input_concatenated: lambda x: jnp.sum(jnp.concatenate((jnp.sort(x), x))[3:] ** 2),
        sorted_tail_flattened: lambda x: jnp.sum(jnp.sort(x)[2:] ** 2),
        sorted_tail_copied_by_a_loop_then_copied: lambda x: jnp.sum(jnp.sort(x)[1:] * 2.0),
    }


_SIZES = (7, 8, 31)


@pytest.mark.parametrize("n", _SIZES)
@pytest.mark.parametrize("f", list(_jax_twins()), ids=lambda f: f.__name__)
def test_sorted_then_copied_matches_jax(f, n: int) -> None:
    x = np.random.default_rng(n).permutation(np.linspace(-2.0, 3.0, n)) + 0.01 * np.arange(n)
    x0 = x.copy()
    want = np.asarray(jax.grad(_jax_twins()[f])(jnp.asarray(x0)))
    got = pyjlad.gradient(f, x)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    assert np.any(got != 0.0)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("shape", [(3, 7), (4, 6)])
def test_rows_sorted_in_place_then_medians_match_jax(shape) -> None:
    a = np.random.default_rng(1).normal(size=shape)
    a0 = a.copy()
    weights = jnp.arange(1.0, shape[0] + 1.0)

    def twin(m):
        return jnp.sum(jnp.median(jnp.sort(m, axis=1)[:, 1:], axis=1) * weights)

    want = np.asarray(jax.grad(twin)(jnp.asarray(a0)))
    got = pyjlad.gradient(rows_sorted_then_medians, a)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(a, a0)


@pytest.mark.parametrize("steps", [1, 3])
def test_sorted_and_sliced_in_a_loop_matches_jax(steps: int) -> None:
    x = np.random.default_rng(steps).normal(size=9)
    x0 = x.copy()

    def twin(v):
        y = v
        for _ in range(steps):
            y = jnp.sort(y)[1:] * 1.5
        return jnp.median(y) + jnp.sum(y * y)

    want = np.asarray(jax.grad(twin)(jnp.asarray(x0)))
    got = pyjlad.gradient(sorted_in_a_loop, x, steps, wrt=0)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(x, x0)
