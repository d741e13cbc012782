"""Reads of arrays the function never writes are marked invariant in its parallel loops (pyjlad.invariant_reads).

Before, Enzyme cached every element a parallel loop's body read of the caller's arrays (their pointers come from
memory, an origin it never trusts): the softmax classifier's parallel gradient kept a copy of ``x[i, c]`` for
each row of weights, 51 MB per gradient at 20,000 samples, where the serial one reads ``x`` again."""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from benchmark_modules import load
from numba import njit, prange

import pyjlad
from pyjlad import ParallelFallbackWarning
from pyjlad.invariant_reads import invariant_reads

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

_ENTRY = """define i32 @f(ptr %x, ptr %out) {
entry:
  %args = alloca [2 x ptr], align 8
  store ptr %x, ptr %args, align 8
  %slot = getelementptr inbounds [2 x ptr], ptr %args, i64 0, i64 1
  store ptr %out, ptr %slot, align 8
  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @loc, i32 1, ptr @task, ptr %args)
  ret i32 0
}"""
_TASK = """define internal void @task(ptr %gtid, ptr %btid, ptr %args) {
entry:
  %xp = load ptr, ptr %args, align 8
  %row = getelementptr i8, ptr %xp, i64 64
  %at = getelementptr inbounds i8, ptr %args, i64 8
  %op = load ptr, ptr %at, align 8
  call void @body(ptr %row, ptr %op)
  ret void
}"""
_BODY = """define internal void @body(ptr %a, ptr %b) {
entry:
  %v = load double, ptr %a, align 8
  %w = load double, ptr %b, align 8
  call void @_ZN6helper(ptr %a, ptr %b)
  ret void
}"""
#: Defined once for every caller (like Numba's compiled loop body and pyjlad's loop dgemv), called from elsewhere too.
_HELPER = """define linkonce_odr void @_ZN6helper(ptr %p, ptr %q) {
entry:
  %e = getelementptr double, ptr %p, i64 3
  %u = load double, ptr %e, align 8
  %t = load double, ptr %q, align 8
  ret void
}
define void @elsewhere(ptr %z) {
entry:
  call void @_ZN6helper(ptr %z, ptr %z)
  ret void
}"""


def _module(*parts: str) -> str:
    return "\n".join(parts) + "\n"


def _marked(text: str) -> list[str]:
    return [line.strip().split(" = ")[0] for line in text.splitlines() if "!invariant.load" in line]


def test_reads_of_a_never_written_array_are_marked_through_the_body_and_a_copy_of_its_callee():
    marked = invariant_reads(_module(_ENTRY, _TASK, _BODY, _HELPER), "f", {0})
    assert _marked(marked) == ["%v", "%u"]  # x's reads; not out's (%w, %t)
    assert "call void @_ZN6helper.pyjlad.reads(ptr %a, ptr %b)" in marked
    assert "define internal void @_ZN6helper.pyjlad.reads(ptr %p, ptr %q)" in marked
    assert "  call void @_ZN6helper(ptr %z, ptr %z)" in marked  # the other caller keeps the function as it was
    helper = marked.split("define linkonce_odr void @_ZN6helper(")[1].split("}")[0]
    assert "invariant" not in helper


def test_a_callee_whose_address_is_taken_is_not_copied():
    """(A custom derivative is registered by the function's address: a copy would be differentiated without it.)"""
    text = _module(_ENTRY, _TASK, _BODY, _HELPER, "@rule = internal global ptr @_ZN6helper")
    marked = invariant_reads(text, "f", {0})
    assert _marked(marked) == ["%v"]
    assert ".pyjlad.reads" not in marked


_COPYING_TASK = """define internal void @task(ptr %gtid, ptr %btid, ptr %args) {
entry:
  %xp = load ptr, ptr %args, align 8
  %copy = call noalias ptr @malloc(i64 64)
  call void @llvm.memcpy.p0.p0.i64(ptr %copy, ptr %xp, i64 64, i1 false)
  %at = getelementptr inbounds i8, ptr %args, i64 8
  %op = load ptr, ptr %at, align 8
  call void @body(ptr %copy, ptr %op)
  call void @free(ptr %copy)
  ret void
}
declare ptr @malloc(i64)
declare void @free(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"""


def test_reads_of_a_threads_private_copy_of_such_an_array_are_marked():
    """(pyjlad.private_adjoints' copy of an array every row reads: filled once, before any row runs.)"""
    text = _module(_ENTRY, _COPYING_TASK, _BODY, _HELPER)
    assert _marked(invariant_reads(text, "f", {0})) == ["%v", "%u"]
    filled_twice = text.replace("  %at =", "  call void @llvm.memcpy.p0.p0.i64(ptr %copy, ptr %xp, i64 8, i1 false)\n"
                                           "  %at =")
    assert _marked(invariant_reads(filled_twice, "f", {0})) == []
    written = text.replace("  %v = load double, ptr %a, align 8", "  store double 0.0, ptr %a, align 8")
    assert invariant_reads(written, "f", {0}) == written


