"""Hessian-vector products of stencils in ``prange`` loops run in parallel (issue 17).

A loop reading the rows next to its own has its schedule's rows split, in the product's forward form as in
reverse mode (:func:`pyjlad.openmp_tasks.split_rows`): each chunk's interior rows in one parallel loop whose
reverse sweep adds into the adjoints plainly, its edge rows in a second one, atomically. Every product against
``jax.jvp`` of ``jax.grad`` (float64) or a closed form, computed from copies taken before the call, at every
thread count Numba has, a fallback to the serial derivative an error; the caller's arrays and the direction
must come back unchanged.
"""

from __future__ import annotations

import re

import numba
import numpy as np
import pytest
from numba import njit, prange
from test_halo_copies import (
    _reaching,
    from_minus_one,
    from_minus_one_twin,
    heat2d_twin,
    shifted,
    shifted_twin,
    two_halos,
    two_halos_twin,
    wrapping,
    wrapping_twin,
)
from test_parallel_derivatives import CASES, _in_parallel
from test_parallel_hvp import _jax_hvp

import pyjlad
from pyjlad.export import export, numba_argtypes
from pyjlad.openmp import libomp_path

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

pytestmark = [pytest.mark.skipif(libomp_path() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed"),
              pytest.mark.usefixtures("parallel_two_threads")]
THREADS = range(1, numba.config.NUMBA_NUM_THREADS + 1)


def _check(f, args, wrt: int, expected, v, tol: float = 1e-12) -> None:
    """The product at every thread count (split rows in its module, no fallback) equals ``expected``; the
    caller's arrays and ``v`` unchanged."""
    copies, v0 = [np.copy(a) for a in args], np.copy(v)
    module, why = export(f, numba_argtypes(args)).make_parallel_module("hvp")
    assert module is not None, why
    assert "@pyjlad.omp.split(" in module.text and re.search(r"@pyjlad\.omp\.fork\.\d+\.interior\.fwd", module.text)
    for threads in THREADS:
        got = _in_parallel(threads, lambda: pyjlad.hvp(f, args, v, wrt=wrt))
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * max(np.abs(expected).max(), 1.0))
        for a, c in zip(args, copies):
            np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(v, v0)


@pytest.mark.parametrize("n", [5, 64, 1001])
def test_stencil_case_against_jax(n: int) -> None:
    f, _, _, twin = CASES["stencil"]
    rng = np.random.default_rng(n)
    args, v = (rng.normal(size=n), 0.2), rng.normal(size=n)
    _check(f, args, 0, _jax_hvp(twin, (args[0].copy(), 0.2), 0, v.copy()), v)


@pytest.mark.parametrize("wrt", [0, 1])
def test_heat2d_against_jax(parallel_kernels, wrt: int) -> None:
    rng = np.random.default_rng(3 + wrt)
    u = rng.normal(size=(67, 23))
    args = (u, 0.2)
    v = rng.normal(size=u.shape) if wrt == 0 else 0.7

    _check(parallel_kernels.heat2d, args, wrt, _jax_hvp(heat2d_twin, (u.copy(), 0.2), wrt, np.copy(v)), v)


