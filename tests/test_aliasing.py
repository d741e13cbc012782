"""Constant arrays whose pointer Numba merges with other memory (pyjlad/aliasing.py).

Enzyme shadows a constant pointer with its own memory; where Numba merges that
pointer with a temporary (``y[:] = c``) or another array, pyjlad passes a
zeroed shadow instead. The analysis is checked on hand-written IR, the
derivatives against hand-derived formulas, and the inputs for data loss.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.aliasing import mixed_pointer_arguments
from pyjlad.export import export, numba_argtypes

_HEADER = "define i32 @f(ptr %a, ptr %b, i1 %flag) {\nentry:\n"
_CALLEE = "define double @g(ptr %p, i1 %flag) {\nentry:\n"


def _analyse(body: str, extra: str = "") -> frozenset[int]:
    text = _HEADER + body + "\n  ret i32 0\n}\n" + extra + "declare ptr @malloc(i64)\n"
    return mixed_pointer_arguments(text, "f", {"%a": 0, "%b": 1})


@pytest.mark.parametrize(("body", "expected"), [
    # a phi of an argument and a temporary (Numba's overlap-safe copy)
    ("  %t = call ptr @malloc(i64 8)\n  br i1 %flag, label %x, label %y\n"
     "x:\n  br label %y\ny:\n  %m = phi ptr [ %a, %entry ], [ %t, %x ]", {0}),
    # through a getelementptr and a select
    ("  %t = call ptr @malloc(i64 8)\n  %g = getelementptr inbounds double, ptr %b, i64 2\n"
     "  %s = select i1 %flag, ptr %g, ptr %t", {1}),
    # two arguments merged: both
    ("  %s = select i1 %flag, ptr %a, ptr %b", {0, 1}),
    # a pointer induction variable stays within one argument
    ("  br label %loop\nloop:\n  %p = phi ptr [ %a, %entry ], [ %n, %loop ]\n"
     "  %n = getelementptr double, ptr %p, i64 1\n  br i1 %flag, label %loop, label %out\nout:", set()),
    # merged with null or poison only
    ("  %s = select i1 %flag, ptr %a, ptr null\n  %q = select i1 %flag, ptr poison, ptr %b", set()),
    # a global
    ("  %s = select i1 %flag, ptr @glob, ptr %a", {0}),
])
def test_analysis_on_hand_written_ir(body: str, expected: set[int]) -> None:
    assert _analyse(body) == expected


def test_analysis_follows_calls_into_defined_functions() -> None:
    callee = (_CALLEE + "  %t = call ptr @malloc(i64 8)\n  %s = select i1 %flag, ptr %p, ptr %t\n"
              "  ret double 0.0\n}\n")
    assert _analyse("  %r = call double @g(ptr %b, i1 %flag)", callee) == {1}
    assert _analyse("  %r = call double @g(ptr %t, i1 %flag)\n  %t = call ptr @malloc(i64 8)", callee) == set()


@njit
def copy_then_weigh(x, c):
    y = np.empty_like(x)
    y[:] = c  # Numba copies c through a temporary when it may overlap y
    return np.sum(y * x * x)


@njit
def pick(x, c, first):
    a = x if first else c
    return np.sum(a * a) + np.sum(x * c)


rng = np.random.default_rng(7)


def test_copied_constant_array_is_marked_and_left_unchanged() -> None:
    x, c = rng.normal(size=6), rng.normal(size=6)
    abi = export(copy_then_weigh, numba_argtypes((x, c))).abi
    assert [a.aliased for a in abi.args] == [False, True]
    c0 = c.copy()
    np.testing.assert_allclose(pyjlad.gradient(copy_then_weigh, x, c, wrt=0), 2 * c0 * x, rtol=1e-14)
    np.testing.assert_array_equal(c, c0)
    # both differentiated: d/dc = x^2
    gx, gc = pyjlad.gradient(copy_then_weigh, x, c, wrt=(0, 1))
    np.testing.assert_allclose(gx, 2 * c0 * x, rtol=1e-14)
    np.testing.assert_allclose(gc, x * x, rtol=1e-14)
    # forward mode: the tangent of x only
    t = rng.normal(size=6)
    value, tangent = pyjlad.jvp(copy_then_weigh, (x, c), (t, None))
    assert value == pytest.approx(float(np.sum(c0 * x * x)), rel=1e-14)
    assert tangent == pytest.approx(float(np.sum(2 * c0 * x * t)), rel=1e-12)
    # Hessian (forward over reverse) with c constant: diag(2c)
    np.testing.assert_allclose(pyjlad.hessian(copy_then_weigh, x, c, wrt=0), np.diag(2 * c0), atol=1e-14)
    np.testing.assert_array_equal(c, c0)


@pytest.mark.parametrize("first", [True, False])
def test_constant_array_selected_against_a_differentiated_one(first: bool) -> None:
    x, c = rng.normal(size=5), rng.normal(size=5)
    assert [a.aliased for a in export(pick, numba_argtypes((x, c, first))).abi.args[:2]] == [True, True]
    c0, x0 = c.copy(), x.copy()
    gx = pyjlad.gradient(pick, x, c, first, wrt=0)
    np.testing.assert_allclose(gx, (2 * x0 if first else 0) + c0, rtol=1e-14)
    gc = pyjlad.gradient(pick, x, c, first, wrt=1)
    np.testing.assert_allclose(gc, (0 if first else 2 * c0) + x0, rtol=1e-14)
    np.testing.assert_array_equal(c, c0)
    np.testing.assert_array_equal(x, x0)


def test_julia_engine_gives_aliased_constants_a_zero_shadow() -> None:
    # The Python side of the Julia engine (runs without Julia): the activities and shadows it passes.
    from pyjlad.engines.julia import zero_shadow_constants

    x, c = rng.normal(size=4), rng.normal(size=4)
    abi = export(pick, numba_argtypes((x, c, True))).abi
    dx = np.ones(4)
    acts, shadows = zero_shadow_constants(abi, ("dup", "const", "const"), (x, c, True), (dx,))
    assert acts == ("dup", "dup", "const")
    assert shadows[0] is dx
    np.testing.assert_array_equal(shadows[1], np.zeros(4))
    assert zero_shadow_constants(abi, ("dup", "dup", "const"), (x, c, True), (dx, dx)) == (
        ("dup", "dup", "const"), (dx, dx))
