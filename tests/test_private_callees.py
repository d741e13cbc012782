"""The callees of a parallel loop body's derivative add plainly into a thread's own adjoints
(pyjlad.private_callees, used by pyjlad.private_bodies.plain_private_adds).

Before, only the adds written in the body itself were made plain: ``w @ x[i]`` in a ``prange`` calls pyjlad's
loop form of ``dgemv``, whose derivative added into the adjoints of the thread's copy of ``w`` and of the
iteration's own row of ``x`` with two compare-and-swap loops per weight and sample (40% of the parallel
gradient's time of a softmax classifier on one thread)."""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad import ParallelFallbackWarning
from pyjlad.ir import parse
from pyjlad.private_callees import owned_parameters

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def _owned(text: str, roots: dict[str, set[str]]) -> dict[str, set[str]]:
    return owned_parameters(text, {f.symbol: f for f in parse(text).definitions}, roots)


_CALLEE = """define internal void @leaf(ptr %a, ptr %b) {
entry:
  ret void
}"""


def test_owned_through_two_calls_and_derived_pointers_only():
    text = f"""define internal void @root(ptr %own, ptr %other, i1 %c) {{
entry:
  %p = getelementptr double, ptr %own, i64 4
  %mixed = select i1 %c, ptr %p, ptr %other
  call void @middle(ptr %p, ptr %mixed)
  ret void
}}
define internal void @middle(ptr %x, ptr %y) {{
entry:
  %q = getelementptr i8, ptr %x, i64 8
  call void @leaf(ptr %q, ptr %y)
  ret void
}}
{_CALLEE}"""
    assert _owned(text, {"@root": {"%own"}}) == {"@root": {"%own"}, "@middle": {"%x"}, "@leaf": {"%a"}}


@pytest.mark.parametrize("elsewhere", [
    # another call of the callee passes memory that is not the thread's own
    "define void @other(ptr %z) {\nentry:\n  call void @leaf(ptr %z, ptr %z)\n  ret void\n}",
    # the callee's address is taken: its calls are not all in the module's text
    "@table = internal global ptr @leaf",
    "define void @other(ptr %z) {\nentry:\n  call void @run(ptr @leaf)\n  ret void\n}\ndeclare void @run(ptr)",
])
def test_a_callee_with_another_use_owns_nothing(elsewhere):
    text = f"""define internal void @root(ptr %own) {{
entry:
  call void @leaf(ptr %own, ptr %own)
  ret void
}}
{_CALLEE}
{elsewhere}"""
    assert _owned(text, {"@root": {"%own"}}) == {"@root": {"%own"}}


_REQUEST = """define internal void @root(ptr %own, ptr %down, ptr %other) {
entry:
  call void (...) @__enzyme_fwddiff_pyjlad_omp(ptr @leaf, ARGUMENTS)
  ret void
}
declare void @__enzyme_fwddiff_pyjlad_omp(...)
""" + _CALLEE


@pytest.mark.parametrize(("arguments", "owned"), [
    # a request for the callee's forward derivative counts as a call with its primal arguments, if asked
    ("ptr @enzyme_runtime_activity, ptr @enzyme_dup, ptr %own, ptr %down, ptr @enzyme_const, ptr %other", {"%a"}),
    ("ptr @enzyme_const, ptr %other, ptr @enzyme_dupnoneed, ptr %own, ptr %down", {"%b"}),
    # an argument without its activity, or an option with a value: the request is not read
    ("ptr %own, ptr @enzyme_const, ptr %other", None),
    ("ptr @enzyme_width, i64 2, ptr @enzyme_dup, ptr %own, ptr %down, ptr @enzyme_const, ptr %other", None),
])
def test_a_request_for_a_derivative_is_a_call_where_asked(arguments, owned):
    text = _REQUEST.replace("ARGUMENTS", arguments)
    assert _owned(text, {"@root": {"%own", "%down"}}) == {"@root": {"%own", "%down"}}  # (not asked)
    functions = {f.symbol: f for f in parse(text).definitions}
    found = owned_parameters(text, functions, {"@root": {"%own", "%down"}}, through_derivatives=True)
    assert found.get("@leaf") == owned


