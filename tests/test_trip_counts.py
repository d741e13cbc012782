"""Sibling loops that read the same memory: every loop gets a trip count of its own (``pyjlad.trip_counts``).

Enzyme v0.0.289 reuses the cache of an earlier load for a later load with the same base, start, step and trip count,
without comparing their loops; in a later sibling loop's reverse sweep it then indexes the earlier loop's cache with
the earlier loop's (stale) counter. Each gradient below was wrong before pyjlad gave every loop a trip count of its
own (checked against JAX). The first tests read the rewrite itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.ir import parse
from pyjlad.trip_counts import distinct_trip_counts

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from corpus.family_ml import mlp_two_hidden, mlp_two_hidden_jax  # noqa: E402 (the corpus's)
from corpus.family_numerics import column_sweeps, column_sweeps_jax, row_sweeps, row_sweeps_jax  # noqa: E402

RNG = np.random.default_rng(20261202)

NESTED = """define void @f(ptr %x, i64 %rows, i64 %cols) {
entry:
  br label %outer
outer:
  %i = phi i64 [ 0, %entry ], [ %i.next, %latch ]
  %m = add i64 %cols, 0
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
  %j.next = add i64 %j, 1
  %c = icmp slt i64 %j.next, %m
  br i1 %c, label %inner, label %latch
latch:
  %i.next = add i64 %i, 1
  %d = icmp eq i64 %i.next, 7
  br i1 %d, label %out, label %outer
out:
  ret void
}
"""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in parse(text).function("f").body or []]


def test_each_loop_compares_with_a_freeze_of_its_own() -> None:
    lines = _lines(distinct_trip_counts(NESTED))
    # the inner bound is frozen right after its definition, inside the outer loop: invariant in the inner loop only
    assert lines[lines.index("%m = add i64 %cols, 0") + 1] == "%pj.trip.1 = freeze i64 %m"
    assert "%c = icmp slt i64 %j.next, %pj.trip.1" in lines
    # a constant bound: frozen in the entry block
    assert lines[:3] == ["entry:", "%pj.trip.0 = freeze i64 7", "br label %outer"]
    assert "%d = icmp eq i64 %i.next, %pj.trip.0" in lines


def test_a_bound_defined_by_a_phi_is_frozen_after_the_phis() -> None:
    text = NESTED.replace("%m = add i64 %cols, 0", "%m = phi i64 [ %cols, %entry ], [ %cols, %latch ]")
    lines = _lines(distinct_trip_counts(text))
    at = lines.index("%m = phi i64 [ %cols, %entry ], [ %cols, %latch ]")
    assert lines[at + 1] == "%pj.trip.1 = freeze i64 %m"


def test_two_loops_with_one_bound_get_two_freezes() -> None:
    text = NESTED.replace("icmp eq i64 %i.next, 7", "icmp eq i64 %i.next, %cols").replace(
        "icmp slt i64 %j.next, %m", "icmp slt i64 %j.next, %cols")
    lines = _lines(distinct_trip_counts(text))
    freezes = [line for line in lines if " = freeze " in line]
    assert freezes == ["%pj.trip.0 = freeze i64 %cols", "%pj.trip.1 = freeze i64 %cols"]
    assert "%d = icmp eq i64 %i.next, %pj.trip.0" in lines and "%c = icmp slt i64 %j.next, %pj.trip.1" in lines


def test_one_literal_of_two_types_gets_a_freeze_per_type() -> None:
    # one loop, two exits, the literal 7 as an i32 in one and an i64 in the other
    text = """define void @f(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %next ]
  %t = trunc i64 %i to i32
  %c = icmp sgt i32 %t, 7
  br i1 %c, label %out, label %next
next:
  %i.next = add i64 %i, 1
  %d = icmp eq i64 %i.next, 7
  br i1 %d, label %out, label %loop
