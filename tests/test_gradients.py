"""Reverse-mode gradients against hand-derived formulas and central finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cases import CASES, Case, central_fd
from numba import njit

import pyjlad


def _as_tuple(wrt, value):
    return value if isinstance(wrt, tuple) else (value,)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_matches_analytic_and_fd(case: Case) -> None:
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    got = _as_tuple(case.wrt, pyjlad.gradient(case.func, *case.args, wrt=case.wrt))
    analytic = case.analytic(*case.args)
    analytic = analytic if isinstance(analytic, tuple) else (analytic,)
    wrt = case.wrt if isinstance(case.wrt, tuple) else (case.wrt,)
    assert len(got) == len(wrt)
    for index, g, expected in zip(wrt, got, analytic):
        arg = case.args[index]
        if isinstance(arg, np.ndarray):
            assert isinstance(g, np.ndarray)
            assert g.shape == arg.shape and g.dtype == arg.dtype
            assert not np.shares_memory(g, arg)
        else:
            assert type(g) is float
        np.testing.assert_allclose(g, expected, rtol=max(case.rtol, 1e-300), atol=case.rtol * 1e-3)
        fd = central_fd(case.func, case.args, index)
        np.testing.assert_allclose(g, fd, rtol=case.fd_rtol, atol=case.fd_rtol)
    # Inputs are never modified.
    for before, after in zip(originals, case.args):
        np.testing.assert_array_equal(before, after)


def test_seed000_cfunc_exact() -> None:
    """Seed 000 verbatim: the inner function, not the cfunc wrapper (Enzyme.jl #2505)."""
    from cases import seed000_func

    assert pyjlad.gradient(seed000_func, 2.0, 3.0, wrt=(0, 1)) == (3.0, 2.0)
    assert pyjlad.gradient(seed000_func, 2, 3, wrt=0) == 3.0  # ints converted to the cfunc's doubles


def test_value_and_gradient() -> None:
    x = np.linspace(-1.0, 2.0, 11)
    value, g = pyjlad.value_and_gradient(CASES[7].func, x)
    assert value == pytest.approx(float(np.sum(np.sin(x) * x)), rel=1e-12)
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-12)


def test_wrt_order_and_repeats() -> None:
    @njit
    def f(a, b, c):
        return a * 2.0 + b * 3.0 + c * 5.0

    assert pyjlad.gradient(f, 1.0, 1.0, 1.0, wrt=(2, 0)) == (5.0, 2.0)
    assert pyjlad.gradient(f, 1.0, 1.0, 1.0, wrt=(1, 1)) == (3.0, 3.0)
    assert pyjlad.gradient(f, 1.0, 1.0, 1.0, wrt=1) == 3.0


def test_grad_callable_reuses_compilation(monkeypatch) -> None:
    @njit
    def f(x):
        return np.sum(x ** 4)

    df = pyjlad.grad(f)
    x = np.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(df(x), 4 * x ** 3, rtol=1e-12)

    from pyjlad.engines import embedded

    def no_build(*args, **kwargs):
        raise AssertionError("second call compiled again")

    monkeypatch.setattr(embedded, "build", no_build)
    y = np.linspace(1.0, 2.0, 17)  # same types, different values and length
    np.testing.assert_allclose(df(y), 4 * y ** 3, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.gradient(f, y), 4 * y ** 3, rtol=1e-12)


def test_new_types_compile_new_gradient() -> None:
    @njit
    def f(x):
        return x[0] * x[-1]

    df = pyjlad.grad(f)
    a = np.array([2.0, 3.0, 5.0])
    np.testing.assert_array_equal(df(a), [5.0, 0.0, 2.0])
    np.testing.assert_array_equal(df(a.astype(np.float32)), np.array([5.0, 0.0, 2.0], np.float32))
    np.testing.assert_array_equal(df(a[::2]), [5.0, 2.0])


def test_value_and_grad_for_scipy() -> None:
    scipy_optimize = pytest.importorskip("scipy.optimize")

    @njit
    def rosen(x):
        s = 0.0
        for i in range(x.shape[0] - 1):
            s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
        return s

    res = scipy_optimize.minimize(pyjlad.value_and_grad(rosen), np.zeros(5), jac=True, method="BFGS")
    np.testing.assert_allclose(res.x, np.ones(5), atol=1e-4)


def test_long_loop_memory_is_reasonable() -> None:
    """A 10^5-step explicit Euler integration: reverse mode caches what it needs."""

    @njit
    def euler(k, x0):
        x = x0
        dt = 1e-5
        for _ in range(100_000):
            x = x + dt * (-k * x + math.sin(x))
        return x

    g = pyjlad.gradient(euler, 0.5, 1.0, wrt=(0, 1))
    fd = (central_fd(euler, (0.5, 1.0), 0), central_fd(euler, (0.5, 1.0), 1))
    np.testing.assert_allclose(g, fd, rtol=1e-6)


@njit
def _sum_of_squares_of_a_temporary(x, k):
    """A loss whose last loop only sums: ``grad`` needs its terms, not its sum."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        out[i] = k * x[i] + x[i] ** 2
    s = 0.0
    for i in range(n):
        s += out[i] * out[i]
    return s


def test_grad_leaves_out_the_value_and_value_and_grad_keeps_it() -> None:
    # grad builds its sweep with the result pointer "dupnoneed" (pyjlad.sweep.Sweep.value): Enzyme may skip
    # the summing loop. value_and_grad of the same function, built after it, must still return the value:
    # the two are separate derivatives (a shared one would give value 0.0 or the gradient without the sum).
    x = np.linspace(-1.0, 2.0, 1001)
    k = 0.7
    before = x.copy()
    out = k * before + before ** 2
    expected = 2.0 * out * (k + 2.0 * before)  # hand-derived
    g = pyjlad.grad(_sum_of_squares_of_a_temporary, wrt=(0, 1))(x, k)
    np.testing.assert_allclose(g[0], expected, rtol=1e-13)
    assert g[1] == pytest.approx(float(np.sum(2.0 * out * before)), rel=1e-13)
    value, g2 = pyjlad.value_and_grad(_sum_of_squares_of_a_temporary, wrt=(0, 1))(x, k)
    assert value == pytest.approx(float(np.sum(out * out)), rel=1e-13)
    np.testing.assert_allclose(g2[0], expected, rtol=1e-13)
    np.testing.assert_array_equal(x, before)


def test_only_grad_asks_enzyme_to_leave_out_the_value() -> None:
    from pyjlad.engines.driver import ad_driver
    from pyjlad.export import export, numba_argtypes

    abi = export(_sum_of_squares_of_a_temporary, numba_argtypes((np.ones(3), 1.0))).abi

    def result_marker(mode: str = "reverse", **kwargs) -> str:
        acts = ("dup", "active" if mode == "reverse" else "dup")
        text = ad_driver(abi, mode, acts, salt="s", **kwargs).text
        call = next(line for line in text.splitlines() if "(...) @__enzyme_" in line)
        return call.split("ptr %ret")[0].rsplit("ptr @", 1)[1].strip(" ,")

    assert result_marker() == "enzyme_dup"
    assert result_marker(value=False) == "enzyme_dupnoneed"
    assert ad_driver(abi, "reverse", ("dup", "active"), salt="s", value=False).symbol != ad_driver(
        abi, "reverse", ("dup", "active"), salt="s").symbol
    assert result_marker(mode="forward", value=False) == "enzyme_dup"  # forward mode returns the value's tangent
