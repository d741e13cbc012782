"""Order statistics: sort, median, percentile, quantile, partition, top-k, interp, searchsorted.

Their derivatives are permutations of the incoming adjoints (linear interpolation between
two order statistics for percentiles), defined where the entries are distinct: inputs keep
a gap between entries.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, args, normal, positive
from corpus.program import program

FAMILY = "sorting"

_PERCENTILE = {"notes": "np.percentile/np.quantile/np.nanpercentile: Numba's _collect_percentiles made Enzyme "
                        "assert in invertPointerM until pyjlad retried with the vectors split into scalars"}


@njit
def sort(x):
    return np.sort(x)


@njit
def sort_weighted(x):
    return np.sum(np.sort(x) * np.arange(1.0, x.size + 1.0))


@njit
def sort_method(x):
    y = x.copy()
    y.sort()
    return y * y


@njit
def sort_of_expression(x):
    return np.sort(np.sin(x) + 0.1 * x)


@njit
def median(x):
    return np.median(x)


@njit
def median_of_square(x):
    return np.median(x * x) + np.median(x)


@njit
def percentile(x):
    return np.percentile(x, 30.0)


@njit
def quantile(x):
    return np.quantile(x, 0.75)


@njit
def nanmedian(x):
    return np.nanmedian(x)


@njit
def nanpercentile(x):
    return np.nanpercentile(x, 60.0)


@njit
def partition_kth(x):
    return np.partition(x, 2)[2]


@njit
def top_k(x):
    return np.sum(np.sort(x)[-3:] ** 2)


@njit
def trimmed_mean(x):
    s = np.sort(x)
    return np.mean(s[1:-1])


@njit
def interp_values(q, xp, fp):
    return np.interp(q, xp, fp)


@njit
def interp_scalar(q, xp, fp):
    return np.interp(q, xp, fp) ** 2


@njit
def searchsorted_gather(x, q):
    k = np.searchsorted(x, q)
    return x[k] * q + x[k - 1]


@njit
def rank_loss(x):
    order = np.argsort(x)
    s = 0.0
    for i in range(order.shape[0] - 1):
        s += (x[order[i + 1]] - x[order[i]]) ** 2
    return s


def _rank_loss(x):
    return jnp.sum(jnp.diff(jnp.sort(x)) ** 2)


program(FAMILY, "sort/1d", sort, jnp.sort, args(normal(6, gap=0.05)), transforms=ARRAY)
program(FAMILY, "sort/1d-reversed", sort, jnp.sort, args(normal(6, gap=0.05, kind="reversed")), transforms=ARRAY)
program(FAMILY, "sort/1d-strided", sort, jnp.sort, args(normal(6, gap=0.05, kind="strided")), transforms=ARRAY)
program(FAMILY, "sort/1d-f32", sort, jnp.sort, args(normal(6, gap=0.05, dtype=np.float32)), transforms=ARRAY,
        **F32)
program(FAMILY, "sort/2d-last-axis", sort, jnp.sort, args(normal(3, 4, gap=0.05)), transforms=ARRAY)
program(FAMILY, "sort/2d-transposed", sort, jnp.sort, args(normal(3, 4, gap=0.05, kind="transposed")),
        transforms=ARRAY)
program(FAMILY, "sort_weighted/1d", sort_weighted, lambda x: jnp.sum(jnp.sort(x) * jnp.arange(1.0, x.size + 1.0)),
        args(normal(7, gap=0.05)))
program(FAMILY, "sort_method/1d", sort_method, lambda x: jnp.sort(x) ** 2, args(normal(5, gap=0.05)),
        transforms=ARRAY)
program(FAMILY, "sort_of_expression/1d", sort_of_expression, lambda x: jnp.sort(jnp.sin(x) + 0.1 * x),
        args(normal(5, gap=0.1)), transforms=ARRAY)
program(FAMILY, "median/1d-odd", median, jnp.median, args(normal(7, gap=0.05)))
program(FAMILY, "median/1d-even", median, jnp.median, args(normal(6, gap=0.05)))
program(FAMILY, "median/2d", median, jnp.median, args(normal(3, 3, gap=0.05)))
program(FAMILY, "median/1d-f32", median, jnp.median, args(normal(5, gap=0.05, dtype=np.float32)), **F32)
program(FAMILY, "median_of_square/1d", median_of_square, lambda x: jnp.median(x * x) + jnp.median(x),
        args(positive(6)))
program(FAMILY, "percentile/1d", percentile, lambda x: jnp.percentile(x, 30.0), args(normal(8, gap=0.05)), **_PERCENTILE)
program(FAMILY, "percentile/2d", percentile, lambda x: jnp.percentile(x, 30.0), args(normal(3, 3, gap=0.05)), **_PERCENTILE)
program(FAMILY, "quantile/1d", quantile, lambda x: jnp.quantile(x, 0.75), args(normal(7, gap=0.05)), **_PERCENTILE)
program(FAMILY, "nanmedian/1d", nanmedian, jnp.nanmedian, args(normal(6, gap=0.05)))
program(FAMILY, "nanpercentile/1d", nanpercentile, lambda x: jnp.nanpercentile(x, 60.0), args(normal(7, gap=0.05)), **_PERCENTILE)
program(FAMILY, "partition_kth/1d", partition_kth, lambda x: jnp.sort(x)[2], args(normal(6, gap=0.05)),
        notes="np.partition: Numba's partition keeps its pivots in a list that grows, refused until 2026-12-06 "
        "(pyjlad.list_growth types the list's growth)")
program(FAMILY, "top_k/1d", top_k, lambda x: jnp.sum(jnp.sort(x)[-3:] ** 2), args(normal(7, gap=0.05)))
program(FAMILY, "trimmed_mean/1d", trimmed_mean, lambda x: jnp.mean(jnp.sort(x)[1:-1]), args(normal(7, gap=0.05)))
program(FAMILY, "interp_values/1d", interp_values, jnp.interp,
        lambda r: (r.uniform(0.1, 2.9, 5), np.array([0.0, 1.0, 2.0, 3.0]), r.standard_normal(4)), wrt=(0, 2),
        transforms=ARRAY)
program(FAMILY, "interp_scalar/1d", interp_scalar, lambda q, xp, fp: jnp.interp(q, xp, fp) ** 2,
        lambda r: (1.3, np.array([0.0, 0.5, 2.0, 3.0]), r.standard_normal(4)), wrt=(0, 1, 2))
program(FAMILY, "searchsorted_gather/1d", searchsorted_gather,
        lambda x, q: x[jnp.searchsorted(x, q)] * q + x[jnp.searchsorted(x, q) - 1],
        lambda r: (np.sort(r.standard_normal(6)) + 0.1 * np.arange(6), 0.05), wrt=(0, 1))
program(FAMILY, "rank_loss/1d", rank_loss, _rank_loss, args(normal(6, gap=0.05)))
program(FAMILY, "rank_loss/1d-hvp", rank_loss, _rank_loss, args(normal(6, gap=0.05)), transforms=("hvp",),
        notes="refused until 2026-11-28 (Enzyme 'Cannot deduce type of' the integer stores of np.argsort's "
        "quicksort); pyjlad's last retry now types the module's integer accesses")
