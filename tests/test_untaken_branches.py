"""Branches whose untaken side is singular: no NaN from the side that did not run.

LLVM turns a short ``if``/``else`` into a ``select`` of both sides (SimplifyCFG
in scalar code, the loop vectorizer's if-conversion in vector loops), and
Enzyme v0.0.289 differentiates both operands of a ``select``: the untaken
side's partial times a zero adjoint is ``0 * inf`` or ``0 * nan`` = NaN where
that side is singular (``pow(-x, 1/3)`` inside Numba's ``np.cbrt`` at
``x > 0``, ``log(0)``, ``1 / 0``, ``x ** 1.5`` at ``x < 0``). The corpus's
``elementwise/powers/1d`` gave NaN for the 4 elements of its vector loop
because the wrapper pyjlad differentiates links ``powers`` as the user's call
compiled it (vectorized). ``pyjlad/enzyme_copy.py`` gives Enzyme a copy with
branches kept, callees included.

Every shape is checked at sizes 1..9 (either side of the 4-wide vector loop
and Numba's unrolling by 8), float64 and float32, in reverse (gradient, vjp,
reverse Jacobian) and forward (jvp, forward Jacobian) mode, against JAX in
float64 written so that JAX has no NaN itself (``jnp.where`` with a safe inner
argument), with oracles computed from copies taken before the call and the
caller's arrays checked unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from corpus.family_elementwise import powers
from numba import njit

import pyjlad
from pyjlad.export_ir import enzyme_ir, ir_before_codegen

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

SIZES = tuple(range(1, 10))
DTYPES = (np.float64, np.float32)
#: float32 results against a float64 oracle.
TOLERANCE = {np.float64: {"rtol": 1e-10, "atol": 1e-10}, np.float32: {"rtol": 2e-4, "atol": 2e-4}}


def mixed(n: int, dtype: type = np.float64, zero: bool = True) -> np.ndarray:
    """``n`` values of both signs (a zero in the middle if ``zero``), in a shuffled order."""
    rng = np.random.default_rng(n)
    x = rng.permutation(np.linspace(-2.0, 2.0, n) + 0.05 * rng.standard_normal(n))
    if zero and n > 1:
        x[n // 2] = 0.0
    return x.astype(dtype)


def positive(n: int, dtype: type = np.float64) -> np.ndarray:
    rng = np.random.default_rng(100 + n)
    return rng.uniform(0.3, 2.5, n).astype(dtype)


# ------------------------------------------------------------------ programs with a scalar result
@njit
def sqrt_if_positive(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sqrt(x[i]) if x[i] > 0 else 0.0
    return s


@njit
def log_if_positive(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.log(x[i]) if x[i] > 0 else x[i]
    return s


@njit
def power_if_positive(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 1.5 if x[i] > 0 else -x[i]
    return s


@njit
def reciprocal_if_nonzero(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += 1.0 / x[i] if x[i] != 0 else 2.0 * x[i]
    return s


@njit
def piecewise(x):
    s = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        if v < -0.5:
            s += math.log(-v)
        elif v < 0.5:
            s += v * v
        else:
            s += math.sqrt(v)
    return s


@njit
def cbrt_of_mixed_signs(x):
    return np.sum(np.cbrt(x))


@njit
def double_where(x):
    return np.sum(np.where(x > 0, np.sqrt(np.where(x > 0, x, 1.0)), 0.0))


def _sqrt_if_positive(x):
    return jnp.sum(jnp.where(x > 0, jnp.sqrt(jnp.where(x > 0, x, 1.0)), 0.0))


def _log_if_positive(x):
    return jnp.sum(jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)), x))


def _power_if_positive(x):
    return jnp.sum(jnp.where(x > 0, jnp.where(x > 0, x, 1.0) ** 1.5, -x))


def _reciprocal_if_nonzero(x):
    return jnp.sum(jnp.where(x != 0, 1.0 / jnp.where(x != 0, x, 1.0), 2.0 * x))


def _piecewise(x):
    low = jnp.log(-jnp.where(x < -0.5, x, -1.0))
    high = jnp.sqrt(jnp.where(x >= 0.5, x, 1.0))
    return jnp.sum(jnp.where(x < -0.5, low, jnp.where(x < 0.5, x * x, high)))


def _cbrt(x):
    return jnp.sum(jnp.cbrt(x))


SCALAR_PROGRAMS = [
    (sqrt_if_positive, _sqrt_if_positive, True),
    (log_if_positive, _log_if_positive, True),
    (power_if_positive, _power_if_positive, True),
    (reciprocal_if_nonzero, _reciprocal_if_nonzero, True),
    (piecewise, _piecewise, True),
    (cbrt_of_mixed_signs, _cbrt, False),  # cbrt is singular at 0 itself: no zero
    (double_where, _sqrt_if_positive, True),
]


def _check_gradient(f: Callable, oracle: Callable, x: np.ndarray) -> None:
    before = x.copy()
    expected = np.asarray(jax.grad(oracle)(jnp.asarray(before, dtype=jnp.float64)))
    assert np.all(np.isfinite(expected))
    got = pyjlad.gradient(f, x)
    assert got.dtype == x.dtype
    assert np.allclose(got, expected, **TOLERANCE[x.dtype.type])
    assert np.array_equal(x, before)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("program", SCALAR_PROGRAMS, ids=lambda p: p[0].__name__)
def test_gradient(program, dtype):
    f, oracle, zero = program
    for n in SIZES:
        _check_gradient(f, oracle, mixed(n, dtype, zero))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("program", SCALAR_PROGRAMS, ids=lambda p: p[0].__name__)
def test_jvp(program, dtype):
    f, oracle, zero = program
    for n in SIZES:
        x, t = mixed(n, dtype, zero), positive(n, dtype)
        x0, t0 = x.copy(), t.copy()
        value0, expected = jax.jvp(oracle, (jnp.asarray(x0, jnp.float64),), (jnp.asarray(t0, jnp.float64),))
        value, tangent = pyjlad.jvp(f, (x,), (t,))
        assert value == pytest.approx(float(value0), rel=TOLERANCE[dtype]["rtol"], abs=TOLERANCE[dtype]["atol"])
        assert tangent == pytest.approx(float(expected), rel=TOLERANCE[dtype]["rtol"], abs=TOLERANCE[dtype]["atol"])
        assert np.array_equal(x, x0) and np.array_equal(t, t0)


@pytest.mark.parametrize("x", [-2.0, 0.0, 0.5, 3.0])
def test_scalar_argument(x):
    @njit
    def f(v):
        return math.log(v) * v if v > 0 else 3.0 * v

    def oracle(v):
        return jnp.where(v > 0, jnp.log(jnp.where(v > 0, v, 1.0)) * v, 3.0 * v)

    expected = float(jax.grad(oracle)(x))
    assert pyjlad.gradient(f, x) == pytest.approx(expected, rel=1e-12)
    assert pyjlad.jvp(f, (x,), (1.0,))[1] == pytest.approx(expected, rel=1e-12)


@njit
def log_times_weight(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.log(x[i]) * w[i] if x[i] > 0 else w[i] * x[i]
    return s


def _log_times_weight(x, w):
    return jnp.sum(jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)) * w, w * x))


@pytest.mark.parametrize("n", SIZES)
def test_two_active_arguments(n):
    """The untaken side's product ``log(x) * w`` must not give ``w`` a NaN either."""
    x, w = mixed(n), positive(n)
    x0, w0 = x.copy(), w.copy()
    gx, gw = jax.grad(_log_times_weight, argnums=(0, 1))(jnp.asarray(x0), jnp.asarray(w0))
    _, (got_x, got_w) = pyjlad.vjp(log_times_weight, (x, w), 1.0)
    assert np.allclose(got_x, np.asarray(gx), rtol=1e-12, atol=1e-12)
    assert np.allclose(got_w, np.asarray(gw), rtol=1e-12, atol=1e-12)
    assert np.array_equal(x, x0) and np.array_equal(w, w0)


