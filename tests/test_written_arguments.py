"""The caller's arrays a function reads and writes in place: gradients at the point the function was called at.

Backward induction into the caller's array, two sweeps of ``V[i] = r * V[i] + (1 - r) * V[i + 1]`` over it, a
caller's buffer filled then swept, a caller's workspace: until 2026-12-06 their gradients were **silently wrong**
(Enzyme read the array again in the reverse sweep after the function had overwritten it; see
:mod:`pyjlad.written_arguments`), while ``jvp`` was right. Found by a user-style probe. Each gradient here is
compared with JAX's (float64) of the same sequential updates, from copies taken before the call; the function
writes the caller's arrays as a call of it does (the documented behaviour of ``gradient``), so each check of the
written array is against a plain call on a copy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.written_arguments import BARRIER, keep_written_arguments

jax.config.update("jax_enable_x64", True)


@njit
def induction_into_the_argument(r, V):
    p = 0.5 + r
    for k in range(V.size - 2, -1, -1):
        for i in range(k + 1):
            V[i] = np.exp(-r) * (p * V[i] + (1.0 - p) * V[i + 1])
    return V[0]


def induction_into_the_argument_jax(r, V):
    p = 0.5 + r
    for k in range(V.size - 2, -1, -1):
        for i in range(k + 1):
            V = V.at[i].set(jnp.exp(-r) * (p * V[i] + (1.0 - p) * V[i + 1]))
    return V[0]


@njit
def two_sweeps(r, V):
    for _ in range(2):
        for i in range(V.size - 1):
            V[i] = r * V[i] + (1.0 - r) * V[i + 1]
    return V[0]


def two_sweeps_jax(r, V):
    for _ in range(2):
        for i in range(V.size - 1):
            V = V.at[i].set(r * V[i] + (1.0 - r) * V[i + 1])
    return V[0]


@njit
def fill_then_sweep(x, w):
    for i in range(x.size):
        x[i] = np.exp(w * x[i])
    for i in range(x.size - 1):
        x[i] = x[i] / (x[i] + x[i + 1])
    return np.sum(x)


def fill_then_sweep_jax(x, w):
    x = jnp.exp(w * x)
    for i in range(x.size - 1):
        x = x.at[i].set(x[i] / (x[i] + x[i + 1]))
    return jnp.sum(x)


@njit
def in_a_workspace(x, r, work):
    for i in range(x.size):
        work[i] = x[i]
    for _ in range(2):
        for i in range(work.size - 1):
            work[i] = r * work[i] + np.sin(work[i + 1])
    return np.sum(work * work)


def in_a_workspace_jax(x, r, work):
    work = x
    for _ in range(2):
        for i in range(work.size - 1):
            work = work.at[i].set(r * work[i] + jnp.sin(work[i + 1]))
    return jnp.sum(work * work)


V0 = np.array([1.3, 1.1, 0.9, 0.75, 0.6, 0.5])
X0 = np.array([0.4, -0.7, 1.1, 0.25])

#: (function, JAX function, arguments, wrt)
CASES = {
    "induction_into_the_argument": (induction_into_the_argument, induction_into_the_argument_jax, (0.02, V0), (0, 1)),
    "two_sweeps": (two_sweeps, two_sweeps_jax, (0.5, np.array([1.0, 2.0, 3.0])), (0, 1)),
    "fill_then_sweep": (fill_then_sweep, fill_then_sweep_jax, (X0, 0.7), (0, 1)),
    "in_a_workspace": (in_a_workspace, in_a_workspace_jax, (X0, 0.6, np.zeros(4)), (0, 1)),
}


def _copies(args):
    return tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("name", CASES)
def test_gradient_of_an_argument_updated_in_place(name):
    f, f_jax, args, wrt = CASES[name]
    before = _copies(args)
    expected = jax.grad(f_jax, argnums=wrt)(*(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in before))
    passed = _copies(args)
    value, got = pyjlad.value_and_grad(f, wrt=wrt)(*passed)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    called = _copies(before)
    assert value == pytest.approx(f(*called), rel=1e-12)
    for a, b in zip(passed, called):  # the caller's arrays written as by a call of f, no more
        assert not isinstance(a, np.ndarray) or np.array_equal(a, b)


def test_two_sweeps_by_hand():
    # V0 = [1, 2, 3], r = 1/2: after two sweeps V[0] = 3 - 2r (the second sweep's V[1] is 3 - r), d/dr = -2.
    assert pyjlad.gradient(two_sweeps, 0.5, np.array([1.0, 2.0, 3.0])) == pytest.approx(-2.0, rel=1e-14)


def test_hessian_of_an_argument_updated_in_place():
    expected = jax.hessian(two_sweeps_jax, argnums=1)(0.5, jnp.array([1.0, 2.0, 3.0, 0.5]))
    V = np.array([1.0, 2.0, 3.0, 0.5])
    got = pyjlad.hessian(two_sweeps, 0.5, V, wrt=1)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(V, [1.0, 2.0, 3.0, 0.5])  # hessian runs on copies


def test_only_arguments_both_read_and_written_get_the_barrier():
    text = """define double @f(ptr %v, ptr %w, ptr %out, i64 %i) {
entry:
  %a = getelementptr double, ptr %v, i64 %i
  %x = load double, ptr %a, align 8
  %y = load double, ptr %w, align 8
  store double %y, ptr %v, align 8
  store double %x, ptr %out, align 8
  br i1 true, label %one, label %two
one:
  ret double %x
two:
  ret double %y
}
define double @g(ptr %v) {
  %x = load double, ptr %v, align 8
  ret double %x
}
"""
    out = keep_written_arguments(text, "f")
    assert out.count(f"call void {BARRIER}(ptr %v)") == 2  # before each ret
    assert f"{BARRIER}(ptr %w)" not in out and f"{BARRIER}(ptr %out)" not in out
    only_read = text[text.index("define double @g"):]
    assert BARRIER not in keep_written_arguments(only_read, "g")  # an argument only read is left alone
