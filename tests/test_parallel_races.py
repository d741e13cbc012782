"""Parallel derivatives (``PYJLAD_PARALLEL_DERIVATIVES``, issue 17) of ``prange`` bodies whose adjoints Enzyme
does not accumulate with its own atomic adds in LLVM IR.

* BLAS: Enzyme differentiates ``S @ x`` / ``np.dot`` by its BLAS rules, which add into the adjoint of the
  shared ``S`` with BLAS itself (``cblas_dger``), not atomically: two threads lost each other's updates
  (``dS`` wrong in up to 42 of 200 runs, by up to 36%). Such loops kept the serial derivative; now the parallel
  derivative's module computes Numba's BLAS helpers as loops (``pyjlad/blas_loops.py``), whose adds into
  ``dS`` are Enzyme's own atomic ones, into a thread's private copy of ``S`` where it is read-only.
* Copies: the reverse of ``w.copy()`` adds into ``w``'s adjoint with atomic adds of unknown alignment,
  which LLVM compiles into calls of ``libatomic``; without it loaded, the JIT stopped the process.

Oracles: hand-derived closed forms, computed from copies of the inputs taken before the calls.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad.errors import ParallelFallbackWarning

rng = np.random.default_rng(17)


@njit(parallel=True)
def tanh_of_shared_matrix_times_rows(x, s):
    total = 0.0
    for i in prange(x.shape[0]):
        total += np.sum(np.tanh(s @ x[i]))
    return total


@njit(parallel=True)
def quadratic_forms(x, s):
    total = 0.0
    for i in prange(x.shape[0]):
        xi = x[i]
        total += np.dot(xi, s @ xi)
    return total


@njit(parallel=True)
def shared_vector_dot(x, w):
    total = 0.0
    for i in prange(x.shape[0]):
        total += np.tanh(np.dot(w, x[i]))
    return total


@njit(parallel=True)
def shared_vector_matmul(x, w):
    total = 0.0
    for i in prange(x.shape[0]):
        total += np.tanh(w @ x[i])
    return total


@njit(parallel=True)
def row_block_times_shared_matrix(x, w):
    total = 0.0
    for i in prange(x.shape[0]):
        h = x[i:i + 1, :] @ w   # (1 x d) @ (d x k): a matrix product (gemm)
        total += np.sum(h * h)
    return total


@njit(parallel=True)
def rows_times_shared_matrix(x, w):
    total = 0.0
    for i in prange(x.shape[0]):
        total += np.sum(np.tanh(x[i] @ w))  # (d,) @ (d x k): a matrix-vector product, the matrix transposed
    return total


@njit(parallel=True)
def transposed_shared_matrix_times_rows(x, s):
    total = 0.0
    for i in prange(x.shape[0]):
        total += np.sum(np.tanh(s.T @ x[i]))  # s.T: Fortran-ordered, the other transpose flag
    return total


def _cases():
    x = rng.normal(size=(60, 8))
    s, w = rng.normal(size=(5, 8)) / 3, rng.normal(size=8) / 3
    sq = rng.normal(size=(8, 8))
    wm = rng.normal(size=(8, 3))
    return {
        "tanh(S @ x_i)": (tanh_of_shared_matrix_times_rows, (x, s), "matrix-vector",
                          lambda: ((1 - np.tanh(x @ s.T) ** 2).T @ x)),
        "x_i . (S @ x_i)": (quadratic_forms, (x, sq), "matrix-vector", lambda: x.T @ x),
        "x_i W (2-D)": (row_block_times_shared_matrix, (x, wm), "matrix product", lambda: 2 * x.T @ (x @ wm)),
        "tanh(x_i @ W)": (rows_times_shared_matrix, (x, wm), "matrix-vector",
                          lambda: x.T @ (1 - np.tanh(x @ wm) ** 2)),
        "tanh(S.T @ x_i)": (transposed_shared_matrix_times_rows, (x, sq[:, :5].copy()), "matrix-vector",
                            lambda: x.T @ (1 - np.tanh(x @ sq[:, :5]) ** 2)),
        # Numba's parfor pass turns np.dot of two vectors into a loop: no BLAS, parallel with Enzyme's atomics
        "tanh(w . x_i)": (shared_vector_dot, (x, w), None, lambda: x.T @ (1 - np.tanh(x @ w) ** 2)),
        # while w @ x_i of two vectors stays a BLAS call (ddot)
        "tanh(w @ x_i)": (shared_vector_matmul, (x, w), "a dot product of two vectors with @",
                          lambda: x.T @ (1 - np.tanh(x @ w) ** 2)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_blas_with_a_shared_operand_differentiates_in_parallel_without_a_race(parallel_on, name: str) -> None:
    f, args, _construct, closed_form = _cases()[name]
    copies = [a.copy() for a in args]
    want = closed_form()
    numba.set_num_threads(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ParallelFallbackWarning)
        first = pyjlad.gradient(f, *args, wrt=1)
    assert not [str(w.message) for w in caught if issubclass(w.category, ParallelFallbackWarning)]
    for _ in range(40):  # Enzyme's BLAS rules got dS wrong in some of these runs (a race: by up to 36%)
        got = pyjlad.gradient(f, *args, wrt=1)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, first, rtol=1e-13, atol=1e-14)  # atomic adds: their order varies
    numba.set_num_threads(1)
    np.testing.assert_allclose(pyjlad.gradient(f, *args, wrt=1), want, rtol=1e-12, atol=1e-12)
    # forward mode, in parallel too (Enzyme's forward BLAS rules failed inside the parallel loop): along a
    # direction of the shared operand, the closed-form gradient's dot product with it
    direction = rng.normal(size=args[1].shape)
    for threads in (1, 2):
        numba.set_num_threads(threads)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ParallelFallbackWarning)
            _, tangent = pyjlad.jvp(f, args, (None, direction))
        np.testing.assert_allclose(tangent, np.sum(want * direction), rtol=1e-12, atol=1e-12)
    for a, a0 in zip(args, copies):
        np.testing.assert_array_equal(a, a0)


def test_float32_matrix_vector_products_in_parallel(parallel_on) -> None:
    # the float32 helpers' loops (numba_xxgemv.s): against the closed form in float64
    x = rng.normal(size=(60, 8)).astype(np.float32)
    s = (rng.normal(size=(5, 8)) / 3).astype(np.float32)
    x0, s0 = x.copy(), s.copy()
    want = (1 - np.tanh(x0.astype(np.float64) @ s0.T.astype(np.float64)) ** 2).T @ x0.astype(np.float64)
    for threads in (1, 2):
        numba.set_num_threads(threads)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ParallelFallbackWarning)
            got = pyjlad.gradient(tanh_of_shared_matrix_times_rows, x, s, wrt=1)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(s, s0)


def test_no_blas_is_found_in_loops_without_it() -> None:
    from pyjlad.blas_loops import blas_in_parallel_loops
    from pyjlad.openmp_loops import EXAMPLE, openmp_parallel_loops

    assert blas_in_parallel_loops(openmp_parallel_loops(EXAMPLE)) == []


@njit(parallel=True)
def copies_a_shared_array(x, w):
    s = 0.0
    for i in prange(x.shape[0]):
        t = w.copy()
        s += t[0] * x[i] + t[1] * t[1]
    return s


def test_copy_of_a_shared_array_in_a_prange_loop(parallel_on) -> None:
    x, w = np.arange(1.0, 5.0), np.array([2.0, 3.0])
    n = x.shape[0]
    for threads in (1, 2):
        numba.set_num_threads(threads)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ParallelFallbackWarning)
            gx, gw = pyjlad.gradient(copies_a_shared_array, x, w, wrt=(0, 1))
        np.testing.assert_allclose(gx, np.full(n, w[0]), rtol=1e-15)
        np.testing.assert_allclose(gw, [x.sum(), 2 * n * w[1]], rtol=1e-15)
    np.testing.assert_array_equal(w, [2.0, 3.0])
    np.testing.assert_array_equal(x, np.arange(1.0, 5.0))


@njit(parallel=True)
def complex_waves(x):
    n = x.shape[0]
    z = np.empty(n, dtype=np.complex128)
    for i in prange(n):
        z[i] = np.exp(1j * x[i]) * x[i]
    w = z.copy()
    a = np.empty(n)
    b = np.empty(n)
    for i in prange(n):
        a[i] = w[i].real
        b[i] = w[i].imag * x[(i + 1) % n]
    return a, b


def test_a_fallback_names_the_users_function_and_enzymes_reason(parallel_on) -> None:
    # Enzyme v0.0.289 cannot type the copy of a complex array made between two parallel loops (pyjlad tells it
    # the types of float and integer arrays only), and loose types would take it for integers: the function runs
    # serially, and the warning names the function (not pyjlad's wrapper writing its tuple result) and Enzyme's
    # reason. (Before 2026-11-29, the loop reading x[(i + 1) % n] alone failed; it now runs in parallel.)
    x = np.linspace(-1.0, 1.0, 31)
    ca, cb = np.cos(np.arange(31.0)), np.sin(np.arange(31.0))
    copies = [x.copy(), ca.copy(), cb.copy()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ParallelFallbackWarning)
        _, (cx,) = pyjlad.vjp(complex_waves, (x,), (ca, cb))
    said = [str(m.message) for m in caught if issubclass(m.category, ParallelFallbackWarning)]
    assert len(said) == 1, said
    assert said[0].startswith("the derivative of complex_waves runs serially: Enzyme or the JIT failed")
    assert "no construct" not in said[0] and "cannot deduce type of copy" in said[0].lower(), said[0]
    x0, ca0, cb0 = copies
    imag = np.sin(x0) * x0
    want = (ca0 * (np.cos(x0) - x0 * np.sin(x0)) + cb0 * (np.sin(x0) + x0 * np.cos(x0)) * np.roll(x0, -1)
            + np.roll(cb0 * imag, 1))
    np.testing.assert_allclose(cx, want, rtol=1e-13, atol=1e-14)
    for a, a0 in zip((x, ca, cb), copies):
        np.testing.assert_array_equal(a, a0)


@njit(parallel=True)
def modulo_bins(x, w):
    out = np.zeros(4)
    for i in prange(x.shape[0]):
        out[i % 4] += w * x[i] ** 2  # iterations i and i + 4 write one element: a race
    return np.sum(out * out)


def test_a_loop_writing_an_element_other_iterations_write_keeps_the_serial_derivative(parallel_on) -> None:
    # Before: the function right in 200 of 200 runs on 2 threads, its parallel gradient wrong in 17-26 of 200.
    x = rng.normal(size=8)
    x0 = x.copy()
    out = np.zeros(4)
    np.add.at(out, np.arange(8) % 4, 0.9 * x0 ** 2)
    want = 2 * out[np.arange(8) % 4] * 0.9 * 2 * x0  # hand-derived: d/dx_i of sum(out**2)
    numba.set_num_threads(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ParallelFallbackWarning)
        first = pyjlad.gradient(modulo_bins, x, 0.9, wrt=0)
    said = [str(w.message) for w in caught if issubclass(w.category, ParallelFallbackWarning)]
    assert len(said) == 1 and "writes out at an index other iterations may write too" in said[0], said
    for _ in range(100):
        np.testing.assert_array_equal(pyjlad.gradient(modulo_bins, x, 0.9, wrt=0), first)
    np.testing.assert_allclose(first, want, rtol=1e-13)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("first", ["jvp", "hvp", "gradient"])
def test_the_racing_loop_is_refused_whichever_derivative_comes_first(parallel_on, first: str) -> None:
    """Every derivative of one function is refused the racing loop, in any order. Before: the parallel copy's loop
    layouts were recorded only when Numba first compiled it, so the second derivative built (a gradient after a
    ``jvp``) missed the refusal and ran the race, wrong in 12 of 50 runs on 2 threads (x of 4,000 elements)."""
    f = njit(parallel=True)(modulo_bins.py_func)  # a fresh function: its derivatives built in this order
    x = rng.normal(size=4000)
    x0 = x.copy()
    out = np.zeros(4)
    np.add.at(out, np.arange(x0.size) % 4, 0.9 * x0 ** 2)
    want = 2 * out[np.arange(x0.size) % 4] * 0.9 * 2 * x0  # hand-derived: d/dx_i of sum(out**2)
    calls = {"jvp": lambda: pyjlad.jvp(f, (x, 0.9), (np.ones_like(x), 0.0)),
             "hvp": lambda: pyjlad.hvp(f, (x, 0.9), np.ones_like(x)),
             "gradient": lambda: pyjlad.gradient(f, x, 0.9, wrt=0)}
    numba.set_num_threads(2)
    for name in (first, *(n for n in calls if n != first)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ParallelFallbackWarning)
            calls[name]()
        said = [str(w.message) for w in caught if issubclass(w.category, ParallelFallbackWarning)]
        assert len(said) == 1 and "other iterations may write too" in said[0], (name, said)
    for _ in range(30):
        np.testing.assert_allclose(pyjlad.gradient(f, x, 0.9, wrt=0), want, rtol=1e-12)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("write, shared", [
    ("out[i % 4] += x[i]", True), ("out[idx[i]] = x[i]", True), ("out[0] = x[i]", True),
    ("out[i] = x[i]", False), ("out[i + 1] = x[i]", False), ("out[2 * i] = x[i]", False),
    ("out[i, :] = x[i]", False), ("t = np.zeros(3)\n        t[0] = x[i]\n        out[i] = t[0]", False),
])
def test_shared_writes_found(write: str, shared: bool) -> None:
    from pyjlad.private_adjoints import recording_loop_layouts

    namespace: dict = {"np": np, "prange": prange}
    exec(f"def body(x, idx, out):\n    for i in prange(x.shape[0]):\n        {write}\n", namespace)  # noqa: S102
    kernel = njit(parallel=True)(namespace["body"])
    out = np.zeros((20, 3)) if "out[i, :]" in write else np.zeros(20)
    layouts: dict = {}
    with recording_loop_layouts(layouts):
        kernel(np.ones(8), np.arange(8), out)
    assert [layout.shared_writes for layout in layouts.values()] == [("out",) if shared else ()]
