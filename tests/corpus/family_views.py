"""Views, reshapes and array building: transpose, reshape, ravel, flip, roll, triu, diag,
concatenate, stack, hstack, vstack, repeat, append, and inputs that are views of other arrays.

Inputs come in every memory layout the argument builders make (contiguous, strided,
reversed, transposed, Fortran) and as zero-stride broadcasts.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, LAYOUTS, args, normal
from corpus.program import program

FAMILY = "views"

@njit
def transpose_mul(x):
    return x.T * np.arange(1.0, x.shape[0] + 1.0)


@njit
def transpose_func(x):
    return np.transpose(x) @ x


@njit
def reshape(x):
    return np.sin(x.reshape(3, 4)) @ np.ones(4)


@njit
def reshape_3d(x):
    y = x.reshape(2, 3, 2)
    return y[1] * y[0]


@njit
def ravel(x):
    return x.ravel() ** 2


@njit
def flatten(x):
    return np.cos(x.flatten())


@njit
def swapaxes(x):
    return np.swapaxes(x, 0, 2) * 2.0


@njit
def moveaxis(x):
    return np.moveaxis(x, 0, 1) ** 2


@njit
def expand_dims(x):
    return np.expand_dims(x, 0) * np.expand_dims(x, 1)


@njit
def flip(x):
    return np.flip(x) * x


@njit
def fliplr_rot90(x):
    return np.fliplr(x) + np.rot90(x)


@njit
def roll(x):
    return np.roll(x, 2) * x


@njit
def triu_tril(x):
    return np.triu(x) - 2.0 * np.tril(x, -1)


@njit
def diag_of_matrix(x):
    return np.diag(x) ** 2


@njit
def diag_from_vector(x):
    return np.diag(x) @ np.diag(x * x)


@njit
def repeat(x):
    return np.repeat(x, 2) * np.arange(2.0 * x.size)


@njit
def append(x, y):
    return np.append(x, y * y)


@njit
def concatenate(x, y):
    return np.concatenate((x, np.sin(y)))


@njit
def concatenate_axis1(x, y):
    return np.concatenate((x, y), axis=1)


@njit
def stack(x, y):
    return np.stack((x, y * x))


@njit
def hstack(x, y):
    return np.hstack((x, y))


@njit
def vstack(x, y):
    return np.vstack((x, 2.0 * y))


@njit
def column_stack(x, y):
    return np.column_stack((x, y))


@njit
def copy_layouts(x):
    a = np.ascontiguousarray(x.T)
    b = np.asfortranarray(x)
    return a.T * b + x.copy()


@njit
def atleast_2d(x):
    return np.atleast_2d(x) * 3.0


@njit
def loop_over_view(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += (i + 1.0) * x[i, j] ** 2 + x[i, j] * x[j % x.shape[0], i % x.shape[1]]
    return s


@njit
def loop_3d(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            for k in range(x.shape[2]):
                s += np.sin(x[i, j, k]) * (i - j + 0.5 * k)
    return s


@njit
def weighted_view_sum(x, w):
    return np.sum(x * w)


def _loop_over_view(x):
    n, m = x.shape
    i = jnp.arange(n)[:, None]
    j = jnp.arange(m)[None, :]
    other = x[j % n, i % m]
    return jnp.sum((i + 1.0) * x ** 2 + x * other)


def _loop_3d(x):
    i, j, k = jnp.meshgrid(*(jnp.arange(s, dtype=jnp.float64) for s in x.shape), indexing="ij")
    return jnp.sum(jnp.sin(x) * (i - j + 0.5 * k))


program(FAMILY, "transpose_mul/2d", transpose_mul, lambda x: x.T * jnp.arange(1.0, x.shape[0] + 1.0),
        args(normal(3, 2)), transforms=ARRAY)
program(FAMILY, "transpose_func/2d", transpose_func, lambda x: jnp.transpose(x) @ x, args(normal(3, 2)),
        transforms=ARRAY)
program(FAMILY, "reshape/1d", reshape, lambda x: jnp.sin(x.reshape(3, 4)) @ jnp.ones(4), args(normal(12)),
        transforms=ARRAY)
program(FAMILY, "reshape/2d", reshape, lambda x: jnp.sin(x.reshape(3, 4)) @ jnp.ones(4), args(normal(2, 6)),
        transforms=ARRAY)
program(FAMILY, "reshape_3d/1d", reshape_3d, lambda x: x.reshape(2, 3, 2)[1] * x.reshape(2, 3, 2)[0],
        args(normal(12)), transforms=ARRAY)
program(FAMILY, "ravel/2d", ravel, lambda x: x.ravel() ** 2, args(normal(2, 3)), transforms=ARRAY)
program(FAMILY, "ravel/2d-transposed", ravel, lambda x: x.ravel() ** 2, args(normal(2, 3, kind="transposed")),
        transforms=ARRAY)
program(FAMILY, "ravel/3d-strided", ravel, lambda x: x.ravel() ** 2, args(normal(2, 2, 2, kind="strided")),
        transforms=ARRAY)
program(FAMILY, "flatten/2d-F", flatten, lambda x: jnp.cos(x.flatten()), args(normal(2, 3, kind="F")),
        transforms=ARRAY)
program(FAMILY, "swapaxes/3d", swapaxes, lambda x: jnp.swapaxes(x, 0, 2) * 2.0, args(normal(2, 3, 2)),
        transforms=ARRAY,
        notes="refused until 2026-12-06: Numba's permute_arrays checks the axis order with a set "
              "(NRT_MemInfo_varsize_alloc), which pyjlad's runtime now defines")
program(FAMILY, "moveaxis/3d", moveaxis, lambda x: jnp.moveaxis(x, 0, 1) ** 2, args(normal(2, 2, 3)),
        transforms=ARRAY,
        notes="refused until 2026-12-06: a set (the axis order's check) and a list sorted from a zip, grown in "
              "Numba's list.extend (pyjlad.list_growth follows a list into the function that grows it)")
program(FAMILY, "expand_dims/1d", expand_dims, lambda x: jnp.expand_dims(x, 0) * jnp.expand_dims(x, 1),
        args(normal(3)), transforms=ARRAY)
program(FAMILY, "flip/1d", flip, lambda x: jnp.flip(x) * x, args(normal(5)), transforms=ARRAY)
program(FAMILY, "flip/2d", flip, lambda x: jnp.flip(x) * x, args(normal(2, 3)), transforms=ARRAY)
program(FAMILY, "fliplr_rot90/2d", fliplr_rot90, lambda x: jnp.fliplr(x) + jnp.rot90(x), args(normal(3, 3)),
        transforms=ARRAY,
        notes="Numba writes np.rot90(x) (k=1) as np.swapaxes(np.fliplr(x), 0, 1): refused as for swapaxes/3d "
              "until 2026-12-06")
program(FAMILY, "roll/1d", roll, lambda x: jnp.roll(x, 2) * x, args(normal(5)), transforms=ARRAY)
program(FAMILY, "roll/2d-flattened", roll, lambda x: jnp.roll(x, 2) * x, args(normal(2, 3)), transforms=ARRAY)
program(FAMILY, "triu_tril/2d", triu_tril, lambda x: jnp.triu(x) - 2.0 * jnp.tril(x, -1), args(normal(3, 3)),
        transforms=ARRAY)
program(FAMILY, "diag_of_matrix/2d", diag_of_matrix, lambda x: jnp.diag(x) ** 2, args(normal(3, 3)),
        transforms=ARRAY)
program(FAMILY, "diag_from_vector/1d", diag_from_vector, lambda x: jnp.diag(x) @ jnp.diag(x * x), args(normal(3)),
        transforms=ARRAY)
program(FAMILY, "repeat/1d", repeat, lambda x: jnp.repeat(x, 2) * jnp.arange(2.0 * x.size), args(normal(3)),
        transforms=ARRAY)
program(FAMILY, "append/1d", append, lambda x, y: jnp.append(x, y * y), args(normal(3), normal(2)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "concatenate/1d", concatenate, lambda x, y: jnp.concatenate((x, jnp.sin(y))),
        args(normal(3), normal(2)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "concatenate_axis1/2d", concatenate_axis1, lambda x, y: jnp.concatenate((x, y), axis=1),
        args(normal(2, 2), normal(2, 1)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "stack/1d", stack, lambda x, y: jnp.stack((x, y * x)), args(normal(3), normal(3)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "hstack/1d", hstack, lambda x, y: jnp.hstack((x, y)), args(normal(2), normal(3)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "vstack/2d", vstack, lambda x, y: jnp.vstack((x, 2.0 * y)), args(normal(2, 2), normal(1, 2)),
        wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "column_stack/1d", column_stack, lambda x, y: jnp.column_stack((x, y)),
        args(normal(3), normal(3)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "copy_layouts/2d", copy_layouts, lambda x: x * x + x, args(normal(2, 3)), transforms=ARRAY)
program(FAMILY, "atleast_2d/1d", atleast_2d, lambda x: jnp.atleast_2d(x) * 3.0, args(normal(3)), transforms=ARRAY)

# One scalar function of a matrix, of a 3-D array and a weighted sum, with each input layout.
for _kind in LAYOUTS:
    program(FAMILY, f"loop_over_view/2d-{_kind}", loop_over_view, _loop_over_view, args(normal(3, 4, kind=_kind)),
            transforms=("gradient", "hvp"))
    program(FAMILY, f"loop_3d/3d-{_kind}", loop_3d, _loop_3d, args(normal(2, 3, 2, kind=_kind)))
    program(FAMILY, f"weighted_view_sum/2d-{_kind}", weighted_view_sum, lambda x, w: jnp.sum(x * w),
            args(normal(3, 2, kind=_kind), normal(3, 2, kind=_kind)), wrt=(0, 1))
program(FAMILY, "loop_over_view/2d-f32-F", loop_over_view, _loop_over_view,
        args(normal(3, 4, kind="F", dtype=np.float32)), **F32)
program(FAMILY, "weighted_view_sum/2d-broadcast", weighted_view_sum, lambda x, w: jnp.sum(x * w),
        lambda r: (np.broadcast_to(r.standard_normal(3), (2, 3)), r.standard_normal((2, 3))), wrt=(0, 1))
program(FAMILY, "weighted_view_sum/1d-broadcast-scalar", weighted_view_sum, lambda x, w: jnp.sum(x * w),
        lambda r: (np.broadcast_to(np.array(r.standard_normal()), (4,)), r.standard_normal(4)), wrt=(0, 1))
program(FAMILY, "ravel/2d-broadcast", ravel, lambda x: x.ravel() ** 2,
        lambda r: (np.broadcast_to(r.standard_normal((1, 3)), (2, 3)),), transforms=ARRAY)
