"""Indexing: integer-array (fancy) gathers and scatters, boolean masks, slices, scalar indices.

Index arrays are arguments (int64, constants for the derivative) or computed inside the
function (``np.argsort``, comparisons). Gathers with repeated indices accumulate their
adjoints; scatters use distinct indices (NumPy's ``y[idx] = v`` with repeats keeps the last
write, which JAX does not promise).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, args, indices, normal, positive
from corpus.program import program

FAMILY = "indexing"

_MASK_ASSIGN = {"notes": "boolean-mask assignment y[mask] = ... in a function returning an array: "
                         "Enzyme failed on the vectorized loops Numba compiles for it until pyjlad retried with the vectors split into scalars (as np.where)"}


@njit
def gather(x, idx):
    return x[idx] * x[idx]


@njit
def gather_sum(x, idx):
    return np.sum(np.sin(x[idx]))


@njit
def take(x, idx):
    return np.take(x, idx) ** 2


@njit
def gather_rows(x, idx):
    return x[idx] * 2.0


@njit
def gather_cols(x, idx):
    return np.exp(x[:, idx])


@njit
def gather_pairs(x, i, j):
    return x[i, j] ** 3


@njit
def gather_ravel(x, idx):
    return x.ravel()[idx]


@njit
def gather_loop(x, idx):
    s = 0.0
    for k in range(idx.shape[0]):
        s += x[idx[k]] * x[idx[(k + 1) % idx.shape[0]]]
    return s


@njit
def scatter(x, idx, n):
    y = np.zeros(n)
    y[idx] = x * x
    return y


@njit
def scatter_add_loop(x, idx, n):
    y = np.zeros(n)
    for k in range(idx.shape[0]):
        y[idx[k]] += x[k]
    return np.sin(y)


@njit
def mask_sum(x):
    return np.sum(x[x > 0.0] ** 2)


@njit
def mask_argument(x, m):
    return np.sum(np.exp(x[m]))


@njit
def mask_assign(x):
    y = x.copy()
    y[x < 0.0] = 0.0
    return y * x


@njit
def mask_assign_array(x, y):
    z = x.copy()
    m = x > y
    z[m] = y[m]
    return z


@njit
def mask_mean(x):
    m = x > np.mean(x)
    return np.mean(x[m]) - np.mean(x[~m])


@njit
def slices(x):
    return x[1:-1] * x[2:] - x[:-2]


@njit
def slice_step(x):
    return np.sum(x[::2] * x[1::2])


@njit
def slice_reverse(x):
    return x[::-1] * x


@njit
def negative_index(x):
    return x[-1] * x[0] + x[-2] ** 2


@njit
def int_argument(x, k):
    return x[k] ** 2 + x[k - 1]


@njit
def int_2d(x, i, j):
    return x[i, j] * x[j, i] + x[i, i]


@njit
def row_of_2d(x, i):
    return np.sum(x[i] ** 2) + np.sum(x[:, i])


@njit
def slice_2d(x):
    return x[1:, :-1] * x[:-1, 1:]


@njit
def slice_3d(x):
    return x[:, 1, :] + x[1, :, ::-1]


@njit
def setitem_slice(x):
    y = np.zeros(x.shape[0] + 2)
    y[1:-1] = x
    y[0] = x[-1]
    y[-1] = x[0]
    return y[1:] * y[:-1]


@njit
def argsort_gather(x):
    order = np.argsort(x)
    return x[order] * np.arange(x.shape[0])


@njit
def nonzero_gather(x):
    return np.sum(x[np.nonzero(x > 0.0)[0]] ** 3)


@njit
def where_index(x):
    return np.sum(np.cos(x[np.where(x < 0.5)[0]]))


def _scatter(x, idx, n):
    return jnp.zeros(n).at[idx].set(x * x)


def _scatter_add_loop(x, idx, n):
    return jnp.sin(jnp.zeros(n).at[idx].add(x))


def _mask_mean(x):
    m = x > jnp.mean(x)
    return jnp.sum(jnp.where(m, x, 0.0)) / jnp.sum(m) - jnp.sum(jnp.where(m, 0.0, x)) / jnp.sum(~m)


def _setitem_slice(x):
    y = jnp.concatenate([x[-1:], x, x[:1]])
    return y[1:] * y[:-1]


program(FAMILY, "gather/1d-repeats", gather, lambda x, idx: x[idx] * x[idx], args(normal(5), indices(5, 7)),
        transforms=ARRAY)
program(FAMILY, "gather/1d-f32", gather, lambda x, idx: x[idx] * x[idx],
        args(normal(5, dtype=np.float32), indices(5, 4)), transforms=ARRAY, **F32)
program(FAMILY, "gather/1d-strided", gather, lambda x, idx: x[idx] * x[idx],
        args(normal(5, kind="strided"), indices(5, 6)), transforms=ARRAY)
program(FAMILY, "gather_sum/1d", gather_sum, lambda x, idx: jnp.sum(jnp.sin(x[idx])),
        args(normal(6), indices(6, 10)))
program(FAMILY, "gather_sum/1d-reversed", gather_sum, lambda x, idx: jnp.sum(jnp.sin(x[idx])),
        args(normal(6, kind="reversed"), indices(6, 10)))
program(FAMILY, "take/1d", take, lambda x, idx: jnp.take(x, idx) ** 2, args(normal(5), indices(5, 6)),
        transforms=ARRAY)
program(FAMILY, "take/2d-flat", take, lambda x, idx: jnp.take(x, idx) ** 2, args(normal(3, 3), indices(9, 5)),
        transforms=ARRAY)
program(FAMILY, "gather_rows/2d", gather_rows, lambda x, idx: x[idx] * 2.0, args(normal(4, 3), indices(4, 5)),
        transforms=ARRAY)
program(FAMILY, "gather_rows/2d-F", gather_rows, lambda x, idx: x[idx] * 2.0,
        args(normal(4, 3, kind="F"), indices(4, 3)), transforms=ARRAY)
program(FAMILY, "gather_cols/2d", gather_cols, lambda x, idx: jnp.exp(x[:, idx]),
        args(normal(3, 4), indices(4, 3)), transforms=ARRAY)
program(FAMILY, "gather_pairs/2d", gather_pairs, lambda x, i, j: x[i, j] ** 3,
        args(normal(3, 4), indices(3, 5), indices(4, 5)), transforms=ARRAY)
program(FAMILY, "gather_ravel/2d", gather_ravel, lambda x, idx: x.ravel()[idx],
        args(normal(3, 4), indices(12, 6)), transforms=ARRAY)
program(FAMILY, "gather_ravel/2d-transposed", gather_ravel, lambda x, idx: x.ravel()[idx],
        args(normal(3, 4, kind="transposed"), indices(12, 6)), transforms=ARRAY)
program(FAMILY, "gather_loop/1d", gather_loop, lambda x, idx: jnp.sum(x[idx] * x[jnp.roll(idx, -1)]),
        args(normal(6), indices(6, 8)), transforms=("gradient", "hvp"))
program(FAMILY, "scatter/1d", scatter, _scatter, args(normal(4), indices(7, 4, unique=True), 7), transforms=ARRAY)
program(FAMILY, "scatter_add_loop/1d-repeats", scatter_add_loop, _scatter_add_loop,
        args(normal(6), indices(4, 6), 4), transforms=ARRAY)
program(FAMILY, "mask_sum/1d", mask_sum, lambda x: jnp.sum(jnp.where(x > 0.0, x, 0.0) ** 2),
        args(normal(8, thresholds=(0.0,))))
program(FAMILY, "mask_sum/1d-f32", mask_sum, lambda x: jnp.sum(jnp.where(x > 0.0, x, 0.0) ** 2),
        args(normal(8, thresholds=(0.0,), dtype=np.float32)), **F32)
program(FAMILY, "mask_argument/1d", mask_argument, lambda x, m: jnp.sum(jnp.where(m, jnp.exp(x), 0.0)),
        args(normal(6), np.array([True, False, True, True, False, True])))
program(FAMILY, "mask_assign/1d", mask_assign, lambda x: jnp.where(x < 0.0, 0.0, x) * x,
        args(normal(6, thresholds=(0.0,))), transforms=ARRAY, **_MASK_ASSIGN)
program(FAMILY, "mask_assign_array/1d", mask_assign_array, lambda x, y: jnp.where(x > y, y, x),
        lambda r: (r.standard_normal(6), r.standard_normal(6) + np.array([0.5, -0.5] * 3)), wrt=(0, 1),
        transforms=("jvp",))
program(FAMILY, "mask_assign_array/1d-reverse", mask_assign_array, lambda x, y: jnp.where(x > y, y, x),
        lambda r: (r.standard_normal(6), r.standard_normal(6) + np.array([0.5, -0.5] * 3)), wrt=(0, 1),
        transforms=("jacobian", "vjp"), **_MASK_ASSIGN)
program(FAMILY, "mask_mean/1d", mask_mean, _mask_mean, args(normal(9, gap=0.1)))
program(FAMILY, "slices/1d", slices, lambda x: x[1:-1] * x[2:] - x[:-2], args(normal(6)), transforms=ARRAY)
program(FAMILY, "slices/1d-strided", slices, lambda x: x[1:-1] * x[2:] - x[:-2], args(normal(6, kind="strided")),
        transforms=ARRAY)
program(FAMILY, "slice_step/1d", slice_step, lambda x: jnp.sum(x[::2] * x[1::2]), args(normal(8)),
        transforms=("gradient", "hvp"))
program(FAMILY, "slice_reverse/1d", slice_reverse, lambda x: x[::-1] * x, args(normal(5)), transforms=ARRAY)
program(FAMILY, "slice_reverse/1d-reversed", slice_reverse, lambda x: x[::-1] * x,
        args(normal(5, kind="reversed")), transforms=ARRAY)
program(FAMILY, "negative_index/1d", negative_index, lambda x: x[-1] * x[0] + x[-2] ** 2, args(normal(5)),
        transforms=("gradient", "hvp"))
program(FAMILY, "int_argument/1d", int_argument, lambda x, k: x[k] ** 2 + x[k - 1], args(normal(5), 3))
program(FAMILY, "int_argument/1d-wraps", int_argument, lambda x, k: x[k] ** 2 + x[k - 1], args(normal(5), 0))
program(FAMILY, "int_2d/2d", int_2d, lambda x, i, j: x[i, j] * x[j, i] + x[i, i], args(normal(3, 3), 0, 2))
program(FAMILY, "row_of_2d/2d", row_of_2d, lambda x, i: jnp.sum(x[i] ** 2) + jnp.sum(x[:, i]),
        args(normal(3, 3), 1))
program(FAMILY, "row_of_2d/2d-F", row_of_2d, lambda x, i: jnp.sum(x[i] ** 2) + jnp.sum(x[:, i]),
        args(normal(3, 3, kind="F"), 2))
program(FAMILY, "slice_2d/2d", slice_2d, lambda x: x[1:, :-1] * x[:-1, 1:], args(normal(3, 3)), transforms=ARRAY)
program(FAMILY, "slice_2d/2d-transposed", slice_2d, lambda x: x[1:, :-1] * x[:-1, 1:],
        args(normal(3, 4, kind="transposed")), transforms=ARRAY)
program(FAMILY, "slice_3d/3d", slice_3d, lambda x: x[:, 1, :] + x[1, :, ::-1], args(normal(2, 2, 2)),
        transforms=ARRAY)
program(FAMILY, "setitem_slice/1d", setitem_slice, _setitem_slice, args(normal(5)), transforms=ARRAY,
        notes="its reverse sweep aborted the process until 2026-11-24: LLVM 22's GVN asserted (Value.h "
              "hasUseList()) on a load of Enzyme's cache marked !invariant.group whose address folded to a "
              "constant; pyjlad drops that metadata and compiles in a child process (pyjlad.engines.native)")
program(FAMILY, "argsort_gather/1d", argsort_gather, lambda x: x[jnp.argsort(x)] * jnp.arange(x.shape[0]),
        args(normal(6, gap=0.05)), transforms=("jacobian", "vjp"))
program(FAMILY, "argsort_gather/1d-jvp", argsort_gather,
        lambda x: x[jnp.argsort(x)] * jnp.arange(x.shape[0]), args(normal(6, gap=0.05)), transforms=("jvp",),
        notes="refused until 2026-11-28 (forward mode: Enzyme 'Cannot deduce type of' the integer stores of "
        "np.argsort's quicksort); pyjlad's last retry now types the module's integer accesses")
program(FAMILY, "nonzero_gather/1d", nonzero_gather, lambda x: jnp.sum(jnp.where(x > 0.0, x, 0.0) ** 3),
        args(normal(7, thresholds=(0.0,))))
program(FAMILY, "where_index/1d", where_index, lambda x: jnp.sum(jnp.where(x < 0.5, jnp.cos(x), 0.0)),
        args(normal(7, thresholds=(0.5,))))
program(FAMILY, "where_index/1d-f32", where_index, lambda x: jnp.sum(jnp.where(x < 0.5, jnp.cos(x), 0.0)),
        args(normal(7, thresholds=(0.5,), dtype=np.float32)), **F32)
program(FAMILY, "gather_sum/1d-positive", gather_sum, lambda x, idx: jnp.sum(jnp.sin(x[idx])),
        args(positive(4), np.array([3, 3, 3, 0], dtype=np.int64)))


# ------------------------------------------------------------------ an index clamped after np.searchsorted
@njit
def clamped_interpolation(x, grid, values):
    idx = np.searchsorted(grid, x)
    s = 0.0
    for i in range(x.shape[0]):
        k = min(max(idx[i], 1), grid.shape[0] - 1)
        t = (x[i] - grid[k - 1]) / (grid[k] - grid[k - 1])
        s += ((1.0 - t) * values[k - 1] + t * values[k]) ** 2
    return s


def clamped_interpolation_jax(x, grid, values):
    k = jnp.clip(jnp.searchsorted(grid, x), 1, grid.shape[0] - 1)
    t = (x - grid[k - 1]) / (grid[k] - grid[k - 1])
    return jnp.sum(((1.0 - t) * values[k - 1] + t * values[k]) ** 2)


def _interpolation_args(rng):
    grid = np.linspace(-3.0, 3.0, 13)
    points = rng.uniform(-3.5, 3.5, 9)  # some outside the grid: the clamp decides
    return points + 0.01 * (np.abs(points[:, None] - grid).min(axis=1) < 0.01), grid, np.cos(grid)


program(FAMILY, "searchsorted-clamped-interp", clamped_interpolation, clamped_interpolation_jax,
        _interpolation_args, wrt=(0, 1, 2), transforms=("gradient", "jvp"))