out:
  ret void
}
"""
    lines = _lines(distinct_trip_counts(text))
    assert sorted(line for line in lines if " = freeze " in line) == ["%pj.trip.0 = freeze i32 7",
                                                                       "%pj.trip.1 = freeze i64 7"]
    assert "%c = icmp sgt i32 %t, %pj.trip.0" in lines and "%d = icmp eq i64 %i.next, %pj.trip.1" in lines


def test_a_freeze_goes_before_a_switch_written_over_several_lines() -> None:
    text = """define void @f(i64 %n, i32 %s) {
entry:
  switch i32 %s, label %loop [
    i32 0, label %loop
    i32 1, label %out
  ]
loop:
  %i = phi i64 [ 0, %entry ], [ 0, %entry ], [ %i.next, %loop ]
  %i.next = add i64 %i, 1
  %c = icmp eq i64 %i.next, %n
  br i1 %c, label %out, label %loop
out:
  ret void
}
"""
    lines = _lines(distinct_trip_counts(text))
    assert lines[:3] == ["entry:", "%pj.trip.0 = freeze i64 %n", "switch i32 %s, label %loop ["]
    assert "%c = icmp eq i64 %i.next, %pj.trip.0" in lines


def test_what_is_left_alone() -> None:
    # compares of values the loop computes, of pointers, and compares outside loops
    text = NESTED.replace("icmp eq i64 %i.next, 7", "icmp eq i64 %i.next, %j.next").replace(
        "icmp slt i64 %j.next, %m", "icmp ult ptr %x, %x")
    assert distinct_trip_counts(text) == text
    straight = "define i1 @g(i64 %n) {\nentry:\n  %c = icmp eq i64 %n, 3\n  ret i1 %c\n}\n"
    assert distinct_trip_counts(straight) == straight


@njit
def _column_then_overwritten(a):
    # two loops over one column, no loop around them; the column overwritten after
    b = a.copy()
    u = 0.0
    for i in range(b.shape[0]):
        u += b[i, 0] * b[i, 0]
    v = 0.0
    for i in range(b.shape[0]):
        v += math.sin(b[i, 0])
    for i in range(b.shape[0]):
        b[i, 0] = b[i, 1] * 2.0
    return u * v + np.sum(b)


def _column_then_overwritten_jax(a):
    return jnp.sum(a[:, 0] ** 2) * jnp.sum(jnp.sin(a[:, 0])) + jnp.sum(a.at[:, 0].set(a[:, 1] * 2.0))


@pytest.mark.parametrize(("f", "twin", "shape"), [
    pytest.param(column_sweeps, column_sweeps_jax, (6, 3), id="column-sweeps"),
    pytest.param(row_sweeps, row_sweeps_jax, (3, 7), id="row-sweeps"),
    pytest.param(_column_then_overwritten, _column_then_overwritten_jax, (6, 3), id="column-then-overwritten"),
])
def test_gradients_of_sibling_loops_match_jax(f, twin, shape) -> None:
    a = RNG.standard_normal(shape)
    a0 = a.copy()
    expected = np.asarray(jax.grad(twin)(jnp.asarray(a0)))
    np.testing.assert_allclose(pyjlad.grad(f)(a), expected, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(a, a0)


def test_two_layer_network_with_a_constant_width() -> None:
    # the corpus's ml/mlp-two-hidden-flat: its loop over hidden units unrolled before Enzyme leaves three copies of
    # the loop over inputs; gradient and Hessian
    p, x, y = RNG.standard_normal(18) * 0.6, RNG.standard_normal((5, 2)), RNG.standard_normal(5)
    before = [v.copy() for v in (p, x, y)]
    args = tuple(jnp.asarray(v) for v in before)
    np.testing.assert_allclose(pyjlad.grad(mlp_two_hidden)(p, x, y), np.asarray(jax.grad(mlp_two_hidden_jax)(*args)),
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(pyjlad.hessian(mlp_two_hidden, p, x, y),
                               np.asarray(jax.hessian(mlp_two_hidden_jax)(*args)), rtol=1e-11, atol=1e-12)
    for now, then in zip((p, x, y), before, strict=True):
        np.testing.assert_array_equal(now, then)
