"""Array copies whose element type Enzyme must be told: through a loop's ``phi`` (pyjlad.ir.edit.type_float_copies).

Before: ``un = u.copy()`` in a time loop, with ``u = un`` after each step and the code indexing only the array
after the loop, was a copy Enzyme could not type (its source is the loop's ``phi``, its destination a new
array); with loose types, the last resort, Enzyme took the doubles for integers and the gradient was zero,
silently. Now the copies' types follow the ``phi`` nodes joining them to an array the code indexes as floats.
A copy of an integer array passed in is still differentiated (loose types are right for it). Closed forms (the
sum of squares of the input after copies: ``2 u``) from copies taken before the calls.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.errors import ParallelFallbackWarning


@njit
def copied_in_a_time_loop(u0, steps):
    u = u0.copy()
    for _ in range(steps):
        un = u.copy()
        un[0] = un[0] * 1.0
        u = un
    return np.sum(u * u)


@njit
def copied_by_slice_assignment(u0, steps):
    u = u0
    for _ in range(steps):
        v = np.empty_like(u)
        v[:] = u
        u = v
    return np.dot(u, u)


@njit
def rotated(u0, steps):
    u = u0
    for _ in range(steps):
        u = np.concatenate((u[1:], u[:1]))
    return np.sum(u * u)


@njit
def copied_only(u0, steps):
    u = u0
    for _ in range(steps):
        u = u.copy()
    s = 0.0
    for i in range(u.shape[0]):
        s += u[i] * u[i]
    return s


@pytest.mark.parametrize("kernel", [copied_in_a_time_loop, copied_by_slice_assignment, rotated, copied_only],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_the_gradient_goes_through_the_copies(kernel, steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # (built here, with this code)
    u = np.random.default_rng(steps).uniform(0.5, 1.5, 9)
    u0 = u.copy()
    g = pyjlad.gradient(kernel, u, steps, wrt=0)
    np.testing.assert_allclose(g, 2.0 * u0, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(u, u0)


def test_copies_are_typed_through_phis() -> None:
    from pyjlad.ir import parse
    from pyjlad.ir.edit import type_float_copies

    text = "\n".join([
        "define double @f(ptr %a, ptr %b, i64 %n) {", "entry:", "  br label %loop", "loop:",
        "  %u = phi ptr [ %a, %entry ], [ %b, %loop ]",
        "  call void @llvm.memcpy.p0.p0.i64(ptr %b, ptr %u, i64 %n, i1 false)",
        "  br i1 true, label %loop, label %done", "done:",
        "  %last = phi ptr [ %u, %loop ]", "  %p = getelementptr double, ptr %last, i64 1",
        "  %x = load double, ptr %p, align 8", "  ret double %x", "}",
        "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)", ""])
    typed = type_float_copies(parse(text)).render()
    assert "call void @__enzyme_double(ptr %b, i64 8)" in typed
    assert "call void @__enzyme_double(ptr %u, i64 8)" in typed


@njit
def gathered_through_an_index_copy(x, idx):
    j = idx.copy()
    return np.sum(x[j] ** 2)


@njit(parallel=True)
def gathered_in_parallel_through_an_index_copy(x, idx):
    j = idx.copy()
    s = 0.0
    for i in numba.prange(j.shape[0]):
        s += x[j[i]] ** 2
    return s


@pytest.mark.parametrize("kernel", [gathered_through_an_index_copy, gathered_in_parallel_through_an_index_copy],
                         ids=lambda f: f.__name__)
def test_a_copy_of_integers_is_not_refused(kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of an integer array passed in carries no derivative: differentiated (the closed form: each index
    adds ``2 x[j]`` to its element), not refused as a copy Enzyme cannot type."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    rng = np.random.default_rng(7)
    x, idx = rng.normal(size=12), rng.integers(0, 12, 30)
    want = np.zeros(12)
    np.add.at(want, idx, 2.0 * x[idx])
    x0, idx0 = x.copy(), idx.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParallelFallbackWarning)  # either derivative will do: the value is checked
        g = pyjlad.gradient(kernel, x, idx, wrt=0)
    np.testing.assert_allclose(g, want, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(idx, idx0)
