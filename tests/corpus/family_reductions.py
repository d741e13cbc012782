"""Reductions: sum, mean, prod, std, var, max, min, argmax, argmin, ptp, average, nan-reductions.

Numba accepts ``axis`` for ``np.sum``, ``np.argmax``/``np.argmin`` and ``np.cumsum`` only
(``np.mean(x, axis=0)``, ``np.max(x, axis=0)``, ``x.max(axis=0)``, ``np.prod(x, axis=0)``, ...
do not compile), so the other reductions are checked over the whole array, of 1-D, 2-D and
3-D arrays, as functions and as methods.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, args, normal, positive
from corpus.program import program

FAMILY = "reductions"
SMOOTH = ("gradient", "hvp")


# --- whole-array reductions, function and method forms ------------------------------------

@njit
def sum_sq(x):
    return np.sum(x * x)


@njit
def sum_method(x):
    return (x * x).sum()


@njit
def mean_cube(x):
    return np.mean(x ** 3)


@njit
def mean_method(x):
    return np.sin(x).mean()


@njit
def prod_pos(x):
    return np.prod(x)


@njit
def prod_method(x):
    return (1.0 + 0.1 * x).prod()


@njit
def std_(x):
    return np.std(x)


@njit
def std_method(x):
    return x.std()


@njit
def var_(x):
    return np.var(x)


@njit
def var_method(x):
    return (2.0 * x).var()


@njit
def max_(x):
    return np.max(x)


@njit
def min_(x):
    return np.min(x)


@njit
def max_method(x):
    return x.max()


@njit
def min_method(x):
    return (x * x).min()


@njit
def amax_amin(x):
    return np.amax(x) - 2.0 * np.amin(x)


@njit
def ptp(x):
    return np.ptp(x)


@njit
def argmax_gather(x):
    return x[np.argmax(x)] ** 2


@njit
def argmin_gather(x):
    return np.sin(x[np.argmin(x)])


@njit
def argmax_gather_flat(x):
    k = np.argmax(x)
    return x.ravel()[k] * np.sum(x)


@njit
def logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


@njit
def softmax_entropy(x):
    e = np.exp(x - np.max(x))
    p = e / np.sum(e)
    return -np.sum(p * np.log(p))


@njit
def average_weighted(x, w):
    return np.average(x, weights=w)


@njit
def nansum_(x):
    return np.nansum(x * x)


@njit
def nanmean_(x):
    return np.nanmean(np.exp(x))


@njit
def nanmax_(x):
    return np.nanmax(x)


@njit
def nanstd_(x):
    return np.nanstd(x)


@njit
def mean_std_ratio(x):
    return np.mean(x) / (1.0 + np.std(x))


@njit
def sum_int_power(x):
    return np.sum(x ** 4) - np.sum(x) ** 2


_pairs = [
    ("sum_sq", sum_sq, lambda x: jnp.sum(x * x), SMOOTH),
    ("sum_method", sum_method, lambda x: (x * x).sum(), SMOOTH),
    ("mean_cube", mean_cube, lambda x: jnp.mean(x ** 3), SMOOTH),
    ("mean_method", mean_method, lambda x: jnp.sin(x).mean(), SMOOTH),
    ("prod_method", prod_method, lambda x: (1.0 + 0.1 * x).prod(), SMOOTH),
    ("std", std_, jnp.std, SMOOTH),
    ("std_method", std_method, lambda x: x.std(), ("gradient",)),
    ("var", var_, jnp.var, SMOOTH),
    ("var_method", var_method, lambda x: (2.0 * x).var(), ("gradient",)),
    ("max", max_, jnp.max, ("gradient",)),
    ("min", min_, jnp.min, ("gradient",)),
    ("max_method", max_method, lambda x: x.max(), ("gradient",)),
    ("min_method", min_method, lambda x: (x * x).min(), ("gradient",)),
    ("amax_amin", amax_amin, lambda x: jnp.max(x) - 2.0 * jnp.min(x), ("gradient",)),
    ("ptp", ptp, jnp.ptp, ("gradient",)),
    ("argmax_gather", argmax_gather, lambda x: x.ravel()[jnp.argmax(x)] ** 2, ("gradient",)),
    ("argmin_gather", argmin_gather, lambda x: jnp.sin(x.ravel()[jnp.argmin(x)]), ("gradient",)),
    ("logsumexp", logsumexp, lambda x: jnp.max(x) + jnp.log(jnp.sum(jnp.exp(x - jnp.max(x)))),
     ("gradient",)),
    ("softmax_entropy", softmax_entropy,
     lambda x: -jnp.sum(jnp.exp(x - jnp.max(x)) / jnp.sum(jnp.exp(x - jnp.max(x)))
                        * jnp.log(jnp.exp(x - jnp.max(x)) / jnp.sum(jnp.exp(x - jnp.max(x))))),
     ("gradient",)),
    ("nansum", nansum_, lambda x: jnp.nansum(x * x), ("gradient",)),
    ("nanmean", nanmean_, lambda x: jnp.nanmean(jnp.exp(x)), ("gradient",)),
    ("nanmax", nanmax_, jnp.nanmax, ("gradient",)),
    ("nanstd", nanstd_, jnp.nanstd, ("gradient",)),
    ("mean_std_ratio", mean_std_ratio, lambda x: jnp.mean(x) / (1.0 + jnp.std(x)), SMOOTH),
    ("sum_int_power", sum_int_power, lambda x: jnp.sum(x ** 4) - jnp.sum(x) ** 2, SMOOTH),
]

# Each reduction of a 1-D, a 2-D and a 3-D array (distinct entries: no ties for max/min).
# (x[np.argmax(x)] of a 2-D array is a row: the 2-D form is argmax_gather_flat.)
_ONLY_1D = ("argmax_gather", "argmin_gather")
for _name, _numba, _oracle, _transforms in _pairs:
    program(FAMILY, f"{_name}/1d", _numba, _oracle, args(normal(7, gap=0.05)), transforms=_transforms)
    if _name not in _ONLY_1D:
        program(FAMILY, f"{_name}/2d", _numba, _oracle, args(normal(3, 4, gap=0.05)), transforms=("gradient",))
for _name, _numba, _oracle, _transforms in [p for p in _pairs if p[0] not in _ONLY_1D][::3]:
    program(FAMILY, f"{_name}/3d", _numba, _oracle, args(normal(2, 3, 4, gap=0.05)), transforms=("gradient",))
for _name, _numba, _oracle, _transforms in _pairs[::2]:
    program(FAMILY, f"{_name}/1d-f32", _numba, _oracle, args(normal(6, dtype=np.float32, gap=0.05)),
            transforms=("gradient",), **F32)

program(FAMILY, "prod/1d", prod_pos, jnp.prod, args(positive(6)), transforms=SMOOTH)
program(FAMILY, "prod/2d", prod_pos, jnp.prod, args(positive(3, 3)))
program(FAMILY, "prod/1d-with-negatives", prod_pos, jnp.prod, args(normal(5, thresholds=(0.0,))))
program(FAMILY, "argmax_gather_flat/2d", argmax_gather_flat,
        lambda x: x.ravel()[jnp.argmax(x)] * jnp.sum(x), args(normal(3, 4, gap=0.05)))
program(FAMILY, "average_weighted/1d", average_weighted,
        lambda x, w: jnp.average(x, weights=w), args(normal(6), positive(6)), wrt=(0, 1))
program(FAMILY, "average_weighted/2d", average_weighted,
        lambda x, w: jnp.average(x, weights=w), args(normal(3, 2), positive(3, 2)), wrt=(0, 1))


# --- reductions along an axis (np.sum, np.argmax, np.argmin) ------------------------------

@njit
def sum_axis0(x):
    return np.sum(x, axis=0)


@njit
def sum_axis1(x):
    return np.sum(x * x, axis=1)


@njit
def sum_axis_last(x):
    return np.sum(np.sin(x), axis=-1)


@njit
def sum_method_axis(x):
    return x.sum(axis=1)


@njit
def sum_axis_then_max(x):
    return np.max(np.sum(x, axis=0))


@njit
def sum_axis_weighted(x, w):
    return np.sum(np.sum(x, axis=1) * w)


@njit
def sum_axis_nested(x):
    return np.sum(np.sum(x, axis=2), axis=0)


@njit
def argmax_axis0_gather(x):
    k = np.argmax(x, axis=0)
    s = 0.0
    for j in range(x.shape[1]):
        s += x[k[j], j] ** 2
    return s


@njit
def argmin_axis1_gather(x):
    k = np.argmin(x, axis=1)
    s = 0.0
    for i in range(x.shape[0]):
        s += np.exp(x[i, k[i]])
    return s


def _argmax_axis0_gather(x):
    k = jnp.argmax(x, axis=0)
    return jnp.sum(x[k, jnp.arange(x.shape[1])] ** 2)


_ARGMAX_AXIS = {"expect": "refused", "notes": "np.argmax/np.argmin with axis: Enzyme refuses Numba's "
                "build_argmax_or_argmin_with_axis ('No create nofree of empty function')"}


def _argmin_axis1_gather(x):
    k = jnp.argmin(x, axis=1)
    return jnp.sum(jnp.exp(x[jnp.arange(x.shape[0]), k]))


program(FAMILY, "sum_axis0/2d", sum_axis0, lambda x: jnp.sum(x, axis=0), args(normal(3, 4)), transforms=ARRAY)
program(FAMILY, "sum_axis0/3d", sum_axis0, lambda x: jnp.sum(x, axis=0), args(normal(2, 3, 2)),
        transforms=ARRAY)
program(FAMILY, "sum_axis0/2d-f32", sum_axis0, lambda x: jnp.sum(x, axis=0),
        args(normal(3, 4, dtype=np.float32)), transforms=ARRAY, **F32)
program(FAMILY, "sum_axis1/2d", sum_axis1, lambda x: jnp.sum(x * x, axis=1), args(normal(3, 4)),
        transforms=ARRAY)
program(FAMILY, "sum_axis1/3d", sum_axis1, lambda x: jnp.sum(x * x, axis=1), args(normal(2, 3, 2)),
        transforms=ARRAY)
program(FAMILY, "sum_axis_last/2d", sum_axis_last, lambda x: jnp.sum(jnp.sin(x), axis=-1),
        args(normal(3, 4)), transforms=ARRAY)
program(FAMILY, "sum_axis_last/3d", sum_axis_last, lambda x: jnp.sum(jnp.sin(x), axis=-1),
        args(normal(2, 2, 3)), transforms=ARRAY)
program(FAMILY, "sum_method_axis/2d", sum_method_axis, lambda x: x.sum(axis=1), args(normal(4, 3)),
        transforms=ARRAY)
program(FAMILY, "sum_axis_then_max/2d", sum_axis_then_max, lambda x: jnp.max(jnp.sum(x, axis=0)),
        args(normal(3, 5, gap=0.1)))
program(FAMILY, "sum_axis_weighted/2d", sum_axis_weighted, lambda x, w: jnp.sum(jnp.sum(x, axis=1) * w),
        args(normal(4, 3), normal(4)), wrt=(0, 1), transforms=("gradient",))
program(FAMILY, "sum_axis_nested/3d", sum_axis_nested, lambda x: jnp.sum(jnp.sum(x, axis=2), axis=0),
        args(normal(2, 3, 4)), transforms=ARRAY)
program(FAMILY, "argmax_axis0_gather/2d", argmax_axis0_gather, _argmax_axis0_gather,
        args(normal(4, 3, gap=0.05)), **_ARGMAX_AXIS)
program(FAMILY, "argmin_axis1_gather/2d", argmin_axis1_gather, _argmin_axis1_gather,
        args(normal(3, 4, gap=0.05)), **_ARGMAX_AXIS)
program(FAMILY, "argmin_axis1_gather/2d-f32", argmin_axis1_gather, _argmin_axis1_gather,
        args(normal(3, 4, gap=0.05, dtype=np.float32)), **F32, **_ARGMAX_AXIS)
