"""Parallel derivatives of time loops whose steps are parallel loops, and of arrays only copied between them.

Before: the caller of a parallel loop only copied an array it passed the loop (``un = u.copy()`` in a serial
``for t in range(steps)``, the steps a ``prange`` stencil, then ``np.sum(u * u)``), so Enzyme, which does not
follow the pointers Numba passes a loop through memory, could not type the copy; neither could it a copy inside
a loop's body (LLVM makes ``u * 1.0`` a ``memcpy`` at an offset loaded from Numba's schedule). With loose types,
the last resort, it took the doubles for integers: the adjoint through every such copy was lost, the
gradient silently wrong (zero where only the copy carried it), at every thread count. Checked against JAX
(float64) and closed forms from copies taken before the calls, the caller's arrays unchanged.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
from tests.parallel_checks import parallel_grad

THREADS = (1, 2)
SIZES = (7, 64, 1001)


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@njit(parallel=True)
def heat_steps(u0, k, steps):
    u = u0.copy()
    n = u.shape[0]
    for _ in range(steps):
        un = u.copy()  # the boundary keeps its values: only the copy carries their adjoint
        for i in prange(1, n - 1):
            un[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def _heat_twin(jnp):
    def f(u, k, steps):
        for _ in range(steps):
            u = u.at[1:-1].set(u[1:-1] + k * (u[:-2] - 2.0 * u[1:-1] + u[2:]))
        return jnp.sum(u * u)
    return f


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("steps", [1, 3])
def test_heat_steps_against_jax(threads: int, n: int, steps: int) -> None:
    jax = _jax()
    u = np.random.default_rng(n).uniform(-1.0, 1.0, n)
    want_u, want_k = jax.grad(_heat_twin(jax.numpy), argnums=(0, 1))(jax.numpy.asarray(u.copy()), 0.2, steps)
    numba.set_num_threads(threads)
    gu, gk = parallel_grad(heat_steps, (u, 0.2, steps), (0, 1))
    np.testing.assert_allclose(gu, np.asarray(want_u), rtol=1e-12, atol=1e-13)
    assert gk == pytest.approx(float(want_k), rel=1e-11)


@pytest.mark.parametrize("threads", THREADS)
def test_heat_steps_tangent_against_jax(threads: int) -> None:
    jax = _jax()
    rng = np.random.default_rng(5)
    u, t = rng.uniform(-1.0, 1.0, 64), rng.normal(size=64)
    twin = _heat_twin(jax.numpy)
    _, want = jax.jvp(lambda v: twin(v, 0.2, 3), (jax.numpy.asarray(u.copy()),), (jax.numpy.asarray(t.copy()),))
    numba.set_num_threads(threads)
    u0, t0 = u.copy(), t.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        _, got = pyjlad.jvp(heat_steps, (u, 0.2, 3), (t, None, None))
    assert got == pytest.approx(float(want), rel=1e-12)
    np.testing.assert_array_equal(u, u0)
    np.testing.assert_array_equal(t, t0)


@njit(parallel=True)
def copied_in_a_loop(u0, steps):
    u = u0
    for _ in range(steps):
        u = u.copy()
    s = 0.0
    for i in prange(u.shape[0]):
        s += u[i] * u[i]
    return s


@njit(parallel=True)
def scaled_in_a_loop(u0, steps):
    u = u0
    for _ in range(steps):
        u = u * 1.0  # a parallel loop whose body LLVM makes a copy of the row
    s = 0.0
    for i in prange(u.shape[0]):
        s += u[i] * u[i]
    return s


@njit(parallel=True)
def copied_then_one_changed(u0, steps):
    u = u0.copy()
    for _ in range(steps):
        un = u.copy()
        un[0] = un[0] * 1.0
        u = un
    return np.sum(u * u)


@njit(parallel=True)
def scaled_once(u0, steps):
    v = u0 * 1.0
    return np.sum(v * v) + steps


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kernel", [copied_in_a_loop, scaled_in_a_loop, copied_then_one_changed, scaled_once],
                         ids=lambda f: f.__name__)
def test_copies_carry_the_adjoint(kernel, threads: int, n: int) -> None:
    """The sum of squares of ``u0`` after copies: its gradient is ``2 u0`` (closed form)."""
    u = np.random.default_rng(n).uniform(0.5, 1.5, n)
    want = 2.0 * u.copy()
    numba.set_num_threads(threads)
    for steps in (1, 2):
        (g,) = parallel_grad(kernel, (u, steps), (0,))
        np.testing.assert_allclose(g, want, rtol=1e-14, atol=0)
