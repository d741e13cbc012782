"""Custom derivative rules (pyjlad.custom_derivative): the rules are used, in both modes, and only then.

Oracles: hand-derived derivatives of the functions the rules describe, central
finite differences, and deliberately different (but self-consistent) rules whose
effect on the result is predicted by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cases import central_fd
from numba import njit

import pyjlad
from pyjlad.engines.julia import julia_module_text
from pyjlad.export import export, numba_argtypes


# A function whose true derivative differs from its rule: the rule claims f(x) = 1.5 x^2.
@pyjlad.custom_derivative
@njit
def square(x):
    return x * x


@square.defvjp
@njit
def _square_vjp(x, g):
    return 3.0 * x * g


@njit
def square_loss(x):
    return square(x) + math.sin(x)


def test_reverse_rule_is_used_and_changes_the_result() -> None:
    x = 2.0
    assert square_loss(x) == pytest.approx(4.0 + math.sin(2.0))  # the primal is the function itself
    assert pyjlad.gradient(square_loss, x) == pytest.approx(3.0 * x + math.cos(x), rel=1e-14)
    assert pyjlad.gradient(square, x) == pytest.approx(3.0 * x, rel=1e-14)  # differentiated directly


def test_mode_without_a_rule_differentiates_the_body() -> None:
    # No forward rule: forward mode differentiates x * x itself (2x), not the reverse rule (3x).
    value, tangent = pyjlad.jvp(square_loss, (2.0,), (1.0,))
    assert value == pytest.approx(4.0 + math.sin(2.0))
    assert tangent == pytest.approx(4.0 + math.cos(2.0), rel=1e-14)


def test_hessian_differentiates_through_the_reverse_rule() -> None:
    # Forward over reverse: d/dx (3x + cos x) = 3 - sin x.
    assert pyjlad.hessian(square_loss, 2.0) == pytest.approx(3.0 - math.sin(2.0), rel=1e-12)


# Two arguments, both rules, one argument constant at the call site.
@pyjlad.custom_derivative
@njit
def product(x, y):
    return x * y


@product.defvjp
@njit
def _product_vjp(x, y, g):
    return 2.0 * y * g, 2.0 * x * g  # the rule of 2xy


@product.defjvp
@njit
def _product_jvp(x, y, dx, dy):
    return x * y, 2.0 * (dx * y + x * dy)


@njit
def product_loss(xs, c):
    s = 0.0
    for i in range(xs.shape[0]):
        s += product(xs[i], c) + product(xs[i], xs[i])
    return s


def test_both_rules_with_constant_and_active_arguments() -> None:
    xs, c = np.array([1.0, 2.0, 3.0]), 5.0
    expected = 2.0 * c + 4.0 * xs  # from the rules of 2xy and 2x^2
    np.testing.assert_allclose(pyjlad.gradient(product_loss, xs, c), expected, rtol=1e-14)
    gx, gc = pyjlad.gradient(product_loss, xs, c, wrt=(0, 1))
    np.testing.assert_allclose(gx, expected, rtol=1e-14)
    assert gc == pytest.approx(2.0 * xs.sum(), rel=1e-14)
    np.testing.assert_allclose(pyjlad.jacobian(product_loss, xs, c, mode="forward"), expected, rtol=1e-14)


# The motivating case: an iterative solver differentiated by the implicit function theorem.
@pyjlad.custom_derivative
@njit
def cubic_root(p):
    """The real root t of t^3 + t = p, by Newton's method."""
    t = p
    for _ in range(100):
        t -= (t * t * t + t - p) / (3.0 * t * t + 1.0)
    return t


@cubic_root.defvjp
@njit
def _cubic_root_vjp(p, g):
    t = cubic_root(p)
    return g / (3.0 * t * t + 1.0)


@cubic_root.defjvp
@njit
def _cubic_root_jvp(p, dp):
    t = cubic_root(p)
    return t, dp / (3.0 * t * t + 1.0)


@njit
def root_energy(ps):
    s = 0.0
    for i in range(ps.shape[0]):
        s += cubic_root(ps[i]) ** 2
    return s


def test_implicit_function_rule_matches_finite_differences() -> None:
    ps = np.array([0.5, 2.0, 10.0, -3.0])
    ts = np.array([cubic_root(p) for p in ps])
    np.testing.assert_allclose(ts ** 3 + ts, ps, rtol=1e-12)
    analytic = 2.0 * ts / (3.0 * ts ** 2 + 1.0)
    grad = pyjlad.gradient(root_energy, ps)
    np.testing.assert_allclose(grad, analytic, rtol=1e-12)
    np.testing.assert_allclose(grad, central_fd(root_energy, (ps,), 0), rtol=1e-6)
    np.testing.assert_allclose(pyjlad.jacobian(root_energy, ps, mode="forward"), analytic, rtol=1e-12)


