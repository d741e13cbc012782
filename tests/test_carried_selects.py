"""Running maxima and minima used inside the loop that updates them (issue 13).

Enzyme v0.0.289's reverse rule for a select that a loop-header phi takes back
as its latch value sends the adjoint only to the element that was selected at
the loop's exit: ``s += m`` over a running max gave ``[0, 0, 0, 1]`` for
``x = [1, 2, 3, 4]`` (right: ``[1, 1, 1, 1]``), max-pooling lost windows, and
one shape crashed Enzyme. ``pyjlad/carried_selects.py`` keeps that rule from
applying. The whole class (if-form and builtin, max and min, scalar and array
results, nested loops, an active start value, the online log-sum-exp, float32,
sizes either side of Numba's unrolling by 8) is checked against JAX in float64,
with the caller's arrays checked unchanged.
"""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest
from corpus.family_control import running_max_carried as sum_of_running_max
from corpus.family_ml import maxpool1d as maxpool
from corpus.family_statistics import logsumexp_online as online_logsumexp
from numba import njit

import pyjlad
from pyjlad.carried_selects import freeze_carried_selects

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

#: Sizes below, at and above Numba's unroll factor (8), with and without a remainder loop.
SIZES = (1, 2, 4, 7, 8, 9, 17, 33)


def distinct(n: int, seed: int = 0) -> np.ndarray:
    """``n`` well-separated values in a random order (no ties: the derivative is defined)."""
    rng = np.random.default_rng(seed + n)
    return rng.permutation(np.linspace(-2.0, 2.0, n)) + 0.01 * rng.standard_normal(n)


# ------------------------------------------------------------------ programs
# The corpus's running-max-carried, maxpool1d and logsumexp-online are used as they are there.
@njit
def weighted_running_max_builtin(x):
    m = -np.inf
    s = 0.0
    for i in range(x.shape[0]):
        m = max(m, x[i])
        s += m * (i + 1.0)
    return s


@njit
def running_min_before_update(x):
    m = x[0]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(m) * x[i]
        if x[i] < m:
            m = x[i]
    return s


@njit
def cummax(x):
    out = np.empty_like(x)
    m = x[0]
    for i in range(x.shape[0]):
        if x[i] > m:
            m = x[i]
        out[i] = m
    return out


@njit
def max_with_start(x, a):
    m = a
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > m:
            m = x[i]
        s += m * m
    return s


def _cummax_jax(x):
    return jax.lax.cummax(x)


def _sum_of_running_max_jax(x):
    return jnp.sum(jax.lax.cummax(x))


def _weighted_running_max_jax(x):
    return jnp.sum(jax.lax.cummax(x) * jnp.arange(1.0, x.shape[0] + 1.0))


def _running_min_before_update_jax(x):
    before = jnp.concatenate([x[:1], jax.lax.cummin(x)[:-1]])
    return jnp.sum(jnp.sin(before) * x)


def _max_with_start_jax(x, a):
    return jnp.sum(jnp.maximum(jax.lax.cummax(x), a) ** 2)


SCALAR_PROGRAMS = [
    (sum_of_running_max, _sum_of_running_max_jax),
    (weighted_running_max_builtin, _weighted_running_max_jax),
    (running_min_before_update, _running_min_before_update_jax),
    (online_logsumexp, jax.nn.logsumexp),
]


# ------------------------------------------------------------------ scalar results
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("program", SCALAR_PROGRAMS, ids=lambda p: p[0].__name__)
def test_gradient_of_a_running_extremum_used_in_its_loop(program, n):
    f, oracle = program
    x = distinct(n)
    before = x.copy()
    expected = np.asarray(jax.grad(oracle)(jnp.asarray(before)))
    assert np.allclose(pyjlad.gradient(f, x), expected, rtol=1e-12, atol=1e-12)
    assert np.array_equal(x, before)


@pytest.mark.parametrize("program", SCALAR_PROGRAMS[:2], ids=lambda p: p[0].__name__)
def test_forward_mode_agrees(program):
    f, oracle = program
    x, t = distinct(11), distinct(11, seed=5)
    x0, t0 = x.copy(), t.copy()
    value0, expected = jax.jvp(oracle, (jnp.asarray(x0),), (jnp.asarray(t0),))
    value, tangent = pyjlad.jvp(f, (x,), (t,))
    assert value == pytest.approx(float(value0), rel=1e-12)
    assert tangent == pytest.approx(float(expected), rel=1e-12, abs=1e-12)
    assert np.array_equal(x, x0) and np.array_equal(t, t0)


