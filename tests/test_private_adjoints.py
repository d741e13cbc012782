"""Private copies of arrays every iteration of a parallel loop reads (:mod:`pyjlad.private_adjoints`).

Gradients with ``PYJLAD_PARALLEL_DERIVATIVES=1`` against closed forms and JAX (float64), computed from
copies taken before the call; the caller's arrays must come back unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit, prange
from parallel_checks import parallel_grad as _grad

import pyjlad
from pyjlad.openmp_loops import openmp_parallel_loops
from pyjlad.private_adjoints import ArrayLayout, private_copy, read_only_arguments

pytestmark = pytest.mark.usefixtures("parallel_two_threads")


@njit(parallel=True)
def cross(x, y):
    e = 0.0
    for i in prange(x.shape[0]):
        for j in range(y.shape[0]):
            e += np.sin(x[i] * y[j])
    return e


@njit(parallel=True)
def reversed_view(x):
    y = x[::-2]
    e = 0.0
    for i in prange(y.shape[0]):
        for j in range(y.shape[0]):
            e += y[i] * y[j] * y[j]
    return e


@njit(parallel=True)
def written_output(x):
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            s += x[j] * x[i]
        out[i] = s
    return out.sum()


def test_pairwise_closed_form(parallel_kernels):
    pairwise = parallel_kernels.pairwise
    x = np.random.default_rng(1).uniform(-2, 2, 301)
    x0 = x.copy()
    (g,) = _grad(pairwise, (x,), (0,))
    d = x0[:, None] - x0[None, :]
    h = -2 * d / (1 + d * d) ** 2
    np.testing.assert_allclose(g, h.sum(1) - h.sum(0), rtol=1e-12, atol=1e-12)


def test_pairwise_identical_run_to_run(parallel_kernels):
    pairwise = parallel_kernels.pairwise
    x = np.random.default_rng(2).uniform(-2, 2, 200)
    first = _grad(pairwise, (x,), (0,))[0]
    for _ in range(3):
        np.testing.assert_array_equal(_grad(pairwise, (x,), (0,))[0], first)


@pytest.mark.parametrize("wrt", [(0, 1), (0,), (1,)])
def test_two_shared_arrays_against_jax(wrt):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=150), rng.normal(size=97)
    x0, y0 = x.copy(), y.copy()
    got = _grad(cross, (x, y), wrt)
    want = jax.grad(lambda a, b: jax.numpy.sum(jax.numpy.sin(a[:, None] * b[None, :])), argnums=wrt)(x0, y0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-11, atol=1e-11)


def test_negative_strided_view():
    x = np.random.default_rng(4).normal(size=81)
    x0 = x.copy()
    (g,) = _grad(reversed_view, (x,), (0,))
    y = x0[::-2]
    s1, s2 = y.sum(), (y * y).sum()
    want = np.zeros_like(x0)
    want[::-2] = s2 + 2 * y * s1
    np.testing.assert_allclose(g, want, rtol=1e-11, atol=1e-11)


def test_loop_writing_an_array():
    x = np.random.default_rng(5).normal(size=64)
    x0 = x.copy()
    (g,) = _grad(written_output, (x,), (0,))  # (sum x)**2, the loop writing out[i]
    np.testing.assert_allclose(g, np.full(64, 2 * x0.sum()), rtol=1e-11)


def test_read_only_arguments():
    text = ("define void @k(ptr %args, ptr %dims, ptr %steps, ptr %data) {\n"
            "entry:\n  %s = getelementptr i8, ptr %args, i64 8\n  %a = load ptr, ptr %s, align 8\n"
            "  %t = getelementptr i8, ptr %args, i64 16\n  %b = load ptr, ptr %t, align 8\n"
            "  %p = getelementptr double, ptr %a, i64 3\n  %v = load double, ptr %p, align 8\n"
            "  store double %v, ptr %b, align 8\n  ret void\n}\n")
    assert read_only_arguments(text, "@k", [1, 2]) == {1}


def test_read_only_through_calls_and_blas_helpers():
    # args[1] reaches Numba's gemv as its matrix (read), through a function that only loads it; args[2] is
    # gemv's output (written); args[3] goes to a function that stores through it.
    text = "\n".join([
        "define void @k(ptr %args, ptr %dims, ptr %steps, ptr %data) {", "entry:",
        "  %s = getelementptr i8, ptr %args, i64 8", "  %a = load ptr, ptr %s, align 8",
        "  %t = getelementptr i8, ptr %args, i64 16", "  %b = load ptr, ptr %t, align 8",
        "  %u = getelementptr i8, ptr %args, i64 24", "  %c = load ptr, ptr %u, align 8",
        "  %r = call i32 @body(ptr %a, ptr %b)", "  call void @writes(ptr %c)", "  ret void", "}",
        "define i32 @body(ptr %m, ptr %y) {", "entry:", "  %first = load double, ptr %m, align 8",
        "  %r = call i32 @numba_xxgemv(i8 100, i8 116, i64 2, i64 2, ptr %m, ptr %m, i64 2, ptr %m, ptr %m, ptr %y)",
        "  ret i32 %r", "}",
        "define void @writes(ptr %p) {", "entry:", "  store double 0.0, ptr %p, align 8", "  ret void", "}",
        "declare i32 @numba_xxgemv(i8, i8, i64, i64, ptr, ptr, i64, ptr, ptr, ptr)", ""])
    assert read_only_arguments(text, "@k", [1, 2, 3]) == {1}


@njit(parallel=True)
def shared_matrix_with_array_expressions(x, s):
    e = 0.0
    for i in prange(x.shape[0]):
        z = s @ x[i]
        e += np.sum(np.exp(z - z.max()))  # array expressions: nested parfors in the loop's body
    return e


def test_a_body_with_nested_array_expressions_gets_its_copies():
    # Numba's statements of a nested parfor made the body's analysis fail (a KeyError): no copies at all
    x, s = np.ones((6, 3)), np.ones((2, 3))
    assert _parallel_text(shared_matrix_with_array_expressions, (x, s)).count("@malloc(i64 %priv") == 1


def test_private_copy_ir_and_unchanged_without_layouts():
    setup, prefix, release = private_copy(ArrayLayout(1, 8, (2,), (4,)), [ArrayLayout(2, 8, (3,), (5,))])
    assert prefix == "%priv1" and "@malloc(" in setup and "%priv1.ok = " in setup and "@free(" in release
    from pyjlad.openmp_loops import EXAMPLE
    assert "@malloc(" not in openmp_parallel_loops(EXAMPLE)


@njit(parallel=True)
def quadratic_forms(x, s):
    e = 0.0
    for i in prange(x.shape[0]):
        for a in range(x.shape[1]):
            for b in range(x.shape[1]):
                e += x[i, a] * s[a, b] * x[i, b]
    return e


@njit(parallel=True)
def neighbours(u):
    e = 0.0
    for i in prange(1, u.shape[0] - 1):
        e += u[i] * (u[i - 1] + u[i + 1])
    return e


def _parallel_text(f, args):
    from pyjlad.export import export, numba_argtypes

    module, why = export(f, numba_argtypes(args)).make_parallel_module()
    assert module is not None, why
    return module.text


def test_copies_made_only_for_arrays_read_across_iterations(parallel_kernels):
    pairwise = parallel_kernels.pairwise

    def copies(f, args):
        return _parallel_text(f, args).count("@malloc(i64 %priv")

    x = np.ones(10)
    assert copies(pairwise, (x,)) == 1  # x[j] in every iteration: copied per thread
    assert copies(neighbours, (x,)) == 0  # u[i - 1], u[i], u[i + 1]: in place, the rows split (test_halo_copies)
    assert copies(neighbours, (x[::2],)) == 0  # strided: in place too, its strides checked at run time
    assert copies(quadratic_forms, (np.ones((3, 2)), np.ones((2, 2)))) == 1  # s, not x (x[i, a]: row i)


@pytest.mark.parametrize("layout", ["C", "F", "strided", "reversed"])
def test_shared_matrix_in_any_layout_against_jax(layout):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(6)
    base = rng.normal(size=(5, 10))
    s = {"C": np.ascontiguousarray(base[:, :5]), "F": np.asfortranarray(base[:, :5]), "strided": base[:, ::2],
         "reversed": base[::-1, 9:4:-1]}[layout]
    x = rng.normal(size=(211, 5))
    x0, s0 = x.copy(), np.array(s)
    got = _grad(quadratic_forms, (x, s), (0, 1))
    want = jax.grad(lambda a, m: jax.numpy.einsum("ia,ab,ib->", a, m, a), argnums=(0, 1))(x0, s0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-11, atol=1e-10)


def test_private_rows_tape_nothing_they_read_from_the_copy(parallel_kernels):
    """The pairwise kernel reads x[i] - x[j] for every pair: its reverse sweep reads the private copy again
    (as the serial derivative reads x) instead of keeping n**2 differences on the tape (8 MiB at n = 1024,
    before the body took the copy as a parameter: pyjlad.private_bodies)."""
    from pyjlad.engines import pool

    n = 1024
    x = np.random.default_rng(8).normal(size=n)
    grad = pyjlad.grad(parallel_kernels.pairwise)
    (g,) = _grad(parallel_kernels.pairwise, (x,), (0,))  # built, checked for no fallback
    pool.release()
    grad(x)
    kept = pool.kept_bytes()
    pool.release()
    assert kept < n * n  # 8 * n**2 bytes if the differences were taped; the shadows are smaller than a pool block
    d = x[:, None] - x[None, :]
    want = (-4 * d / (1 + d * d) ** 2).sum(axis=1)  # d/dx_k of sum_ij 1/(1 + (x_i - x_j)^2)
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10)


@njit(parallel=True)
def write_then_gather(a, idx):
    b = a.copy()
    x = b[:]
    out = b[:]
    e = 0.0
    for i in prange(b.shape[0]):
        out[i] = 2.0 * x[i]
        e += x[idx[i]] * x[idx[i]]
    return e


def test_copy_overlapping_a_written_array_is_not_made():
    """x and out view one buffer; each iteration writes out[i], then reads x[idx[i]], the element it wrote
    (idx = arange): e = sum (2 a_i)^2. x is read at an index not the loop's own, so a copy is set up, but
    at run time it overlaps out and the rows read x in place: from a copy they would get sum a_i^2."""
    a = np.random.default_rng(9).normal(size=40)
    idx = np.arange(40)
    a0 = a.copy()
    text = _parallel_text(write_then_gather, (a, idx))
    assert text.count("@malloc(i64 %priv") == 1 and "@pyjlad.omp.body.0(" in text
    (g,) = _grad(write_then_gather, (a, idx), (0,))
    np.testing.assert_allclose(g, 8 * a0, rtol=1e-12, atol=1e-12)


def test_adds_into_a_threads_own_adjoint_are_plain(parallel_kernels, tmp_path, monkeypatch):
    """Enzyme adds into every adjoint of a parallel loop atomically; those into the private copy's adjoint
    (x[i] and x[j] of the pairwise kernel) only its thread touches, so they are made plain
    (pyjlad.private_bodies.plain_private_adds). Left atomic: the copy's adjoint added into x's, once per
    element and thread, and the reduction's partial sums."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    pairwise = njit(parallel=True)(parallel_kernels.pairwise.py_func)  # its own derivative, built (and dumped) here
    x = np.random.default_rng(10).uniform(-2, 2, 300)
    (g,) = _grad(pairwise, (x,), (0,))
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert len(outputs) == 1
    assert outputs[0].read_text().count("atomicrmw fadd") == 2  # 4 with the copy's adds atomic
    d = x[:, None] - x[None, :]
    np.testing.assert_allclose(g, (-4 * d / (1 + d * d) ** 2).sum(axis=1), rtol=1e-10, atol=1e-10)
