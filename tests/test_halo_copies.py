"""Stencils in parallel loops: each thread reads a private copy of its rows and their halo (:mod:`pyjlad.row_offsets`).

Gradients with ``PYJLAD_PARALLEL_DERIVATIVES=1`` at 2 threads against closed forms and JAX (float64), computed
from copies taken before the call; the caller's arrays must come back unchanged.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import njit, prange
from parallel_checks import parallel_grad as _grad
from test_private_adjoints import neighbours  # (its kernel: u[i] times its two neighbours)

from pyjlad.private_adjoints import recording_loop_layouts

pytestmark = pytest.mark.usefixtures("parallel_two_threads")


@njit(parallel=True)
def wrapping(u, k):
    """Reads u[i - 1] from i = 0: Numba's u[-1], the last element (the halo reaches past the start)."""
    n = u.shape[0]
    out = np.zeros(n)
    for i in prange(n - 2):
        out[i] = u[i] - k * u[i - 1] + u[i + 2]
    return np.sum(out * out)


@njit(parallel=True)
def shifted(u, w):
    """Rows i + 1 and i + 2 only (no halo below), and a second array read at its own rows."""
    e = 0.0
    for i in prange(u.shape[0] - 2):
        e += w[i] * u[i + 2] * u[i + 1]
    return e


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _halos(f, args):
    layouts = {}
    with recording_loop_layouts(layouts):
        njit(parallel=True)(f.py_func)(*args)
    return sorted(a.halo for layout in layouts.values() for a in layout.candidates if not a.in_place)


def test_halos_found_from_the_loop_body(parallel_kernels):
    heat2d = parallel_kernels.heat2d  # (the benchmark's: one step of the 2-D heat equation, 5-point stencil)
    x = np.ones(10)
    assert _halos(neighbours, (x,)) == [(1, 1)]
    assert _halos(wrapping, (x, 0.5)) == [(1, 2)]
    assert _halos(heat2d, (np.ones((4, 5)), 0.1)) == [(1, 1)]  # u[i, j +- 1]: its own rows
    assert _halos(shifted, (x, x)) == [(0, 2)]  # w[i] alone: its own rows, no copy


def test_neighbours_closed_form():
    u = np.random.default_rng(1).normal(size=1001)
    u0 = u.copy()
    (g,) = _grad(neighbours, (u,), (0,))
    want = np.zeros_like(u0)
    inner = slice(1, -1)
    want[inner] += u0[:-2] + u0[2:]
    want[:-2] += u0[inner]
    want[2:] += u0[inner]
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [3, 4, 5, 64, 1000])
def test_halo_reaching_past_the_start_wraps_as_numba_does(n):
    jax = _jax()
    rng = np.random.default_rng(n)
    u = rng.normal(size=n)
    u0 = u.copy()
    (g,) = _grad(wrapping, (u, 0.3), (0,))

    def twin(v):
        out = v[:-2] - 0.3 * jax.numpy.roll(v, 1)[:-2] + v[2:]
        return jax.numpy.sum(out * out)

    np.testing.assert_allclose(g, np.asarray(jax.grad(twin)(u0)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["C", "F", "strided", "reversed"])
def test_heat2d_in_any_layout_against_jax(layout, parallel_kernels):
    heat2d = parallel_kernels.heat2d
    jax = _jax()
    rng = np.random.default_rng(7)
    base = rng.normal(size=(66, 42))
    u = {"C": np.ascontiguousarray(base[:33, :21]), "F": np.asfortranarray(base[:33, :21]),
         "strided": base[::2, ::2], "reversed": base[::-2, ::-2]}[layout]
    u0 = np.array(u)
    got = _grad(heat2d, (u, 0.2), (0, 1))

    def twin(v, k):
        c = v[1:-1, 1:-1]
        out = c + k * (v[:-2, 1:-1] + v[2:, 1:-1] + v[1:-1, :-2] + v[1:-1, 2:] - 4.0 * c)
        return jax.numpy.sum(out * out)

    want = jax.grad(twin, argnums=(0, 1))(u0, 0.2)
    np.testing.assert_allclose(got[0], np.asarray(want[0]), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(got[1], float(want[1]), rtol=1e-11)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_shifted_rows_against_jax(dtype):
    jax = _jax()
    rng = np.random.default_rng(8)
    u, w = rng.normal(size=501).astype(dtype), rng.normal(size=501).astype(dtype)
    u0, w0 = u.copy().astype(np.float64), w.copy().astype(np.float64)
    got = _grad(shifted, (u, w), (0, 1))
    want = jax.grad(lambda a, b: jax.numpy.sum(b[:-2] * a[2:] * a[1:-1]), argnums=(0, 1))(u0, w0)
    tol = 1e-11 if dtype == np.float64 else 2e-4
    for g, x in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, np.asarray(x), rtol=tol, atol=tol)


def test_equal_run_to_run_within_rounding_at_every_thread_count(parallel_kernels):
    """The halos of neighbouring threads overlap: their adjoints are added back atomically, in either order."""
    heat2d = parallel_kernels.heat2d
    u = np.random.default_rng(9).normal(size=(257, 31))
    first = _grad(heat2d, (u, 0.1), (0,))[0]
    for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
        numba.set_num_threads(threads)
        for _ in range(3):
            np.testing.assert_allclose(_grad(heat2d, (u, 0.1), (0,))[0], first, rtol=1e-13, atol=1e-13)


def test_rows_read_from_the_copy_add_plainly(tmp_path, monkeypatch):
    """Before, Enzyme added into u's adjoint with three atomic adds per cell (u[i - 1], u[i], u[i + 1], which
    neighbouring threads share). Now only the copy's adjoint added back into u's (once per element) is atomic,
    and the reduction's partial sums."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    fresh = njit(parallel=True)(neighbours.py_func)  # its own derivative, built (and dumped) here
    u = np.random.default_rng(10).normal(size=300)
    _grad(fresh, (u,), (0,))
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert len(outputs) == 1
    text = outputs[0].read_text()
    assert "@malloc(i64 %priv" in text
    assert text.count("atomicrmw fadd") == 2  # (before: the adds into u's adjoint were atomic as well)
