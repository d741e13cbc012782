"""Complex powers ``z ** w`` (``w`` not the constant 2) differentiate: Numba's helper ``numba_cpow`` is defined in IR.

Numba computes ``z ** w`` by calling its C helper ``numba_cpow`` (CPython's ``_Py_c_pow``), which Enzyme cannot see
into: until 2026-12-07 ``(z ** 3).imag`` in a real loss was refused as "a defect in pyjlad or Enzyme" naming
``numba_cpow`` (a user-style probe). ``pyjlad/special.py`` now defines the helper with ``_Py_c_pow``'s formula
from libm functions Enzyme differentiates. Oracles: JAX in float64 (``jnp.power`` of complex numbers) and hand
formulas, from copies taken before each call; values bit for bit those of the ``@njit`` function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)


@njit
def power_part(a, b, p, q, real):
    z = complex(a, b) ** complex(p, q)
    return z.real if real else z.imag


def _power_part_jax(a, b, p, q, real):
    z = jnp.power(a + 1j * b, p + 1j * q)
    return jnp.real(z) if real else jnp.imag(z)


CASES = [(0.7, -0.4, 3.0, 0.0), (0.7, -0.4, 2.5, 0.0), (-1.3, 0.6, -1.5, 0.0), (0.9, 0.4, 0.5, 0.3),
         (2.0, 0.0, 3.0, 0.0), (-0.8, 1.1, 7.0, 0.0)]


@pytest.mark.parametrize("real", [True, False])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "z={:g}{:+g}j,w={:g}{:+g}j".format(*c))
def test_gradient_of_a_complex_power_in_base_and_exponent_matches_jax(case, real) -> None:
    a, b, p, q = case
    value, got = pyjlad.value_and_grad(power_part, wrt=(0, 1, 2, 3))(a, b, p, q, real)
    assert value == power_part(a, b, p, q, real)  # Numba's own value, bit for bit
    expected = jax.grad(_power_part_jax, argnums=(0, 1, 2, 3))(a, b, p, q, real)
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-12, atol=1e-12)


def test_the_cube_matches_the_hand_derivative_and_its_hessian() -> None:
    """Re((a + ib)^3) = a^3 - 3ab^2: gradient (3a^2 - 3b^2, -6ab), Hessian [[6a, -6b], [-6b, -6a]]."""

    @njit
    def cube_real(x):
        return (complex(x[0], x[1]) ** 3).real

    x = np.array([0.7, -0.4])
    before = x.copy()
    a, b = before
    np.testing.assert_allclose(pyjlad.gradient(cube_real, x), [3 * a * a - 3 * b * b, -6 * a * b], rtol=1e-13)
    np.testing.assert_allclose(pyjlad.hessian(cube_real, x), [[6 * a, -6 * b], [-6 * b, -6 * a]], rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def test_an_array_of_complex_numbers_raised_to_a_power() -> None:
    """sum(Re((0.9 e^{ix})^3)) = 0.729 sum(cos 3x): gradient -2.187 sin 3x."""

    @njit
    def loss(x):
        z = 0.9 * np.exp(1j * x)
        return np.sum((z ** 3).real)

    x = np.linspace(0.0, 1.0, 7)
    before = x.copy()
    np.testing.assert_allclose(pyjlad.gradient(loss, x), -3 * 0.729 * np.sin(3 * before), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, before)


def test_complex64_powers_compute_in_double_as_numba_does() -> None:
    @njit
    def loss(x):
        z = np.complex64(complex(x[0], x[1]))
        return np.float32((z ** np.complex64(2.5)).real)

    x = np.array([0.7, -0.4], dtype=np.float32)
    value, got = pyjlad.value_and_grad(loss)(x)
    assert value == loss(x)
    expected = jax.grad(lambda y: jnp.real(jnp.power(y[0] + 1j * y[1], 2.5)))(x.astype(np.float64))
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-5)


def test_zero_to_a_power_keeps_numbas_values() -> None:
    """0 ** w: 0 for a positive real w, NaN where CPython would raise (Numba's helper), 1 for w = 0."""
    for p, q, expected in [(2.5, 0.0, 0.0), (-1.5, 0.0, np.nan), (0.5, 0.3, np.nan), (0.0, 0.0, 1.0)]:
        value, _ = pyjlad.value_and_grad(power_part, wrt=(2,))(0.0, 0.0, p, q, True)
        np.testing.assert_equal(value, expected)
        np.testing.assert_equal(value, power_part(0.0, 0.0, p, q, True))


def test_preparing_a_module_twice_changes_nothing_more() -> None:
    """``pyjlad.special.prepare`` on a module it prepared before (modules linked after each was prepared): until
    2026-12-07 a second run defined Numba's helpers twice and sent the call inside ``hypot``'s own value function
    to ``hypot``'s wrapper (a call of itself)."""
    import subprocess

    from pyjlad.special import prepare

    text = "\n".join([
        "define double @f(ptr %a, ptr %b, ptr %o, double %x, ptr %e) {", "entry:",
        "  call void @numba_cpow(ptr %a, ptr %b, ptr %o)",
        "  %m = call double @numba_frexp(double %x, ptr %e)",
        "  %h = call double @hypot(double %x, double %m)",
        "  ret double %h", "}",
        "declare void @numba_cpow(ptr, ptr, ptr)", "declare double @numba_frexp(double, ptr)",
        "declare double @hypot(double, double)", ""])
    once = prepare(text)
    assert prepare(once) == once
    assert once.count("define linkonce_odr void @numba_cpow(") == 1
    assert "call double @hypot(double %x, double %y)" in once  # the value function calls libm's hypot
    checked = subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=once, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
