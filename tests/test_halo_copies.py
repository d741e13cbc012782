"""Stencils in parallel loops (:mod:`pyjlad.row_offsets`): an array read near each iteration's own rows is read in
place, each chunk's interior rows adding into its adjoint plainly and its edge rows atomically, in a second
parallel loop (:mod:`pyjlad.openmp_tasks`); an array neither C nor F contiguous only where its strides, checked at
run time, make its elements distinct (else every row adds atomically).

Gradients with ``PYJLAD_PARALLEL_DERIVATIVES=1`` at 2 threads against closed forms and JAX (float64), computed
from copies taken before the call; the caller's arrays must come back unchanged.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange
from parallel_checks import parallel_grad as _grad
from test_private_adjoints import _parallel_text, neighbours  # (its kernel: u[i] times its two neighbours)

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
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


@njit(parallel=True)
def from_minus_one(u, k):
    """Starts at i = -1: u[-1] is the last element, read by the first chunk (its rows must all add atomically)."""
    e = 0.0
    for i in prange(-1, u.shape[0] - 2):
        e += u[i] * (u[i + 1] - k * u[i + 2])
    return e


@njit(parallel=True)
def two_halos(a, b):
    """Two arrays with halos of their own: a two rows below, b one above (each chunk's edges: two below, one above)."""
    out = np.zeros(a.shape[0])
    for i in prange(2, a.shape[0] - 1):
        out[i] = a[i - 2] * b[i + 1] + a[i] * b[i]
    return np.sum(out * out)


@njit(parallel=True)
def stencil_step(u, k):
    """An array result: the stencil's step itself (pyjlad's wrapper writing it has the loop inlined)."""
    n = u.shape[0]
    out = np.zeros(n)
    for i in prange(1, n - 1):
        out[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    return out


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def wrapping_twin(v, k):
    """:func:`wrapping` in ``jax.numpy`` (``u[i - 1]`` at ``i = 0`` is the last element)."""
    jnp = _jax().numpy
    out = v[:-2] - k * jnp.roll(v, 1)[:-2] + v[2:]
    return jnp.sum(out * out)


def shifted_twin(x, y):
    """:func:`shifted` in ``jax.numpy``."""
    return _jax().numpy.sum(y[:-2] * x[2:] * x[1:-1])


def from_minus_one_twin(v, k):
    """:func:`from_minus_one` in ``jax.numpy``."""
    i = np.arange(-1, v.shape[0] - 2)
    return _jax().numpy.sum(v[i] * (v[i + 1] - k * v[i + 2]))


def two_halos_twin(x, y):
    """:func:`two_halos` in ``jax.numpy``."""
    inner = x[:-3] * y[3:] + x[2:-1] * y[2:-1]
    return _jax().numpy.sum(inner * inner)


def heat2d_twin(v, k):
    """``parallel_gradients.heat2d`` in ``jax.numpy``."""
    c = v[1:-1, 1:-1]
    out = c + k * (v[:-2, 1:-1] + v[2:, 1:-1] + v[1:-1, :-2] + v[1:-1, 2:] - 4.0 * c)
    return _jax().numpy.sum(out * out)


def _halos(f, args):
    layouts = {}
    with recording_loop_layouts(layouts):
        njit(parallel=True)(f.py_func)(*args)
    return sorted(a.halo for layout in layouts.values() for a in layout.candidates if a.halo is not None)


def test_halos_found_from_the_loop_body(parallel_kernels):
    heat2d = parallel_kernels.heat2d  # (the benchmark's: one step of the 2-D heat equation, 5-point stencil)
    x = np.ones(10)
    assert _halos(neighbours, (x,)) == [(1, 1)]
    assert _halos(wrapping, (x, 0.5)) == [(1, 2)]
    assert _halos(heat2d, (np.ones((4, 5)), 0.1)) == [(1, 1)]  # u[i, j +- 1]: its own rows
    assert _halos(shifted, (x, x)) == [(0, 2)]  # w[i] alone: its own rows (test_own_elements)
    assert _halos(two_halos, (x, x)) == [(0, 1), (2, 0)]


def test_stencil_arrays_read_in_place_in_every_layout():
    """C and F arrays, and strided or reversed views whose strides are checked at run time (``distinct``)."""
    x = np.ones(10)
    for args, checked in [((x,), 0), ((x[::2],), 1), ((x[::-1],), 1)]:
        text = _parallel_text(neighbours, args)
        assert text.count("@malloc(i64 %priv") == 0 and text.count("call void @pyjlad.omp.split(") == 1
        assert text.count("%priv1.distinct = ") == checked


@njit(parallel=True)
def broadcast_neighbours(x):
    """Reads a zero-stride view (every element the same memory) as a stencil: its rows must not add plainly."""
    n = x.shape[0]
    row = np.empty(1)
    row[0] = np.sum(x)
    w = np.broadcast_to(row, (n,))
    e = 0.0
    for i in prange(1, n - 1):
        e += w[i - 1] * w[i + 1] * x[i]
    return e


def test_view_whose_elements_share_memory_adds_atomically():
    """Every element of ``w`` is one double: each thread's interior rows add into the same adjoint element, so
    the run-time check sends them through the body as Numba compiled it (atomic adds). With the check made
    always true, a run on 2 free cores got a relative error of 1.6 (issue 17's note of 2026-12-01).
    e = s^2 sum_{0 < i < n-1} x_i with s = sum(x): de/dx_j = 2 s sum_{0 < i < n-1} x_i + s^2 [0 < j < n-1]."""
    x = np.random.default_rng(5).normal(size=20001)
    x0 = x.copy()
    s, inner = x0.sum(), x0[1:-1].sum()
    want = np.full(x0.shape, 2.0 * s * inner)
    want[1:-1] += s * s
    for _ in range(20):
        (g,) = _grad(broadcast_neighbours, (x,), (0,))
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_array_equal(x, x0)


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
    np.testing.assert_allclose(g, np.asarray(jax.grad(wrapping_twin)(u0, 0.3)), rtol=1e-12, atol=1e-12)


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
    want = jax.grad(heat2d_twin, argnums=(0, 1))(u0, 0.2)
    np.testing.assert_allclose(got[0], np.asarray(want[0]), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(got[1], float(want[1]), rtol=1e-11)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_shifted_rows_against_jax(dtype):
    jax = _jax()
    rng = np.random.default_rng(8)
    u, w = rng.normal(size=501).astype(dtype), rng.normal(size=501).astype(dtype)
    u0, w0 = u.copy().astype(np.float64), w.copy().astype(np.float64)
    got = _grad(shifted, (u, w), (0, 1))
    want = jax.grad(shifted_twin, argnums=(0, 1))(u0, w0)
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


@pytest.mark.parametrize("n", [3, 4, 7, 1000])
def test_loop_from_minus_one_wraps_as_numba_does(n):
    jax = _jax()
    u = np.random.default_rng(n).normal(size=n)
    u0 = u.copy()
    (g,) = _grad(from_minus_one, (u, 0.4), (0,))
    np.testing.assert_allclose(g, np.asarray(jax.grad(from_minus_one_twin)(u0, 0.4)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [4, 5, 6, 9, 2001])
def test_two_halos_against_jax(n):
    jax = _jax()
    rng = np.random.default_rng(n)
    a, b = rng.normal(size=n), rng.normal(size=n)
    a0, b0 = a.copy(), b.copy()
    got = _grad(two_halos, (a, b), (0, 1))
    want = jax.grad(two_halos_twin, argnums=(0, 1))(a0, b0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-12)


def _reaching(below: int, above: int):
    """``e += a[i - below] * a[i + above] * a[i]`` over ``prange(below, n - above)``: a halo of ``(below, above)``."""
    source = (f"def reaching(a):\n    e = 0.0\n    for i in prange({below}, a.shape[0] - {above}):\n"
              f"        e += a[i - {below}] * a[i + {above}] * a[i]\n    return e\n")
    scope = {"prange": prange}
    exec(source, scope)  # (the offsets must be constants in the source for the halo to be found)
    return njit(parallel=True)(scope["reaching"])


@pytest.mark.parametrize("below, above", [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (0, 3), (3, 0)])
def test_edges_of_every_width_closed_form(below, above):
    """Both edges of a chunk run in one task, each its own call of the body: with one array of the body's arguments
    shared by the two calls, Enzyme's reverse of the first read the second's bounds (garbage where the edges'
    widths differ: (1, 2), (2, 1), ...)."""
    f = _reaching(below, above)
    for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
        numba.set_num_threads(threads)
        for n in (below + above + 1, below + above + 3, 10, 37):
            a = np.arange(1.0, n + 1.0)
            want = np.zeros(n)
            for i in range(below, n - above):
                want[i - below] += a[i + above] * a[i]
                want[i + above] += a[i - below] * a[i]
                want[i] += a[i - below] * a[i + above]
            for _ in range(3):
                np.testing.assert_allclose(_grad(f, (a,), (0,))[0], want, rtol=1e-13)


@pytest.mark.parametrize("n", [3, 4, 5, 50, 1001])
def test_array_result_vjp_closed_form(n):
    rng = np.random.default_rng(n)
    u, c = rng.normal(size=n), rng.normal(size=n)
    u0, c0 = u.copy(), c.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        value, (gu, gk) = pyjlad.vjp(stencil_step, (u, 0.3), c)
    inner = c0[1:-1]
    want = np.zeros(n)
    want[1:-1] += (1.0 - 0.6) * inner
    want[:-2] += 0.3 * inner
    want[2:] += 0.3 * inner
    np.testing.assert_allclose(gu, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(gk, np.sum(inner * (u0[:-2] - 2.0 * u0[1:-1] + u0[2:])), rtol=1e-12)
    np.testing.assert_array_equal(u, u0)
    np.testing.assert_array_equal(c, c0)


def test_interior_rows_add_plainly(tmp_path, monkeypatch):
    """Before, Enzyme added into u's adjoint with three atomic adds per cell (u[i - 1], u[i], u[i + 1], which
    neighbouring threads share), then into a private copy's adjoint added back atomically. Now the reverse of
    the interior rows' loop adds atomically only into the reduction's partial sums; the body as Numba compiled
    it, which the edge rows run, keeps its atomic adds into u's adjoint."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    fresh = njit(parallel=True)(neighbours.py_func)  # its own derivative, built (and dumped) here
    u = np.random.default_rng(10).normal(size=300)
    _grad(fresh, (u,), (0,))
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert len(outputs) == 1
    atomics: dict[str, int] = {}
    function = ""
    for line in outputs[0].read_text().splitlines():
        if line.startswith("define "):
            function = line.split("@", 1)[1].split("(")[0]
        atomics[function] = atomics.get(function, 0) + ("atomicrmw fadd" in line)
    assert atomics["diffepyjlad.omp.task.0.interior"] == 1
    assert max(n for f, n in atomics.items() if f.startswith("diffe__gufunc__")) >= 3
    assert "@malloc(i64 %priv" not in outputs[0].read_text()


@njit(parallel=True)
def stencil3d(u, k):
    """A stencil along the first of three axes, nonlinear."""
    n, m, p = u.shape
    out = np.zeros((n, m, p))
    for i in prange(1, n - 1):
        for j in range(m):
            for q in range(p):
                out[i, j, q] = u[i, j, q] + k * (u[i - 1, j, q] - 2.0 * u[i, j, q] + u[i + 1, j, q]) * u[i, j, q]
    return np.sum(out * out)


@pytest.mark.parametrize("view", ["strided", "reversed", "transposed"])
def test_three_dimensional_views_against_jax(view):
    """Strided and reversed views nest (in place, split); a transposed one nests in neither order, so its rows
    add atomically: every one right, its gradient and its Hessian-vector product."""
    jax = _jax()
    rng = np.random.default_rng(12)
    base = rng.normal(size=(30, 14, 9))
    u = {"strided": base[:, ::2, :], "reversed": base[::-1, :, ::-2], "transposed": base.transpose(1, 0, 2)}[view]
    u0, t = np.array(u), rng.normal(size=u.shape)

    def twin(w, k):
        c = w[1:-1]
        out = c + k * (w[:-2] - 2.0 * c + w[2:]) * c
        return jax.numpy.sum(out * out)

    (g,) = _grad(stencil3d, (u, 0.3), (0,))
    np.testing.assert_allclose(g, np.asarray(jax.grad(twin)(u0, 0.3)), rtol=1e-12, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        h = pyjlad.hvp(stencil3d, (u, 0.3), t)
    want = jax.jvp(jax.grad(twin), (u0, 0.3), (t.copy(), 0.0))[1]
    np.testing.assert_allclose(h, np.asarray(want), rtol=1e-12, atol=1e-12 * np.abs(np.asarray(want)).max())
    np.testing.assert_array_equal(u, u0)