def test_hessian_of_a_running_max_used_in_its_loop():
    x = distinct(9)
    before = x.copy()
    expected = np.asarray(jax.hessian(_sum_of_running_max_jax)(jnp.asarray(before)))
    assert np.allclose(pyjlad.hessian(sum_of_running_max, x), expected, atol=1e-12)
    assert np.array_equal(x, before)


def test_float32():
    x = distinct(13).astype(np.float32)
    before = x.copy()
    expected = np.asarray(jax.grad(_sum_of_running_max_jax)(jnp.asarray(before, dtype=jnp.float64)))
    grad = pyjlad.gradient(sum_of_running_max, x)
    assert grad.dtype == np.float32
    assert np.allclose(grad, expected, rtol=1e-6)
    assert np.array_equal(x, before)


@pytest.mark.parametrize("a", [-5.0, 0.1, 5.0], ids=["start-below", "start-inside", "start-above"])
def test_active_start_value(a):
    x = distinct(10)
    before = x.copy()
    gx, ga = jax.grad(_max_with_start_jax, argnums=(0, 1))(jnp.asarray(before), a)
    got_x, got_a = pyjlad.gradient(max_with_start, x, a, wrt=(0, 1))
    assert np.allclose(got_x, np.asarray(gx), atol=1e-12)
    assert got_a == pytest.approx(float(ga), abs=1e-12)
    assert np.array_equal(x, before)


# ------------------------------------------------------------------ array results
@pytest.mark.parametrize("n", (3, 9, 17))
def test_cummax_vjp_and_reverse_jacobian(n):
    x = distinct(n)
    cotangent = distinct(n, seed=3)
    x0, c0 = x.copy(), cotangent.copy()
    _, pullback = jax.vjp(_cummax_jax, jnp.asarray(x0))
    (expected_vjp,) = pullback(jnp.asarray(c0))
    _, (got_vjp,) = pyjlad.vjp(cummax, (x,), cotangent)
    assert np.allclose(got_vjp, np.asarray(expected_vjp), atol=1e-12)
    expected_jac = np.asarray(jax.jacrev(_cummax_jax)(jnp.asarray(x0)))
    assert np.allclose(pyjlad.jacobian(cummax, x, mode="reverse"), expected_jac, atol=1e-12)
    assert np.array_equal(x, x0) and np.array_equal(cotangent, c0)


@pytest.mark.parametrize("width", (2, 3, 5))
def test_maxpool_reverse_jacobian(width):
    x = distinct(4 * width)

    def oracle(v):
        return jnp.max(v.reshape(-1, width), axis=1)

    before = x.copy()
    expected = np.asarray(jax.jacrev(oracle)(jnp.asarray(before)))
    assert np.allclose(pyjlad.jacobian(maxpool, x, width, mode="reverse"), expected, atol=1e-12)
    assert np.array_equal(x, before)


# ------------------------------------------------------------------ the IR rewrite itself
_CARRIED = """define double @f(ptr %x, i64 %n) {
entry:
  %x0 = load double, ptr %x
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %"m q" = phi double [ %x0, %entry ], [ %0, %loop ]
  %p = getelementptr double, ptr %x, i64 %i
  %v = load double, ptr %p
  %c = fcmp ogt double %v, %"m q"
  %0 = select i1 %c, double %v, double %"m q"
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  %w = select i1 %done, double %v, double %x0
  ret double %0
}
"""


def test_only_selects_taken_back_by_a_phi_are_frozen():
    text, changed = freeze_carried_selects(_CARRIED)
    assert changed
    assert "%pj.unfrozen.0 = select i1 %c, double %v, double %\"m q\"" in text
    assert "%0 = freeze double %pj.unfrozen.0" in text
    assert "%w = select i1 %done, double %v, double %x0" in text  # not loop-carried: unchanged
    assert text.count("freeze") == 1


def test_rewritten_function_is_valid_llvm_15():
    text, _ = freeze_carried_selects(_CARRIED)
    proc = subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=text.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()


def test_function_without_a_carried_select_is_returned_as_is():
    plain = _CARRIED.replace("[ %0, %loop ]", "[ %v, %loop ]")
    assert freeze_carried_selects(plain) == (plain, False)
