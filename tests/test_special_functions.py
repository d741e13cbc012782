"""Every ``math``/NumPy/builtin scalar function Numba compiles for floats gets its derivative.

The list is :data:`special_table.SPECIALS` (the whole list, not a sample): for each function, a
loop ``s += f(x[i])`` (and, for NumPy functions, the array expression ``np.sum(f(x))``) is
differentiated by pyjlad and compared with JAX's float64 gradient of the same function at
points inside its domain, away from kinks and poles. The value pyjlad returns is also compared
bit for bit with the Numba function's own value (pyjlad gives special functions derivatives,
never other values). Forward mode, float32 and second derivatives are checked for the functions
whose derivative pyjlad supplies itself (``pyjlad/special.py``) and a few others.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numba
import numpy as np
import pytest
from special_table import NOT_IN_NUMBA, SPECIALS, Special, by_name, markdown

import pyjlad

jax.config.update("jax_enable_x64", True)

_COMPILED: dict[tuple[str, str], object] = {}


def _numba_function(spec: Special, form: str) -> object:
    """The ``@njit`` function of ``spec``: ``loop`` (a scalar loop) or ``array`` (``np.sum`` of the expression)."""
    key = (spec.name, form)
    if key not in _COMPILED:
        params = "x, y" if spec.nargs == 2 else "x"
        if form == "loop":
            pick = "        a = x[i]\n" + ("        b = y[i]\n" if spec.nargs == 2 else "")
            body = f"    s = 0.0\n    for i in range(x.shape[0]):\n{pick}        s += {spec.call}\n    return s\n"
        else:
            body = f"    return np.sum({spec.array})\n"
        namespace = {"math": math, "np": np}
        exec(f"def f({params}):\n{body}", namespace)  # noqa: S102
        _COMPILED[key] = numba.njit(namespace["f"])
    return _COMPILED[key]


def _arguments(spec: Special, dtype: type = np.float64) -> tuple[np.ndarray, ...]:
    columns = np.array(spec.points, dtype=dtype).T
    return tuple(np.ascontiguousarray(c) for c in columns)


def _oracle_gradient(spec: Special, args: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """JAX float64: the derivative of ``spec.oracle`` in each argument at each point."""
    grad = jax.vmap(jax.grad(spec.oracle, argnums=tuple(range(spec.nargs))))
    return tuple(np.asarray(g) for g in grad(*(jnp.asarray(a, dtype=jnp.float64) for a in args)))


def _oracle_value(spec: Special, args: tuple[np.ndarray, ...]) -> float:
    return float(jnp.sum(jax.vmap(spec.oracle)(*(jnp.asarray(a, dtype=jnp.float64) for a in args))))


def _check_gradient(spec: Special, form: str) -> None:
    f = _numba_function(spec, form)
    args = _arguments(spec)
    copies = tuple(a.copy() for a in args)
    expected = _oracle_gradient(spec, copies)
    expected_value = _oracle_value(spec, copies)
    own_value = f(*copies)
    value, grads = pyjlad.value_and_gradient(f, *args, wrt=tuple(range(spec.nargs)))
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)  # inputs untouched
    assert value == own_value, "pyjlad must not change the function's value"
    np.testing.assert_allclose(value, expected_value, rtol=1e-12, atol=1e-13)
    for k, (got, want) in enumerate(zip(grads, expected)):
        assert got.dtype == np.float64 and got.shape == args[k].shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14,
                                   err_msg=f"d {spec.name} / d argument {k} at {spec.points}")


@pytest.mark.parametrize("spec", SPECIALS, ids=lambda s: s.name)
def test_gradient_in_a_loop(spec: Special) -> None:
    _check_gradient(spec, "loop")


@pytest.mark.parametrize("spec", [s for s in SPECIALS if s.array], ids=lambda s: s.name)
def test_gradient_of_the_array_expression(spec: Special) -> None:
    _check_gradient(spec, "array")


def _float32_points(spec: Special) -> tuple[np.ndarray, ...]:
    """The points whose value and derivative are finite and of moderate size in float32."""
    args = _arguments(spec, np.float32)
    values = jax.vmap(spec.oracle)(*(jnp.asarray(a, dtype=jnp.float64) for a in args))
    grads = _oracle_gradient(spec, args)
    keep = np.abs(np.asarray(values)) < 1e30
    for g in grads:
        keep &= np.abs(g) < 1e30
    assert keep.sum() >= 2
    return tuple(np.ascontiguousarray(a[keep]) for a in args)


@pytest.mark.parametrize("spec", [s for s in SPECIALS if s.float32], ids=lambda s: s.name)
def test_float32(spec: Special) -> None:
    f = _numba_function(spec, "loop")
    args = _float32_points(spec)
    expected = _oracle_gradient(spec, tuple(a.copy() for a in args))
    grads = pyjlad.gradient(f, *args, wrt=tuple(range(spec.nargs)))
    for got, want in zip(grads, expected):
        assert got.dtype == np.float32
        scale = np.max(np.abs(want))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * scale, err_msg=spec.name)


#: Forward mode for the functions pyjlad gives derivatives itself, and a few Enzyme differentiates.
FORWARD = ["math.lgamma", "math.gamma", "math.erfc", "math.nextafter", "np.nextafter", "np.spacing",
           "math.frexp", "math.ldexp", "np.ldexp", "math.erf", "math.atan2", "np.logaddexp", "np.cbrt",
           "np.sinc", "np.remainder", "np.maximum", "math.floor", "np.sign", "np.float_power", "math.copysign"]


@pytest.mark.parametrize("name", FORWARD)
def test_forward_mode(name: str) -> None:
    spec = by_name(name)
    f = _numba_function(spec, "loop")
    args = _arguments(spec)
    rng = np.random.default_rng(len(name))
    tangents = tuple(rng.standard_normal(a.shape) for a in args)
    expected = sum(float(np.dot(g, t)) for g, t in zip(_oracle_gradient(spec, args), tangents))
    value, tangent = pyjlad.jvp(f, args, tangents)
    assert value == f(*args)
    np.testing.assert_allclose(tangent, expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["math.lgamma", "math.gamma", "math.erfc", "np.nextafter"])
def test_second_derivative(name: str) -> None:
    """Forward over reverse: lgamma'' is the trigamma function (Enzyme differentiates pyjlad's digamma)."""
    spec = by_name(name)
    f = _numba_function(spec, "loop")
    x = _arguments(spec)[0] if spec.nargs == 1 else None
    if x is None:
        x, y = _arguments(spec)
        hessian = pyjlad.hessian(f, x, y)
        expected = np.diag(np.zeros_like(x))
    else:
        hessian = pyjlad.hessian(f, x)
        second = jax.vmap(jax.grad(jax.grad(spec.oracle)))(jnp.asarray(x))
        expected = np.diag(np.asarray(second))
    np.testing.assert_allclose(hessian, expected, rtol=1e-10, atol=1e-12 * max(1.0, np.max(np.abs(expected))))


@numba.njit
def _lgamma_alone(t):
    return math.lgamma(t[0])


@numba.njit
def _gamma_alone(t):
    return math.gamma(t[0])


@numba.njit
def _lgamma_of_exp(t):
    return math.lgamma(math.exp(t[0]))


@numba.njit
def _ldexp_squared(t):
    return math.ldexp(t[0], 3) ** 2


@numba.njit
def _mantissa_squared(t):
    m, _ = math.frexp(t[0])
    return m * m


@pytest.mark.parametrize("f, oracle", [
    (_lgamma_alone, lambda t: jsp.gammaln(t[0])),
    (_gamma_alone, lambda t: jnp.exp(jsp.gammaln(t[0]))),  # gamma > 0 at the points below
    (_lgamma_of_exp, lambda t: jsp.gammaln(jnp.exp(t[0]))),
    (_ldexp_squared, lambda t: (8.0 * t[0]) ** 2),
    (_mantissa_squared, lambda t: (t[0] / 2.0) ** 2),  # frexp(1.7) = (0.85, 1): the exponent is 1 near 1.7
], ids=["lgamma(t[0])", "gamma(t[0])", "lgamma(exp(t[0]))", "ldexp(t[0], 3)**2", "frexp(t[0])[0]**2"])
def test_product_of_the_value_alone(f, oracle) -> None:
    """A function returning the special function's value itself: Enzyme's reverse sweep over the forward
    derivative pyjlad registers aborted on these ("cannot find deal with ptr that isnt arg"). ``ldexp`` and
    ``frexp`` (Enzyme's own rules around pyjlad's IR) passed before; their products took the same old form.
    Against ``jax.jvp(jax.grad)`` in float64 of the equivalent function near the point, from copies."""
    t, v = np.array([1.7, 0.3]), np.array([1.0, 0.5])
    t0, v0 = t.copy(), v.copy()
    expected = jax.jvp(jax.grad(oracle), (jnp.asarray(t0),), (jnp.asarray(v0),))[1]
    np.testing.assert_allclose(pyjlad.hvp(f, (t,), v), np.asarray(expected), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(t, t0)
    np.testing.assert_array_equal(v, v0)


def test_the_list_is_numbas() -> None:
    """Every float ufunc of Numba's ufunc database and every math function it types is in the table."""
    from numba.core.typing import mathdecl
    from numba.np import ufunc_db

    names = {s.name for s in SPECIALS}
    ufunc_db._lazy_init_db()
    float_ufuncs = {f"np.{u.__name__}" for u, loops in ufunc_db._ufunc_db.items()
                    if any(key.split("->")[0] in ("d", "dd", "di", "dl") for key in loops)}
    comparisons = {f"np.{n}" for n in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                                       "logical_and", "logical_or", "logical_xor", "logical_not")}
    assert len(float_ufuncs) > 60
    missing = float_ufuncs - names - comparisons
    assert not missing, f"float ufuncs of Numba missing from the table: {sorted(missing)}"
    typed_math = {f"math.{f.__name__}" for f, _ in mathdecl.registry.globals}
    assert len(typed_math) > 35
    missing = typed_math - names - set(NOT_IN_NUMBA)
    assert not missing, f"math functions Numba types missing from the table: {sorted(missing)}"


def _digamma() -> ctypes.CFUNCTYPE:
    """pyjlad's digamma IR, compiled on its own (external linkage) and callable from Python."""
    import llvmlite.binding as llvm
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    from pyjlad.special import _DIGAMMA_DECLS, digamma_ir

    module = llvm.parse_assembly(digamma_ir().replace("linkonce_odr ", "") + "\n" + "\n".join(_DIGAMMA_DECLS))
    module.verify()
    library = cpu_target.target_context.codegen().create_library("pyjlad_test_digamma")
    with global_compiler_lock:
        library.add_llvm_module(module)
        library.finalize()
    address = library.get_pointer_to_function("pyjlad.digamma")
    function = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(address)
    function.library = library  # keeps the code alive
    return function


def test_digamma_accuracy() -> None:
    """Relative error below 1e-13 against mpmath (50 digits) wherever |psi| > 1e-3, and near psi's zero."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    digamma = _digamma()
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(-30.0, 30.0, 600), 10.0 ** rng.uniform(-12.0, 15.0, 300),
                         rng.uniform(1.40, 1.52, 200), rng.uniform(9.5, 10.5, 100), -rng.uniform(0.0, 1.0, 100)])
    for x in xs:
        want = mpmath.digamma(mpmath.mpf(float(x)))
        if x < 0 and abs(want) < 1e-3:
            continue  # the zeros of psi on the negative axis: absolute accuracy only (checked below)
        error = abs(mpmath.mpf(digamma(float(x))) - want) / abs(want)
        assert error < 1e-13, (x, digamma(float(x)), want)
    for x in rng.uniform(-30.0, 0.0, 200):
        want = mpmath.digamma(mpmath.mpf(float(x)))
        assert abs(mpmath.mpf(digamma(float(x))) - want) < 1e-13 * max(1.0, abs(want)), x
    for x, want in ((math.inf, math.inf), (1e300, 690.7755278982137)):
        assert digamma(x) == pytest.approx(want, rel=1e-15)
    for x in (0.0, -0.0, -1.0, -7.0, -math.inf, math.nan):
        assert math.isnan(digamma(x))


def test_root_taylor_coefficients() -> None:
    """The constants of the series at psi's zero are psi^(k)(x0) / k! (recomputed with mpmath)."""
    mpmath = pytest.importorskip("mpmath")
    from pyjlad.special import _ROOT, _ROOT_TAYLOR

    mpmath.mp.dps = 50
    x0 = mpmath.findroot(mpmath.digamma, 1.46)
    assert _ROOT[0] == float(x0) and _ROOT[1] == float(x0 - _ROOT[0])
    for k, c in enumerate(_ROOT_TAYLOR, start=1):
        assert c == float(mpmath.polygamma(k, x0) / mpmath.factorial(k)), k


def test_nextafter_keeps_its_value_at_edges() -> None:
    """x + step is used only where it is bitwise nextafter: infinities, signed zeros keep their value."""

    @numba.njit
    def f(x, y):
        return np.nextafter(x[0], y[0]) + math.nextafter(x[1], y[1])

    big, tiny = np.finfo(np.float64).max, 5e-324
    cases = [(np.inf, 0.0), (-np.inf, 0.0), (-0.0, 0.0), (0.0, -0.0), (1.0, 1.0), (big, np.inf), (tiny, 0.0),
             (-tiny, 0.0), (np.nan, 1.0), (1.0, np.nan), (2.0, -np.inf)]
    for a, b in cases:
        x, y = np.array([a, a]), np.array([b, b])
        value, (dx, dy) = pyjlad.value_and_gradient(f, x, y, wrt=(0, 1))
        with np.errstate(over="ignore"):
            step = np.nextafter(a, b)
            want = step + step
        assert (np.isnan(value) and np.isnan(want)) or value == want, (a, b)
        np.testing.assert_array_equal(dy, [0.0, 0.0])
        assert np.all((dx == 0.0) | (dx == 1.0)), (a, b, dx)
        if np.isfinite(a) and np.isfinite(step) and step != 0.0:
            np.testing.assert_array_equal(dx, [1.0, 1.0])

    @numba.njit
    def one(x, y):
        return np.nextafter(x[0], y[0])

    for a, b in cases:  # the sign of a zero result survives
        x, y = np.array([a]), np.array([b])
        value, _ = pyjlad.value_and_gradient(one, x, y, wrt=(0, 1))
        with np.errstate(over="ignore"):
            want = np.nextafter(a, b)
        assert (np.isnan(value) and np.isnan(want)) or (value == want and np.signbit(value) == np.signbit(want))


def test_docs_table_is_current() -> None:
    """docs/functions.md is the table of this list (python tools/special_functions_doc.py rewrites it)."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "functions.md"
    assert doc.read_text() == markdown()


@pyjlad.custom_derivative
@numba.njit
def _twice_lgamma(x):
    return 2.0 * math.lgamma(x)


@_twice_lgamma.defjvp
@numba.njit
def _twice_lgamma_jvp(x, dx):
    return _twice_lgamma(x), 0.0  # deliberately wrong: shows the forward rule is the one used


def test_special_function_inside_a_custom_derivative() -> None:
    """lgamma in the body of a pyjlad.custom_derivative (a module linked with the caller's) differentiates."""

    @numba.njit
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += _twice_lgamma(x[i]) + math.lgamma(x[i])
        return s

    x = np.array([0.3, 2.5, 7.0])
    digamma = np.asarray(jax.vmap(jax.scipy.special.digamma)(jnp.asarray(x)))
    # reverse mode has no rule: the body is differentiated (2 lgamma + lgamma)
    np.testing.assert_allclose(pyjlad.gradient(f, x), 3.0 * digamma, rtol=1e-12)
    # forward mode uses the (zero) rule: only the direct lgamma contributes
    _, tangent = pyjlad.jvp(f, (x,), (np.ones(3),))
    np.testing.assert_allclose(tangent, digamma.sum(), rtol=1e-12)


def test_second_derivative_of_hypot_far_from_the_diagonal() -> None:
    """d2/dx2 hypot(x, 1) = 1 / (x^2 + 1)^1.5 (by hand). Until 2026-12-07 Enzyme's rule a/hypot(a, b), differentiated
    again, cancelled (1/h - a^2/h^3): relative errors 1.6e-8, 7.6e-6, 5.8e-3 at these points (pyjlad/special.py)."""
    f = numba.njit(lambda x: np.sum(np.hypot(x, 1.0)))
    x = np.array([1e4, 1e6, 1e7])
    exact = 1.0 / (x * x + 1.0) ** 1.5
    np.testing.assert_allclose(np.diag(pyjlad.hessian(f, x.copy())), exact, rtol=1e-12)
    np.testing.assert_array_equal(x, [1e4, 1e6, 1e7])


@numba.njit
def _hypot_scaled(a, b, w):
    return w * math.hypot(a, b)


@numba.njit
def _hypot_pairs(x):
    return np.sum(np.hypot(x[0::2], x[1::2]) ** 2 * 0.5 + np.hypot(x[0::2], x[1::2]))


def _hypot_points() -> list[tuple[float, float]]:
    """Pairs from equal magnitudes to 1e12 apart, of both signs, and subnormal ones."""
    rng = np.random.default_rng(7)
    points = [(3.0, 4.0), (-1e-8, 2.0), (5e11, -0.5), (1e-310, -3e-310), (2.0, 0.0), (0.0, -7.0)]
    points += [(float(a), float(b)) for a, b in zip(rng.standard_normal(8) * 10.0 ** rng.uniform(-6, 6, 8),
                                                      rng.standard_normal(8) * 10.0 ** rng.uniform(-6, 6, 8))]
    return points


def test_hypot_keeps_libms_value_and_has_exact_derivatives_of_both_orders() -> None:
    """The value bit for bit ``math.hypot``'s; gradients (reverse and forward) and the Hessian against the hand
    formulas d/da = a/h, d2/da2 = b^2/h^3, d2/dadb = -a b/h^3 (float64, no cancellation in these forms)."""
    for a, b in _hypot_points():
        h = math.hypot(a, b)
        value, (da, db) = pyjlad.value_and_gradient(_hypot_scaled, a, b, 1.0, wrt=(0, 1))
        assert value == h, (a, b)
        np.testing.assert_allclose([da, db], [a / h, b / h], rtol=1e-13 if abs(min(a, b, key=abs)) > 1e-300 else 1e-10,
                                   atol=0.0, err_msg=f"{(a, b)}")
        _, tangent = pyjlad.jvp(_hypot_scaled, (a, b, 1.0), (1.0, -2.0, 0.0))
        np.testing.assert_allclose(tangent, a / h - 2.0 * b / h, rtol=1e-11, atol=1e-300, err_msg=f"{(a, b)}")
    x = np.array([3.0, 4.0, 1e7, 1.0, -2.0, 5e-6, 0.5, -0.25])
    before = x.copy()
    a, b = before[0::2], before[1::2]
    h = np.hypot(a, b)
    hessian = pyjlad.hessian(_hypot_pairs, x)
    # 0.5 h^2 + h: its Hessian is [[1, 0], [0, 1]] + the Hessian of h, per pair
    expected = np.zeros((8, 8))
    for k in range(4):
        i, j = 2 * k, 2 * k + 1
        expected[i, i] = 1.0 + b[k] ** 2 / h[k] ** 3
        expected[j, j] = 1.0 + a[k] ** 2 / h[k] ** 3
        expected[i, j] = expected[j, i] = -a[k] * b[k] / h[k] ** 3
    np.testing.assert_allclose(hessian, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, before)


def test_float32_hypot_keeps_its_value_and_derivative() -> None:
    f = numba.njit(lambda x, y: np.float32(3.0) * np.hypot(x, y))
    for a, b in [(3.0, 4.0), (1e-3, -20.0), (7e5, 0.25)]:
        x, y = np.float32(a), np.float32(b)
        value, (dx, dy) = pyjlad.value_and_gradient(f, x, y, wrt=(0, 1))
        assert value == f(x, y)
        h = math.hypot(float(x), float(y))
        np.testing.assert_allclose([dx, dy], [3.0 * float(x) / h, 3.0 * float(y) / h], rtol=2e-6)