@pytest.mark.parametrize(("change", "why"), [
    (lambda t: t.replace("  call void (ptr", "  store ptr %out, ptr %args, align 8\n  call void (ptr"),
     "x's slot stored twice"),
    (lambda t: t.replace("  ret i32 0", "  call void @keep(ptr %args)\n  ret i32 0") + "declare void @keep(ptr)\n",
     "the array of pointers passed to another function"),
    (lambda t: t + "@table = internal global ptr @task\n", "the task used other than by the fork"),
    (lambda t: t.replace("  %v = load double, ptr %a, align 8", "  store double 0.0, ptr %a, align 8"),
     "the body writes the array: contradicts never written"),
    (lambda t: t.replace("  %op = load ptr, ptr %at, align 8", "  %op = load ptr, ptr %at, align 8\n"
                                                                 "  store ptr null, ptr %args, align 8"),
     "the task writes its array of pointers"),
])
def test_nothing_is_marked_where_the_array_may_change(change, why):
    text = change(_module(_ENTRY, _TASK, _BODY, _HELPER))
    assert invariant_reads(text, "f", {0}) == text, why


def test_nothing_is_marked_without_never_written_arrays():
    text = _module(_ENTRY, _TASK, _BODY, _HELPER)
    assert invariant_reads(text, "f", set()) == text
    assert _marked(invariant_reads(text, "f", {1})) == ["%w", "%t"]  # (the second array's reads, had it been)


#: The form a Hessian-vector product's module takes (pyjlad.openmp_tasks.forward_fork): the entry packs its arrays of
#: pointers and calls a fork function, whose registered forward derivative forks the task's forward form, which asks
#: Enzyme for the forward derivative of the loop's body.
_PACKED_ENTRY = """define i32 @f(ptr %x, ptr %out) {
entry:
  %args = alloca [2 x ptr], align 8
  %pack = alloca [2 x ptr], align 8
  store ptr %x, ptr %args, align 8
  %slot = getelementptr inbounds [2 x ptr], ptr %args, i64 0, i64 1
  store ptr %out, ptr %slot, align 8
  store ptr %args, ptr %pack, align 8
  %rest = getelementptr inbounds ptr, ptr %pack, i64 1
  store ptr null, ptr %rest, align 8
  call void @fork(ptr %pack)
  ret i32 0
}
define internal void @fork(ptr %pack) noinline {
entry:
  %args = load ptr, ptr %pack, align 8
  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @loc, i32 1, ptr @task, ptr %args)
  ret void
}
define internal void @fork.fwd(ptr %pack, ptr %dpack) {
entry:
  %args = load ptr, ptr %pack, align 8
  %dargs = load ptr, ptr %dpack, align 8
  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @loc, i32 2, ptr @task.fwd, ptr %args, ptr %dargs)
  ret void
}
define internal void @task.fwd(ptr %gtid, ptr %btid, ptr %args, ptr %dargs) {
entry:
  %xp = load ptr, ptr %args, align 8
  %dxp = load ptr, ptr %dargs, align 8
  %at = getelementptr inbounds i8, ptr %args, i64 8
  %op = load ptr, ptr %at, align 8
  %dat = getelementptr inbounds i8, ptr %dargs, i64 8
  %dop = load ptr, ptr %dat, align 8
  call void (...) @__enzyme_fwddiff_pyjlad_omp(ptr @body, ptr @enzyme_runtime_activity, ptr @enzyme_dup, ptr %xp, ptr %dxp, ptr @enzyme_dup, ptr %op, ptr %dop)
  ret void
}
@__enzyme_register_derivative_fork = weak_odr global [2 x ptr] [ptr @fork, ptr @fork.fwd]
declare void @__enzyme_fwddiff_pyjlad_omp(...)"""


#: The primal task without its call of the body: the body reached through the forward task's request alone.
_IDLE_TASK = _TASK.replace("  call void @body(ptr %row, ptr %op)\n", "")


def test_reads_are_marked_through_a_packed_fork_and_a_forward_derivative_request():
    """(Before, a Hessian-vector product's parallel module had no mark: the task was found only where the entry
    forks it itself; the classifier's HVP kept two copies of w and two of x[i] per sample.)"""
    text = _module(_PACKED_ENTRY, _TASK, _BODY, _HELPER)
    marked = invariant_reads(text, "f", {0})
    assert _marked(marked) == ["%v", "%u"]  # x's reads in the body and its callee's copy; not out's (%w, %t)
    assert "call void @_ZN6helper.pyjlad.reads(ptr %a, ptr %b)" in marked
    assert _marked(invariant_reads(_module(_PACKED_ENTRY, _IDLE_TASK, _BODY, _HELPER), "f", {0})) == ["%v", "%u"]


