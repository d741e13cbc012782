"""Loop caches sized once for loops whose early exits are raises or NaN tests (:mod:`pyjlad.loop_caches`).

The control-flow reading it rests on (:mod:`pyjlad.ir.cfg`), which loops it allows (a NaN test, a raise, a
fatal error besides the counted exit) and which it refuses (a second normal exit: a convergence test under a
cap, a search), that Enzyme gets ``-enzyme-max-cache`` for NumPy's ``z.max()`` per sample and not for a capped
fixed-point iteration, and the derivatives of both against hand-derived formulas and JAX (float64). The capped
iteration is the case the option would break: with it, its caches would be sized for 10^6 rounds of 10^5
elements (800 GB).
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad import ParallelFallbackWarning
from pyjlad.engines import differentiate
from pyjlad.ir.cfg import ControlFlow
from pyjlad.loop_caches import MAX_CACHE, bounded_caches_fit

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from corpus.family_ml import classifier_jax, classifier_numpy  # noqa: E402 (the corpus's)

RNG = np.random.default_rng(20261201)

#: A counted loop over %n; {exit} is an early exit taken when %c holds, its target {target}.
_LOOP = """@.const.picklebuf.1 = internal constant [1 x i8] zeroinitializer
declare void @Py_FatalError(ptr)
define void @f(ptr %excinfo, ptr %x, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %j, %next ]
  %v = load double, ptr %x
  %c = {test}
  br i1 %c, label %early, label %next
next:
  %j = add i64 %i, 1
  %done = icmp eq i64 %j, %n
  br i1 %done, label %out, label %loop
