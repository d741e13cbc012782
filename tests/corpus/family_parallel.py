"""Parallel loops: ``@njit(parallel=True)`` programs whose ``prange`` loops pyjlad differentiates in parallel.

Each program is a Numba function and a ``jax.numpy`` twin computing the same value. Their derivatives
run the loops on Numba's threads (:mod:`pyjlad.parallel_derivatives`); the check makes a fallback to the
serial derivative (:class:`pyjlad.ParallelFallbackWarning`) an error, so a program that stops running in
parallel is reported as well as a wrong one. ``jvp`` passes ``None`` for the arguments not in ``wrt`` and
``hvp`` holds them constant: the shapes that were silently wrong when a loop copied a constant array.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit, prange

from corpus.program import program

FAMILY = "parallel"
SMOOTH = ("gradient", "jvp", "hvp")


# ------------------------------------------------------------------ a row of the output from a per-row temporary
@njit(parallel=True)
def scaled_rows(m, w, b):
    n, k = b.shape
    ts = np.zeros((n, k))
    for i in prange(n):
        t = m[i] * w[0]
        ts[i, :] = b[i, :] / t
    return np.sum(ts ** 2)


def scaled_rows_jax(m, w, b):
    return jnp.sum((b / (m[:, None] * w[0])) ** 2)


def _rows_args(rng):
    return rng.uniform(1.0, 2.0, 40), rng.uniform(1.0, 2.0, (3, 3)), rng.standard_normal((40, 3))


program(FAMILY, "row-from-a-temporary", scaled_rows, scaled_rows_jax, _rows_args, transforms=SMOOTH)
program(FAMILY, "row-from-a-temporary-wrt-shared", scaled_rows, scaled_rows_jax, _rows_args, wrt=(1,),
        transforms=SMOOTH)


# ------------------------------------------------------------------ seed 003's voxel loop, the inverse given
@njit(parallel=True)
def standardized(mse, vinv, b):
    n, k = b.shape
    ts = np.zeros((n, k))
    for voxel in prange(n):
        var = mse[voxel] * vinv.copy()
        se = np.sqrt(np.diag(var))
        ts[voxel, :] = b[voxel, :] / se
    return np.sum(ts ** 2)


def standardized_jax(mse, vinv, b):
    return jnp.sum(b ** 2 / (mse[:, None] * jnp.diag(vinv)))


def _voxel_args(rng):
    x = rng.standard_normal((12, 4))
    return rng.uniform(0.5, 1.5, 30), x.T @ x + np.eye(4), rng.standard_normal((30, 4))


program(FAMILY, "voxel-t-statistics", standardized, standardized_jax, _voxel_args, transforms=SMOOTH)
program(FAMILY, "voxel-t-statistics-wrt-covariance", standardized, standardized_jax, _voxel_args, wrt=(1,),
        transforms=SMOOTH)


# ------------------------------------------------------------------ seed 003's remote_stats loss (np.linalg.inv)
@njit(parallel=True)
def remote_loss(mse, v, b):
    n, k = b.shape
    ts = np.zeros((n, k))
    for voxel in prange(n):
        var = mse[voxel] * np.linalg.inv(v)
        ts[voxel, :] = b[voxel, :] / np.sqrt(np.diag(var))
    return np.sum(ts ** 2)


def remote_loss_jax(mse, v, b):
    return jnp.sum(b ** 2 / (mse[:, None] * jnp.diag(jnp.linalg.inv(v))))


program(FAMILY, "remote-stats-loss", remote_loss, remote_loss_jax, _voxel_args, wrt=(0, 1, 2))


# ------------------------------------------------------------------ a copy of a constant array in each iteration
@njit(parallel=True)
def weighted_copy(x, v):
    s = 0.0
    for i in prange(x.shape[0]):
        c = v * 1.0
        s += np.sin(x[i]) * c[i % v.shape[0]] * c[0]
    return s


def weighted_copy_jax(x, v):
    return jnp.sum(jnp.sin(x) * v[jnp.arange(x.shape[0]) % v.shape[0]] * v[0])


def _copy_args(rng):
    return rng.uniform(-1.5, 1.5, 33), rng.standard_normal(5)


program(FAMILY, "constant-copied-per-iteration", weighted_copy, weighted_copy_jax, _copy_args, transforms=SMOOTH)


# ------------------------------------------------------------------ a reduction over shared weights
@njit(parallel=True)
def softmax_rows(x, w):
    n, k = x.shape[0], w.shape[1]
    total = 0.0
    for i in prange(n):
        z = np.empty(k)
        for c in range(k):
            acc = 0.0
            for d in range(x.shape[1]):
                acc += x[i, d] * w[d, c]
            z[c] = acc
        top = np.max(z)
        total += top + np.log(np.sum(np.exp(z - top))) - z[0]
    return total / n


def softmax_rows_jax(x, w):
    z = x @ w
    top = jnp.max(z, axis=1)
    return jnp.mean(top + jnp.log(jnp.sum(jnp.exp(z - top[:, None]), axis=1)) - z[:, 0])


def _softmax_args(rng):
    return rng.standard_normal((50, 4)), 0.5 * rng.standard_normal((4, 3))


program(FAMILY, "softmax-rows-wrt-weights", softmax_rows, softmax_rows_jax, _softmax_args, wrt=(1,),
        transforms=SMOOTH)


# ------------------------------------------------------------------ an O(n^2) pairwise energy
@njit(parallel=True)
def pairwise(x):
    e = 0.0
    for i in prange(x.shape[0]):
        for j in range(x.shape[0]):
            d = x[i] - x[j]
            e += 1.0 / (1.0 + d * d)
    return e


def pairwise_jax(x):
    d = x[:, None] - x[None, :]
    return jnp.sum(1.0 / (1.0 + d * d))


program(FAMILY, "pairwise-energy", pairwise, pairwise_jax, lambda rng: (rng.standard_normal(30),),
        transforms=SMOOTH)


# ------------------------------------------------------------------ a stencil step (array result)
@njit(parallel=True)
def stencil_step(u, k):
    out = np.empty_like(u)
    n = u.shape[0]
    for i in prange(n):
        left = u[i - 1] if i > 0 else u[i]
        right = u[i + 1] if i < n - 1 else u[i]
        out[i] = u[i] + k * (left - 2.0 * u[i] + right)
    return out


def stencil_step_jax(u, k):
    padded = jnp.concatenate([u[:1], u, u[-1:]])
    return u + k * (padded[:-2] - 2.0 * u + padded[2:])


program(FAMILY, "stencil-step", stencil_step, stencil_step_jax,
        lambda rng: (rng.standard_normal(40), 0.2), transforms=("jvp", "vjp"))
