"""Cumulative and differencing operations: cumsum, cumprod, diff, ediff1d, trapezoid, convolve.

Numba accepts ``axis`` for ``np.cumsum`` only; ``np.cumsum``/``np.cumprod`` of a 2-D array
without ``axis`` run over the flattened array, and ``np.diff`` of a 2-D array differences
along the last axis (of contiguous arrays only: Numba does not compile it for a view).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, args, normal, positive
from corpus.program import program

FAMILY = "cumulative"



@njit
def cumsum(x):
    return np.cumsum(x)


@njit
def cumsum_sq(x):
    return np.cumsum(x * x)


@njit
def cumsum_method(x):
    return np.sin(x).cumsum()


@njit
def cumsum_axis0(x):
    return np.cumsum(x, axis=0)


@njit
def cumsum_axis1(x):
    return np.cumsum(x, axis=1)


@njit
def cumsum_axis_loss(x):
    return np.sum(np.cumsum(x, axis=0) ** 2)


@njit
def cumsum_loss(x):
    c = np.cumsum(x)
    return np.sum(c * c)


@njit
def cumprod(x):
    return np.cumprod(x)


@njit
def cumprod_method(x):
    return (1.0 + 0.2 * x).cumprod()


@njit
def diff(x):
    return np.diff(x)


@njit
def diff_n2(x):
    return np.diff(x * x, n=2)


@njit
def ediff1d(x):
    return np.ediff1d(np.exp(x))


@njit
def trapezoid(y, x):
    return np.trapezoid(y * y, x)


@njit
def convolve(a, v):
    return np.convolve(a, v)


@njit
def running_mean(x):
    c = np.cumsum(x)
    return c / np.arange(1.0, x.shape[0] + 1.0)


@njit
def nancumsum(x):
    return np.nancumsum(x)


@njit
def log_cumsum_exp(x):
    return np.log(np.cumsum(np.exp(x)))


program(FAMILY, "cumsum/1d", cumsum, jnp.cumsum, args(normal(5)), transforms=ARRAY)
program(FAMILY, "cumsum/1d-strided", cumsum, jnp.cumsum, args(normal(5, kind="strided")), transforms=ARRAY)
program(FAMILY, "cumsum/1d-reversed", cumsum, jnp.cumsum, args(normal(5, kind="reversed")), transforms=ARRAY)
program(FAMILY, "cumsum/1d-f32", cumsum, jnp.cumsum, args(normal(5, dtype=np.float32)), transforms=ARRAY, **F32)
program(FAMILY, "cumsum/2d-flattened", cumsum, jnp.cumsum, args(normal(2, 3)), transforms=ARRAY)
program(FAMILY, "cumsum/2d-transposed", cumsum, jnp.cumsum, args(normal(2, 3, kind="transposed")),
        transforms=ARRAY)
program(FAMILY, "cumsum/3d-flattened", cumsum, jnp.cumsum, args(normal(2, 2, 2)), transforms=ARRAY)
program(FAMILY, "cumsum_sq/1d", cumsum_sq, lambda x: jnp.cumsum(x * x), args(normal(5)), transforms=ARRAY)
program(FAMILY, "cumsum_method/1d", cumsum_method, lambda x: jnp.sin(x).cumsum(), args(normal(5)),
        transforms=ARRAY)
program(FAMILY, "cumsum_axis0/2d", cumsum_axis0, lambda x: jnp.cumsum(x, axis=0), args(normal(3, 2)),
        transforms=ARRAY)
program(FAMILY, "cumsum_axis0/2d-F", cumsum_axis0, lambda x: jnp.cumsum(x, axis=0), args(normal(3, 2, kind="F")),
        transforms=ARRAY)
program(FAMILY, "cumsum_axis1/2d", cumsum_axis1, lambda x: jnp.cumsum(x, axis=1), args(normal(2, 3)),
        transforms=ARRAY)
program(FAMILY, "cumsum_axis1/3d", cumsum_axis1, lambda x: jnp.cumsum(x, axis=1), args(normal(2, 3, 2)),
        transforms=ARRAY)
program(FAMILY, "cumsum_axis_loss/2d", cumsum_axis_loss, lambda x: jnp.sum(jnp.cumsum(x, axis=0) ** 2),
        args(normal(3, 4)), transforms=("gradient", "hvp"))
program(FAMILY, "cumsum_axis_loss/2d-f32", cumsum_axis_loss, lambda x: jnp.sum(jnp.cumsum(x, axis=0) ** 2),
        args(normal(3, 4, dtype=np.float32)), **F32)
program(FAMILY, "cumsum_axis0/1d", cumsum_axis0, lambda x: jnp.cumsum(x, axis=0), args(normal(4)),
        transforms=ARRAY)
program(FAMILY, "cumsum_loss/1d", cumsum_loss, lambda x: jnp.sum(jnp.cumsum(x) ** 2), args(normal(6)),
        transforms=("gradient", "hvp"))
program(FAMILY, "cumsum_loss/2d", cumsum_loss, lambda x: jnp.sum(jnp.cumsum(x) ** 2), args(normal(2, 3)))
program(FAMILY, "cumprod/1d", cumprod, jnp.cumprod, args(normal(5)), transforms=ARRAY)
program(FAMILY, "cumprod/1d-f32", cumprod, jnp.cumprod, args(positive(5, dtype=np.float32)), transforms=ARRAY,
        **F32)
program(FAMILY, "cumprod/2d-flattened", cumprod, jnp.cumprod, args(positive(2, 3)), transforms=ARRAY)
program(FAMILY, "cumprod_method/1d", cumprod_method, lambda x: (1.0 + 0.2 * x).cumprod(), args(normal(5)),
        transforms=ARRAY)
program(FAMILY, "diff/1d", diff, jnp.diff, args(normal(5)), transforms=ARRAY)
program(FAMILY, "diff/2d-last-axis", diff, jnp.diff, args(normal(3, 4)), transforms=ARRAY)
program(FAMILY, "diff/2d-F", diff, jnp.diff, args(normal(3, 4, kind="F")), transforms=ARRAY)
program(FAMILY, "diff/2d-last-axis-reverse", diff, jnp.diff, args(normal(3, 4)), transforms=("jacobian", "vjp"))
program(FAMILY, "diff_n2/1d", diff_n2, lambda x: jnp.diff(x * x, n=2), args(normal(6)), transforms=ARRAY)
program(FAMILY, "ediff1d/1d", ediff1d, lambda x: jnp.ediff1d(jnp.exp(x)), args(normal(5)), transforms=ARRAY)
program(FAMILY, "ediff1d/2d", ediff1d, lambda x: jnp.ediff1d(jnp.exp(x)), args(normal(2, 3)), transforms=ARRAY)
program(FAMILY, "trapezoid/1d", trapezoid, lambda y, x: jnp.trapezoid(y * y, x),
        lambda r: (r.standard_normal(6), np.cumsum(r.uniform(0.1, 1.0, 6))), wrt=(0, 1))
program(FAMILY, "convolve/1d", convolve, jnp.convolve, args(normal(5), normal(3)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "running_mean/1d", running_mean, lambda x: jnp.cumsum(x) / jnp.arange(1.0, x.shape[0] + 1.0),
        args(normal(5)), transforms=ARRAY)
program(FAMILY, "nancumsum/1d", nancumsum, jnp.nancumsum, args(normal(5)), transforms=ARRAY)
program(FAMILY, "log_cumsum_exp/1d", log_cumsum_exp, lambda x: jnp.log(jnp.cumsum(jnp.exp(x))), args(normal(5)),
        transforms=ARRAY)