early:
{target}
out:
  ret void
}}
"""
_RETURN = "  br label %out"
_RAISE = "  store ptr @.const.picklebuf.1, ptr %excinfo\n  br label %out"
_FATAL = "  call void @Py_FatalError(ptr null)\n  unreachable"
#: pyjlad's rewrite of a raise in a parallel loop's body (pyjlad.openmp_loops), and the flag's reset.
_REPORTED = "  store atomic i32 1, ptr @pyjlad.omp.failed unordered, align 4\n  br label %out"
_RESET = "  store atomic i32 0, ptr @pyjlad.omp.failed unordered, align 4\n  br label %out"


@pytest.mark.parametrize(("test", "target", "expected"), [
    ("fcmp uno double %v, 0.0", _RETURN, True),  # np.max's NaN test
    ("fcmp olt double %v, 0.0", _RAISE, True),  # a raise
    ("fcmp olt double %v, 0.0", _FATAL, True),  # Py_FatalError
    ("fcmp olt double %v, 0.0", _REPORTED, True),  # a raise in a parallel loop's body, reported
    ("fcmp olt double %v, 0.0", _RESET, False),  # not a report
    ("fcmp olt double %v, 0.0", _RETURN, False),  # a search / convergence test: stops early as a rule
    ("icmp eq i64 %i, 7", _RETURN, False),  # an integer search
])
def test_early_exits_allowed_only_when_exceptional(test, target, expected) -> None:
    assert bounded_caches_fit(_LOOP.format(test=test, target=target)) is expected


def test_loops_without_early_exits_change_nothing() -> None:
    counted = _LOOP.format(test="fcmp uno double %v, 0.0", target=_RETURN).replace(
        "br i1 %c, label %early, label %next", "br label %next")
    assert not bounded_caches_fit(counted)
    assert not bounded_caches_fit("define void @f() {\nentry:\n  ret void\n}\n")


def test_one_loop_that_stops_early_refuses_the_module() -> None:
    fits = _LOOP.format(test="fcmp uno double %v, 0.0", target=_RETURN)
    search = _LOOP.format(test="fcmp olt double %v, 0.0", target=_RETURN).replace("@f(", "@g(").replace(
        "@.const.picklebuf.1 = internal constant [1 x i8] zeroinitializer\ndeclare void @Py_FatalError(ptr)\n", "")
    assert bounded_caches_fit(fits)
    assert not bounded_caches_fit(fits + search)


def test_natural_loops_of_a_nest() -> None:
    body = ["entry:", "  br label %outer", "outer:", "  br label %inner", "inner:", "  %c = icmp eq i64 0, 0",
            "  br i1 %c, label %inner.end, label %inner", "inner.end:", "  %d = icmp eq i64 0, 0",
            "  br i1 %d, label %out, label %outer", "out:", "  ret void"]
    loops = {loop.header: loop for loop in ControlFlow.of(body).loops()}
    assert sorted(loops["outer"].blocks) == ["inner", "inner.end", "outer"]
    assert loops["outer"].exits == [("inner.end", "out")]
    assert sorted(loops["inner"].blocks) == ["inner"] and loops["inner"].exits == [("inner", "inner.end")]
    assert ControlFlow.of(body).dominators() == {"entry": "entry", "outer": "entry", "inner": "outer",
                                                 "inner.end": "inner", "out": "inner.end"}


@njit
def _fixed_point(x, maxiter):
    y = x.copy()
    for _ in range(maxiter):
        change = 0.0
        for i in range(y.shape[0]):
            new = 0.5 * (y[i] + x[i] / y[i])
            change += abs(new - y[i])
            y[i] = new
        if change < 1e-12:
            break
    return np.sum(y)


@pytest.fixture
def enzyme_options(monkeypatch) -> list[tuple[str, ...]]:
    """The options of every Enzyme run from here on."""
    seen: list[tuple[str, ...]] = []
    run = differentiate._differentiate

    def recording(toolchain, module, passes, what, options=(), *args, **kwargs):
        seen.append(tuple(options))
        return run(toolchain, module, passes, what, options, *args, **kwargs)

    monkeypatch.setattr(differentiate, "_differentiate", recording)
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    return seen


def test_max_per_sample_gets_sized_caches_and_matches_jax(enzyme_options) -> None:
    w, x, y = RNG.normal(size=(6, 5)) / 2, RNG.normal(size=(40, 5)), RNG.integers(0, 6, 40)
    copies = w.copy(), x.copy(), y.copy()
    expected = jax.grad(classifier_jax)(*[jnp.asarray(c) for c in copies])
    got = pyjlad.grad(njit(classifier_numpy.py_func))(w, x, y)
    assert MAX_CACHE in enzyme_options[-1]
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-12, atol=1e-14)
    for given, before in zip((w, x, y), copies, strict=True):
        np.testing.assert_array_equal(given, before)


def test_a_capped_convergence_loop_keeps_grown_caches(enzyme_options) -> None:
    """10^6 rounds allowed, a few run: sized for the cap, its caches would take 800 GB."""
    x = np.linspace(1.0, 4.0, 100_000)
    got = pyjlad.grad(njit(_fixed_point.py_func))(x, 1_000_000)
    assert MAX_CACHE not in enzyme_options[-1]
    np.testing.assert_allclose(got, 0.5 / np.sqrt(np.linspace(1.0, 4.0, 100_000)), rtol=1e-12)


@njit
def _inverse_norms(x):
    s = 0.0
    for i in range(x.shape[0]):
        t = 0.0
        for j in range(x.shape[1]):
            t += x[i, j] * x[i, j]
        s += 1.0 / t  # ZeroDivisionError for a zero row: a raise inside the loop
    return s


def test_a_raise_taken_inside_a_sized_loop_reaches_the_caller(enzyme_options) -> None:
    f = njit(_inverse_norms.py_func)
    x = RNG.normal(size=(8, 3))
    grad = pyjlad.grad(f)
    expected = jax.grad(lambda a: jnp.sum(1.0 / jnp.sum(a * a, axis=1)))(jnp.asarray(x.copy()))
    np.testing.assert_allclose(grad(x), np.asarray(expected), rtol=1e-12)
    assert MAX_CACHE in enzyme_options[-1]
    bad = x.copy()
    bad[5] = 0.0
    with pytest.raises(ZeroDivisionError):
        grad(bad)
    np.testing.assert_allclose(grad(x), np.asarray(expected), rtol=1e-12)  # and the next call is right


@njit(parallel=True)
def _parallel_row_maxima(x, k):
    """``np.max`` of each row's first ``k[i]`` elements, in a ``prange``: NumPy's ``max`` raises inside the body for
    an empty slice (Numba's gufunc wrapper then leaves its loop, which pyjlad reports through a flag)."""
    s = 0.0
    for i in prange(x.shape[0]):
        s += np.max(x[i, :k[i]]) ** 2
    return s


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_loops_get_sized_caches_and_report_raises(enzyme_options, parallel_on, threads) -> None:
    """The parallel derivative's loops had grown caches (``realloc``, for every row) only because the gufunc
    wrapper's exit on a raise was not read as one; sized now, the gradient matches JAX, and a raise in the body
    is still reported, never a value. (pyjlad then re-runs the function to raise its own exception, and Numba's
    parallel call mishandles one raised in a ``prange`` body: on several threads it loses it and returns a partial
    sum, so pyjlad raises DifferentiatedFunctionError; on one it returns with Python's error set, a SystemError.)"""
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    f = njit(parallel=True)(_parallel_row_maxima.py_func)
    x, k = RNG.normal(size=(64, 3)), np.full(64, 3)
    before = x.copy()
    expected = jax.grad(lambda a: jnp.sum(jnp.max(a, axis=1) ** 2))(jnp.asarray(x.copy()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        grad = pyjlad.grad(f, wrt=0)
        np.testing.assert_allclose(grad(x, k), np.asarray(expected), rtol=1e-12)
    assert MAX_CACHE in enzyme_options[-1]
    np.testing.assert_array_equal(x, before)
    empty = k.copy()
    empty[37] = 0
    with pytest.raises((pyjlad.DifferentiatedFunctionError, SystemError)):
        grad(x, empty)
    np.testing.assert_allclose(grad(x, k), np.asarray(expected), rtol=1e-12)  # and the next call is right