@pytest.mark.parametrize(("change", "why"), [
    (lambda t: t.replace("  call void @fork(ptr %pack)", "  call void @fork(ptr %pack)\n  call void @keep(ptr %pack)")
     + "declare void @keep(ptr)\n", "the pack passed to another function"),
    (lambda t: t.replace("  call void @fork(ptr %pack)", "  call void @fork(ptr %pack)\n  store ptr %out, ptr %pack"),
     "x's array of pointers' slot in the pack stored twice"),
    (lambda t: t + "define void @other(ptr %p) {\nentry:\n  call void @fork(ptr %p)\n  ret void\n}\n",
     "the fork function called from elsewhere, with another pack"),
    (lambda t: t.replace("  %args = load ptr, ptr %pack, align 8\n  %dargs",
                         "  %args = load ptr, ptr %pack, align 8\n  store ptr null, ptr %pack, align 8\n  %dargs"),
     "the fork's derivative writes the pack"),
    (lambda t: t.replace("  %dargs = load ptr, ptr %dpack, align 8\n", "  %dargs = load ptr, ptr %dpack, align 8\n"
                                                                      "  call void @keep(ptr %args)\n")
     + "declare void @keep(ptr)\n", "the fork's derivative passes the array of pointers on"),
    (lambda t: t.replace("ptr @enzyme_dup, ptr %xp, ptr %dxp", "ptr %xp"), "an argument without its activity"),
])
def test_nothing_is_marked_where_a_packed_fork_may_see_other_arrays(change, why):
    text = change(_module(_PACKED_ENTRY, _IDLE_TASK, _BODY, _HELPER))
    assert _marked(invariant_reads(text, "f", {0})) == [], why


# --- end to end: parallel gradients against jax.grad (float64, from copies taken first) -------------------------

#: The softmax classifier with ``w @ x[i]`` written as loops (every read of x in the body itself), in parallel.
looped_classifier = njit(parallel=True)(load("hvp_tapes.py").classifier.py_func)
_jax_classifier = load("hvp_tapes.py").jax_twins(jnp, jax.nn)["classifier"]


@njit(parallel=True)
def written_output(w, x, out):
    """Reads x in the loop, and writes an output argument: no array is marked (out could overlap x)."""
    for i in prange(x.shape[0]):
        acc = 0.0
        for c in range(x.shape[1]):
            acc += w[c] * x[i, c]
        out[i] = np.tanh(acc)
    return np.sum(out * out)


def _jax_written(w, x, out):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def _grad_and_dump(f, args, tmp_path, monkeypatch):
    """``pyjlad.grad`` of a fresh copy of ``f`` with respect to its first two arguments (its parallel derivative:
    a fallback fails the test), and the Enzyme input it dumped."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    fresh = njit(parallel=True)(f.py_func)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        got = pyjlad.grad(fresh, wrt=(0, 1))(*args)
    inputs = sorted(tmp_path.glob("*/*-enzyme.input.ll"))
    return got, inputs[-1].read_text()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("f", "twin", "marked"), [
    (looped_classifier, _jax_classifier, True),
    (written_output, _jax_written, False),
])
def test_gradients_against_jax(f, twin, marked, threads, parallel_on, tmp_path, monkeypatch):
    rng = np.random.default_rng(23)
    if f is written_output:
        args = (rng.normal(size=12) * 0.3, rng.normal(size=(500, 12)), np.zeros(500))
    else:
        args = (rng.normal(size=(6, 12)) * 0.3, rng.normal(size=(500, 12)), rng.integers(0, 6, 500))
    copies = tuple(a.copy() for a in args)
    expected = [np.asarray(e) for e in jax.grad(twin, argnums=(0, 1))(*copies)]
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    for repeat in range(3):
        got, enzyme_input = _grad_and_dump(f, args, tmp_path / str(repeat), monkeypatch)
        for g, want in zip(got, expected):
            np.testing.assert_allclose(g, want, rtol=1e-11, atol=1e-12)
        assert ("!invariant.load" in enzyme_input) is marked
    for arg, copy in zip(args[:2], copies):  # (written_output writes its out, as a call of it does: README)
        np.testing.assert_array_equal(arg, copy)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("form", ["loops", "product"])
def test_hessian_vector_products_against_jax(form, threads, parallel_kernels, parallel_on, tmp_path, monkeypatch):
    """The reads are marked in a Hessian-vector product's module too (a packed fork: before, none was), and the
    product equals ``jax.jvp(jax.grad)``: the classifier in loops, and the benchmarks' with ``w @ x[i]`` (whose
    product pyjlad's loop form reads, :mod:`pyjlad.blas_loops`)."""
    f = looped_classifier if form == "loops" else parallel_kernels.classifier
    rng = np.random.default_rng(29)
    w, x, y = rng.normal(size=(6, 12)) * 0.3, rng.normal(size=(400, 12)), rng.integers(0, 6, 400)
    v = rng.normal(size=w.shape)
    copies = (w.copy(), x.copy(), y.copy(), v.copy())
    expected = np.asarray(jax.jvp(lambda a: jax.grad(_jax_classifier)(a, copies[1], copies[2]),
                                  (copies[0],), (copies[3],))[1])
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    fresh = njit(parallel=True)(f.py_func)
    for _ in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ParallelFallbackWarning)
            got = pyjlad.hvp(fresh, (w, x, y), v)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert "!invariant.load" in sorted(tmp_path.glob("*/*-enzyme.input.ll"))[-1].read_text()
    for arg, copy in zip((w, x, y, v), copies):
        np.testing.assert_array_equal(arg, copy)