def test_a_visible_callee_owns_nothing():
    text = """define internal void @root(ptr %own) {
entry:
  call void @leaf(ptr %own, ptr %own)
  ret void
}
define void @leaf(ptr %a, ptr %b) {
entry:
  ret void
}"""
    assert _owned(text, {"@root": {"%own"}}) == {"@root": {"%own"}}


@njit(parallel=True)
def gathered_loss(w, x, rows):
    """Iterations read rows of x other than their own, several the same: x's adjoint is shared."""
    loss = 0.0
    for i in prange(rows.shape[0]):
        z = w @ x[rows[i]]
        loss += np.sum(np.tanh(z)) * (i % 3 + 1)
    return loss


def _jax_gathered(w, x, rows):
    z = x[rows] @ w.T
    return jnp.sum(jnp.sum(jnp.tanh(z), axis=1) * (jnp.arange(rows.shape[0]) % 3 + 1))


def _parallel_grad(f, args):
    """``pyjlad.grad`` of ``f`` with respect to its first two arguments, its parallel derivative (a fallback to
    the serial one fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        return pyjlad.grad(f, wrt=(0, 1))(*args)


def _check_against_jax(f, twin, args, threads, repeats):
    """``repeats`` parallel gradients of ``f`` at ``args`` on ``threads`` threads against ``jax.grad`` of ``twin``
    (float64, from copies taken first); equal within rounding (atomic adds reorder sums); ``args`` unchanged."""
    copies = tuple(a.copy() for a in args)
    expected = [np.asarray(e) for e in jax.grad(twin, argnums=(0, 1))(*copies)]
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    for _ in range(repeats):
        for got, want in zip(_parallel_grad(f, args), expected):
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    for arg, copy in zip(args, copies):
        np.testing.assert_array_equal(arg, copy)


@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_classifier_against_jax(parallel_kernels, parallel_on, threads):
    """benchmarks/parallel_gradients.py's classifier: ``w @ x[i]``, ``w`` read through the thread's copy, ``x[i]``
    in place (its own row)."""
    rng = np.random.default_rng(17)
    args = (rng.normal(size=(10, 32)) * 0.1, rng.normal(size=(3000, 32)), rng.integers(0, 10, 3000))
    _, twins = parallel_kernels._jax_twins()
    _check_against_jax(parallel_kernels.classifier, twins["classifier"][0], args, threads, repeats=2)


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_rows_against_jax(parallel_on, threads):
    rng = np.random.default_rng(18)
    args = (rng.normal(size=(6, 8)) * 0.3, rng.normal(size=(50, 8)), rng.integers(0, 50, 4000))
    _check_against_jax(gathered_loss, _jax_gathered, args, threads, repeats=5)


def test_the_weights_adjoint_is_added_plainly(parallel_kernels, parallel_on, tmp_path, monkeypatch):
    """The loop ``dgemv``'s adds into the thread's copy of ``w`` (its parameter ``pa``) are plain in the private
    rows' derivative; those of the rows that run the body as Numba compiled it stay atomic (one). And the private
    rows' copies of Numba's ``dot_2_mv`` and its ``dot`` (:mod:`pyjlad.invariant_reads`) were inlined before
    Enzyme (:mod:`pyjlad.inline_callees`): called, each returned a tape of its own per sample."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    fresh = njit(parallel=True)(parallel_kernels.classifier.py_func)  # its own derivative, built (and dumped) here
    rng = np.random.default_rng(19)
    w, x, y = rng.normal(size=(4, 5)), rng.normal(size=(30, 5)), rng.integers(0, 4, 30)
    _parallel_grad(fresh, (w, x, y))
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert len(outputs) == 1
    adds = [line for line in outputs[0].read_text().splitlines() if "atomicrmw fadd ptr %\"pa'" in line]
    assert len(adds) == 1  # 2 before: the private rows' too
    (enzyme_input,) = tmp_path.glob("*/*-enzyme.input.ll")
    copies = [f.name for f in parse(enzyme_input.read_text(), strict=False).definitions if f.name.endswith(".pyjlad.reads")]
    assert copies and not [name for name in copies if "dot_2_mv" in name or "dot_3" in name], copies