@pytest.mark.parametrize("layout", ["F", "strided", "reversed"])
def test_heat2d_in_other_layouts_against_jax(parallel_kernels, layout: str) -> None:
    """F order is read in place and split as C is; so are strided and reversed views, their strides checked at
    run time."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=(66, 42))
    u = {"F": np.asfortranarray(base[:33, :21]), "strided": base[::2, ::2], "reversed": base[::-2, ::-2]}[layout]
    v = rng.normal(size=u.shape)

    _check(parallel_kernels.heat2d, (u, 0.2), 0, _jax_hvp(heat2d_twin, (np.array(u), 0.2), 0, v.copy()), v)


@pytest.mark.parametrize("n", [3, 4, 7, 200])
def test_halo_reaching_past_the_start_against_jax(n: int) -> None:
    """u[i - 1] from i = 0 reads u[-1] (the first chunk's rows are all edges); from i = -1 likewise."""
    rng = np.random.default_rng(n)
    u, v = rng.normal(size=n), rng.normal(size=n)
    _check(wrapping, (u, 0.3), 0, _jax_hvp(wrapping_twin, (u.copy(), 0.3), 0, v.copy()), v)
    _check(from_minus_one, (u, 0.4), 0, _jax_hvp(from_minus_one_twin, (u.copy(), 0.4), 0, v.copy()), v)


@pytest.mark.parametrize("wrt", [0, 1])
def test_two_arrays_with_halos_of_their_own_against_jax(wrt: int) -> None:
    rng = np.random.default_rng(11 + wrt)
    a, b, v = rng.normal(size=301), rng.normal(size=301), rng.normal(size=301)
    _check(two_halos, (a, b), wrt, _jax_hvp(two_halos_twin, (a.copy(), b.copy()), wrt, v.copy()), v)
    _check(shifted, (a, b), wrt, _jax_hvp(shifted_twin, (a.copy(), b.copy()), wrt, v.copy()), v)


@pytest.mark.parametrize("below, above", [(1, 1), (1, 2), (2, 1), (3, 1), (0, 3), (3, 0)])
def test_edges_of_every_width_closed_form(below: int, above: int) -> None:
    """e = sum_i a[i - below] a[i + above] a[i]: (H v)_p sums, over the terms holding a_p, the term's other two
    factors each times v at the third's index. Edges of different widths each have their own rows' arguments."""
    f = _reaching(below, above)
    for n in (below + above + 1, below + above + 3, 10, 37):
        a = np.arange(1.0, n + 1.0)
        v = np.cos(np.arange(n))
        want = np.zeros(n)
        for i in range(below, n - above):
            p, q, r = i - below, i + above, i
            want[p] += v[q] * a[r] + a[q] * v[r]
            want[q] += v[p] * a[r] + a[p] * v[r]
            want[r] += v[p] * a[q] + a[p] * v[q]
        _check(f, (a,), 0, want, v, tol=1e-13)


def test_repeated_products_within_rounding(parallel_kernels) -> None:
    """Neighbouring chunks' edges add into the same elements atomically, in either order: equal within rounding."""
    u = np.random.default_rng(9).normal(size=(257, 31))
    v = np.random.default_rng(10).normal(size=u.shape)
    first = _in_parallel(1, lambda: pyjlad.hvp(parallel_kernels.heat2d, (u, 0.1), v))
    for threads in THREADS:
        for _ in range(5):
            got = _in_parallel(threads, lambda: pyjlad.hvp(parallel_kernels.heat2d, (u, 0.1), v))
            np.testing.assert_allclose(got, first, rtol=1e-13, atol=1e-13 * np.abs(first).max())


@njit(parallel=True)
def heat_steps(u0, k):
    """Six steps of a nonlinear 1-D stencil, each a parallel loop, the two grids swapped between steps."""
    n = u0.shape[0]
    u = u0.copy()
    v = np.zeros(n)
    for _ in range(6):
        for i in prange(1, n - 1):
            v[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.1 * u[i] ** 3
        u, v = v, u
    return np.sum(u * u)


def _heat_steps_twin(u0, k):
    u, v = u0, jnp.zeros_like(u0)
    for _ in range(6):
        v = v.at[1:-1].set(u[1:-1] + k * (u[:-2] - 2.0 * u[1:-1] + u[2:]) + 0.1 * u[1:-1] ** 3)
        u, v = v, u
    return jnp.sum(u * u)


@pytest.mark.parametrize("n", [7, 300])
@pytest.mark.parametrize("wrt", [0, 1])
def test_time_loop_of_stencil_steps_against_jax(n: int, wrt: int) -> None:
    """Enzyme keeps what each step's reverse needs across the steps' split loops."""
    rng = np.random.default_rng(n + wrt)
    u = rng.normal(size=n) * 0.5
    v = rng.normal(size=n) if wrt == 0 else 0.7
    _check(heat_steps, (u, 0.2), wrt, _jax_hvp(_heat_steps_twin, (u.copy(), 0.2), wrt, np.copy(v)), v)
