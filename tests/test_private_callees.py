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
def softmax_loss(w, x, y):
    n = x.shape[0]
    loss = 0.0
    for i in prange(n):
        z = w @ x[i]
        m = z.max()
        loss += m + np.log(np.sum(np.exp(z - m))) - z[y[i]]
    return loss / n


@njit(parallel=True)
def gathered_loss(w, x, rows):
    """Iterations read rows of x other than their own, several the same: x's adjoint is shared."""
    loss = 0.0
    for i in prange(rows.shape[0]):
        z = w @ x[rows[i]]
        loss += np.sum(np.tanh(z)) * (i % 3 + 1)
    return loss


def _parallel_grad(f, args):
    """``pyjlad.grad`` of ``f`` with respect to its first two arguments, its parallel derivative (a fallback to
    the serial one fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        return pyjlad.grad(f, wrt=(0, 1))(*args)


def _jax_softmax(w, x, y):
    z = x @ w.T
    m = z.max(axis=1)
    return jnp.mean(m + jnp.log(jnp.sum(jnp.exp(z - m[:, None]), axis=1)) - z[jnp.arange(x.shape[0]), y])


def _jax_gathered(w, x, rows):
    z = x[rows] @ w.T
    return jnp.sum(jnp.sum(jnp.tanh(z), axis=1) * (jnp.arange(rows.shape[0]) % 3 + 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_classifier_against_jax(parallel_on, threads):
    rng = np.random.default_rng(17)
    w, x, y = rng.normal(size=(10, 32)) * 0.1, rng.normal(size=(3000, 32)), rng.integers(0, 10, 3000)
    copies = (w.copy(), x.copy(), y.copy())
    expected = jax.grad(_jax_softmax, argnums=(0, 1))(*copies)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    first, again = (_parallel_grad(softmax_loss, (w, x, y)) for _ in range(2))
    for got, want, repeat in zip(first, expected, again):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(repeat, got, rtol=1e-13, atol=1e-15)  # atomic adds reorder sums: rounding
    for arg, copy in zip((w, x, y), copies):
        np.testing.assert_array_equal(arg, copy)


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_rows_against_jax(parallel_on, threads):
    rng = np.random.default_rng(18)
    w, x, rows = rng.normal(size=(6, 8)) * 0.3, rng.normal(size=(50, 8)), rng.integers(0, 50, 4000)
    copies = (w.copy(), x.copy(), rows.copy())
    expected = jax.grad(_jax_gathered, argnums=(0, 1))(*copies)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    results = [_parallel_grad(gathered_loss, (w, x, rows)) for _ in range(5)]
    for got in results:
        for g, want in zip(got, expected):
            np.testing.assert_allclose(g, np.asarray(want), rtol=1e-11, atol=1e-11)
    for arg, copy in zip((w, x, rows), copies):
        np.testing.assert_array_equal(arg, copy)


def test_the_weights_adjoint_is_added_plainly(parallel_on, tmp_path, monkeypatch):
    """The loop ``dgemv``'s adds into the thread's copy of ``w`` (its parameter ``pa``) are plain in the private
    rows' derivative; those of the rows that run the body as Numba compiled it stay atomic (one)."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    fresh = njit(parallel=True)(softmax_loss.py_func)  # its own derivative, built (and dumped) here
    rng = np.random.default_rng(19)
    w, x, y = rng.normal(size=(4, 5)), rng.normal(size=(30, 5)), rng.integers(0, 4, 30)
    _parallel_grad(fresh, (w, x, y))
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert len(outputs) == 1
    adds = [line for line in outputs[0].read_text().splitlines() if "atomicrmw fadd ptr %\"pa'" in line]
    assert len(adds) == 1  # 2 before: the private rows' too
