"""Parallel derivatives are built with the types Enzyme deduces, not with loose types.

Every function whose loops the OpenMP rewrite forks reports a raise inside a loop through a flag
(``pyjlad/openmp_loops.py``: ``@pyjlad.omp.failed``) it combined with its status through an ``or``. Enzyme
could not type that ``or`` (of a load of an untyped global), stopped on it ("cannot handle unknown binary
operator"), and pyjlad retried with ``-enzyme-loose-types``: every parallel reverse and forward derivative was
built with loose types, which lose the adjoint through any float copy taken for integers (README, Limitations),
and only a reverse-mode gradient's first call was checked against finite differences. The status is chosen
with ``icmp`` and ``select`` now. A Hessian-vector product (reverse over the forward derivative) also stopped
on the shadow of the loop's steps (packed for the forward fork), which LLVM had zeroed with a ``memset``
Enzyme could not type: the steps and shape are hinted as integers.

Oracles: JAX (float64) grad, jvp and jvp of grad, from copies taken before the call; the Hessian-vector
products of all five kernels of ``benchmarks/parallel_gradients.py`` (remote_stats, pairwise, stencil, heat2d,
classifier), built in parallel, against ``jax.jvp`` of ``jax.grad``.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit
from test_private_adjoints import cross  # (sum of sin(x[i] * y[j]): two arrays every row reads)

import pyjlad
from pyjlad.activity import Activity
from pyjlad.engines import compiled_sweep
from pyjlad.errors import ParallelFallbackWarning
from pyjlad.export import numba_argtypes
from pyjlad.sweep import Sweep

jax.config.update("jax_enable_x64", True)


def cross_jax(x, y):
    return jnp.sum(jnp.sin(x[:, None] * y[None, :]))


def _built(f, args, mode):
    """The sweep pyjlad builds for ``args`` in ``mode`` (its Enzyme build), every argument differentiated;
    ``mode="hvp"``: the Hessian-vector product with respect to the first argument."""
    sweep = Sweep("hvp", "reverse", (), 0) if mode == "hvp" else Sweep("ad", mode, (Activity.DUP,) * len(args))
    compiled = compiled_sweep(f, sweep, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)  # the parallel derivative, not the serial one
        return compiled._build_once(numba_argtypes(args))


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_parallel_derivatives_need_no_loose_types(parallel_two_threads, mode) -> None:
    fresh = njit(parallel=True)(cross.py_func)  # its own derivatives, built here
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=60), rng.normal(size=45)
    assert not _built(fresh, (x, y), mode).loose_types


@pytest.mark.parametrize("kernel", ["classifier"])
def test_benchmark_kernels_need_no_loose_types(parallel_two_threads, parallel_kernels, kernel) -> None:
    rng = np.random.default_rng(12)
    args = (rng.normal(size=(10, 32)), rng.normal(size=(50, 32)), rng.integers(0, 10, 50))
    f = njit(parallel=True)(getattr(parallel_kernels, kernel).py_func)
    compiled = compiled_sweep(f, Sweep("ad", "reverse", (Activity.DUP,)), None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        assert not compiled._build_once(numba_argtypes(args)).loose_types


@pytest.mark.parametrize("wrt", [(1,), (0, 1)])
def test_gradients_and_tangents_against_jax(parallel_two_threads, wrt) -> None:
    rng = np.random.default_rng(13)
    x, y = rng.normal(size=70), rng.normal(size=33)
    x0, y0 = x.copy(), y.copy()
    want = jax.grad(cross_jax, argnums=wrt)(jnp.asarray(x0), jnp.asarray(y0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        got = pyjlad.grad(cross, wrt=wrt)(x, y)
        tx, ty = rng.normal(size=x.shape), rng.normal(size=y.shape)
        _, tangent = pyjlad.jvp(cross, (x, y), (tx, ty))
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-12)
    _, jax_tangent = jax.jvp(cross_jax, (jnp.asarray(x0), jnp.asarray(y0)), (jnp.asarray(tx), jnp.asarray(ty)))
    np.testing.assert_allclose(tangent, float(jax_tangent), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


def stencil_jax(u, k):
    out = jnp.zeros_like(u).at[1:-1].set(u[1:-1] + k * (u[:-2] - 2.0 * u[1:-1] + u[2:]))
    return jnp.sum(out * out)


def pairwise_jax(x):
    d = x[:, None] - x[None, :]
    return jnp.sum(1.0 / (1.0 + d * d))


@pytest.mark.parametrize("kernel", ["pairwise", "stencil"])
def test_hessian_vector_products_need_no_loose_types(parallel_two_threads, parallel_kernels, kernel) -> None:
    rng = np.random.default_rng(14)
    args = (rng.uniform(-2, 2, 40),) if kernel == "pairwise" else (rng.normal(size=40), 0.3)
    f = njit(parallel=True)(getattr(parallel_kernels, kernel).py_func)
    assert not _built(f, args, "hvp").loose_types


@pytest.mark.parametrize("kernel", ["pairwise", "stencil"])
def test_hessian_vector_products_against_jax(parallel_two_threads, parallel_kernels, kernel) -> None:
    rng = np.random.default_rng(15)
    args = (rng.uniform(-2, 2, 64),) if kernel == "pairwise" else (rng.normal(size=64), 0.3)
    v = rng.normal(size=64)
    x0, v0 = args[0].copy(), v.copy()
    oracle = pairwise_jax if kernel == "pairwise" else stencil_jax
    rest = args[1:]
    _, want = jax.jvp(lambda x: jax.grad(oracle)(x, *rest), (jnp.asarray(x0),), (jnp.asarray(v0),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        got = pyjlad.hvp(getattr(parallel_kernels, kernel), args, v)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-11, atol=1e-11)
    np.testing.assert_array_equal(args[0], x0)
    np.testing.assert_array_equal(v, v0)


def _benchmark_case(kernel, rng):
    """Small arguments for ``benchmarks/parallel_gradients.py``'s ``kernel``."""
    if kernel == "heat2d":
        return (rng.normal(size=(12, 11)), 0.1)
    if kernel == "classifier":
        return (rng.normal(size=(4, 6)) / 2, rng.normal(size=(30, 6)), rng.integers(0, 4, 30))
    x = rng.normal(size=(40, 8))
    return (rng.uniform(0.5, 1.5, 25), x.T @ x, rng.normal(size=(25, 8)))


@pytest.mark.parametrize("kernel", ["heat2d", "classifier", "remote_stats"])
def test_hessian_vector_products_of_the_other_benchmark_kernels_against_jax(parallel_two_threads, parallel_kernels,
                                                                           kernel) -> None:
    """The first argument's (the grid, the weights, remote_stats' ``mse``) Hessian times ``v``, built in
    parallel, against ``jax.jvp`` of ``jax.grad`` of the benchmark's JAX twins."""
    rng = np.random.default_rng(16)
    args = _benchmark_case(kernel, rng)
    v = rng.normal(size=args[0].shape)
    copies, v0 = [np.copy(a) for a in args], v.copy()
    _, twins = parallel_kernels._jax_twins()
    oracle = twins[kernel][0]
    rest = [jnp.asarray(a) for a in copies[1:]]
    _, want = jax.jvp(lambda x: jax.grad(oracle)(x, *rest), (jnp.asarray(copies[0]),), (jnp.asarray(v0),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        f = parallel_kernels.remote_loss if kernel == "remote_stats" else getattr(parallel_kernels, kernel)
        got = pyjlad.hvp(f, args, v)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-11)
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(v, v0)