def test_status_code_stays_out_of_the_differentiated_signature() -> None:
    # Seed 001's failure: Enzyme took an i32 status return as a differentiable value.
    # The registered symbol returns only the double; Numba's status is consumed in the adapter.
    glue = square.modules()[-1]
    assert f"define linkonce_odr double @{square.symbol}(ptr %args)" in glue
    assert f"@__enzyme_register_gradient_{square.symbol} = global [3 x ptr]" in glue
    assert "@__enzyme_register_derivative_" not in glue  # no forward rule given


@pytest.mark.parametrize("version", (15, 16, 19, 22))
def test_rule_modules_are_portable(version: int) -> None:
    import shutil
    import subprocess

    tool = shutil.which(f"llvm-as-{version}")
    if tool is None:
        pytest.skip(f"llvm-as-{version} is not installed")
    for module in product.modules():
        result = subprocess.run([tool, "-o", "/dev/null", "-"], input=module, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def test_bad_rules_are_refused_clearly() -> None:
    f = pyjlad.custom_derivative(njit(lambda x, y: x * y))
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="must take 3"):
        f.defvjp(njit(lambda x, g: g))
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="must take 4"):
        f.defjvp(njit(lambda x, y, dx: dx))
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="plain positional"):
        pyjlad.custom_derivative(njit(lambda *xs: xs[0]))
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="no arguments"):
        pyjlad.custom_derivative(njit(lambda: 1.0))

    g = pyjlad.custom_derivative(njit(lambda x, y: x * y))
    g.defvjp(njit(lambda x, y, dg: (y * dg,)))  # one adjoint for two arguments

    @njit
    def uses_g(x):
        return g(x, 2.0)

    with pytest.raises(pyjlad.UnsupportedFunctionError, match="a tuple of 2 floats"):
        pyjlad.gradient(uses_g, 1.0)


def test_julia_engine_refuses_rules_clearly() -> None:
    exported = export(square_loss, numba_argtypes((2.0,)))
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="engine='embedded'"):
        julia_module_text(exported)


@pyjlad.custom_derivative
@njit
def _checked_log(p):
    return math.log(p) if p > 0.0 else math.nan


@_checked_log.defvjp
@njit
def _checked_log_vjp(p, g):
    if p <= 0.0:
        raise ValueError("the rule: p must be positive")
    return g / p


@njit
def _sum_of_checked_logs(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += _checked_log(x[i])
    return s


def test_a_rule_that_raises_gives_nan_not_a_silent_zero() -> None:
    """Its exception cannot cross Enzyme's derivative; the adjoint it left unwritten was read as 0 (a plausible,
    wrong gradient; found by a user-style probe, 2026-12-04). Oracle: d/dx log x = 1/x by hand."""
    np.testing.assert_allclose(pyjlad.gradient(_sum_of_checked_logs, np.array([1.0, 4.0])), [1.0, 0.25], rtol=1e-15)
    got = pyjlad.gradient(_sum_of_checked_logs, np.array([1.0, -2.0, 4.0]))
    assert got[0] == 1.0 and np.isnan(got[1]) and got[2] == 0.25


@pyjlad.custom_derivative
@njit
def _cube_forward_only(p):
    return p * p * p


@_cube_forward_only.defjvp
@njit
def _cube_forward_rule(p, dp):
    return p * p * p, 3.0 * p * p * dp


@njit
def _sum_and_cube(x):
    return np.sum(x) + _cube_forward_only(x[0])


def test_hessians_of_a_function_calling_a_rule_with_a_forward_rule_only() -> None:
    """Reverse over forward, through the forward rule: until 2026-12-06 Enzyme's output was an invalid module
    (forward over reverse called the forward rule's adapter with the reverse sweep's arguments); a user-style probe.
    By hand: d2/dx0^2 (x0 + x1 + x0^3) = 6 x0, every other entry 0."""
    x = np.array([1.5, 2.0])
    before = x.copy()
    np.testing.assert_allclose(pyjlad.hvp(_sum_and_cube, (x,), np.array([1.0, 0.0])), [9.0, 0.0], rtol=1e-15)
    np.testing.assert_allclose(pyjlad.hvp(_sum_and_cube, (x,), np.array([0.5, 2.0])), [4.5, 0.0], rtol=1e-15)
    np.testing.assert_allclose(pyjlad.hessian(_sum_and_cube, x), [[9.0, 0.0], [0.0, 0.0]], rtol=1e-15)
    np.testing.assert_allclose(pyjlad.grad(_sum_and_cube)(x), [3.0 * 1.5 ** 2 + 1.0, 1.0], rtol=1e-15)
    np.testing.assert_array_equal(x, before)