# ------------------------------------------------------------------ array results, callees compiled first
def _powers(x):
    return jnp.sqrt(x) + jnp.cbrt(x) + jnp.power(x, 2.5) + x ** -1.5 + jnp.square(x) + jnp.reciprocal(x)


@njit
def cbrt_elementwise(x):
    return np.cbrt(x)


@njit
def guarded_elementwise(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] ** 1.5 if x[i] > 0 else math.log(1.0 + x[i] * x[i])
    return out


def _guarded_elementwise(x):
    return jnp.where(x > 0, jnp.where(x > 0, x, 1.0) ** 1.5, jnp.log1p(x * x))


@njit
def calls_guarded(x):
    return np.sum(guarded_elementwise(x) * 2.0)


def _calls_guarded(x):
    return jnp.sum(_guarded_elementwise(x) * 2.0)


def _make_closure_caller():
    inner = cbrt_elementwise

    @njit
    def closure_caller(x):
        return np.sum(inner(x) + x)

    return closure_caller


closure_caller = _make_closure_caller()

ARRAY_PROGRAMS = [
    (powers, _powers, positive),
    (cbrt_elementwise, jnp.cbrt, lambda n, d: mixed(n, d, zero=False)),
    (guarded_elementwise, _guarded_elementwise, mixed),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("program", ARRAY_PROGRAMS, ids=lambda p: p[0].__name__)
def test_array_result_vjp_and_jacobians(program, dtype):
    f, oracle, inputs = program
    tol = TOLERANCE[dtype]
    for n in SIZES:
        x = inputs(n, dtype)
        f(x)  # the user's own call first: Numba compiles (and vectorizes) f before pyjlad sees it
        cotangent = positive(n, dtype)
        x0, c0 = x.copy(), cotangent.copy()
        _, pullback = jax.vjp(oracle, jnp.asarray(x0, jnp.float64))
        (expected_vjp,) = pullback(jnp.asarray(c0, jnp.float64))
        expected_jac = np.asarray(jax.jacfwd(oracle)(jnp.asarray(x0, jnp.float64)))
        assert np.all(np.isfinite(expected_jac))
        _, (got_vjp,) = pyjlad.vjp(f, (x,), cotangent)
        assert np.allclose(got_vjp, np.asarray(expected_vjp), **tol)
        assert np.allclose(pyjlad.jacobian(f, x, mode="reverse"), expected_jac, **tol)
        assert np.allclose(pyjlad.jacobian(f, x, mode="forward"), expected_jac, **tol)
        _, tangent = pyjlad.jvp(f, (x,), (cotangent,))
        assert np.allclose(tangent, expected_jac @ c0.astype(np.float64), **tol)
        assert np.array_equal(x, x0) and np.array_equal(cotangent, c0)


@pytest.mark.parametrize("caller", [calls_guarded, closure_caller], ids=["global", "closure"])
def test_callee_compiled_by_the_user_first(caller):
    oracle = _calls_guarded if caller is calls_guarded else (lambda v: jnp.sum(jnp.cbrt(v) + v))
    for n in SIZES:
        x = mixed(n, zero=caller is calls_guarded)
        caller(x)
        _check_gradient(caller, oracle, x)


# ------------------------------------------------------------------ the user's own code is unchanged
def _optimized_ir(f: Callable, *args: object) -> str:
    """The IR of ``f``'s compile for ``args`` as LLVM's optimizer left it (before code generation)."""
    captured: list = []
    with ir_before_codegen(captured):
        f(*args)
    return "\n".join(ir for _, ir in captured)


def _has_vectors(ir: str) -> bool:
    """Whether LLVM vectorized float64 code (any width: the host CPU's choice)."""
    return "x double>" in ir and any(f"<{n} x double>" in ir for n in (2, 4, 8, 16))


def _guarded_log():
    @njit
    def guarded_log(v):
        return math.log(v) if v > 0 else v

    return guarded_log


def test_users_function_keeps_its_code():
    """Numba's own compiles, before and after pyjlad's, keep vectorizers and speculation."""
    x = positive(9)

    @njit
    def vector_loop(v):  # no cbrt: a call to Numba's cbrt helper keeps LLVM's znver4 model from vectorizing
        return np.sqrt(v) + np.power(v, 2.5) + v ** -1.5 + np.square(v) + np.reciprocal(v)

    assert _has_vectors(_optimized_ir(vector_loop, x))  # <4 x double> on AVX2, <8 x double> on AVX-512
    assert "select i1" in _optimized_ir(_guarded_log(), 2.0)
    expected = vector_loop(x).copy()
    pyjlad.gradient(lambda v: np.sum(vector_loop(v)), x)
    assert np.array_equal(vector_loop(x), expected)
    assert "select i1" in _optimized_ir(_guarded_log(), 2.0)  # SimplifyCFG speculates again

    @njit
    def later(v):
        return np.sqrt(v) + np.power(v, 2.5) + v ** -1.5 + np.square(v) + np.reciprocal(v)

    assert _has_vectors(_optimized_ir(later, x))  # the vectorizers are back on


def test_enzyme_copy_has_branches_and_no_vectors():
    """What Enzyme gets: no vector code (callees compiled by the user first included), no float select."""
    x = mixed(9)
    calls_guarded(x)
    powers(positive(9))

    @njit
    def caller(v):
        return calls_guarded(v) + log_if_positive(v) + np.sum(powers(v * v + 1.0))

    caller(x)
    _, ir = enzyme_ir(caller, caller.signatures[0])
    assert "x double>" not in ir
    assert not [line for line in ir.splitlines() if " select " in line and "double" in line]
    assert "@llvm.log.f64" in ir
