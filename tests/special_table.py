"""Every ``math``, NumPy and builtin scalar function Numba compiles for floats, with a JAX twin.

One :class:`Special` per function: how Numba code calls it on scalars ``a`` (and ``b``), the
same function in JAX (float64; the oracle of the tests), points inside its domain away from
kinks and poles, and the derivative pyjlad gives it (the ``docs/functions.md`` table is written
from the same list). Functions Numba does not compile for floats (``math.fmod``,
``math.remainder``, ``math.modf``, ``math.log(x, base)``, ``np.heaviside``, ``np.i0``, scalar
``np.clip``; ``math.gcd`` takes integers) are listed in :data:`NOT_IN_NUMBA`.

The enumeration follows Numba 0.68: ``numba/core/typing/mathdecl.py`` and
``numba/cpython/mathimpl.py`` for ``math``, ``numba/np/ufunc_db.py`` for the ufuncs (those with
a float loop), ``numba/np/arraymath.py`` for ``np.sinc``, ``np.round``/``np.around``,
``np.clip`` and ``np.nan_to_num``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.special as jsp  # noqa: E402

sg = jax.lax.stop_gradient


@dataclass(frozen=True)
class Special:
    """One scalar function.

    Attributes
    ----------
    name:
        As the user writes it (``math.lgamma``, ``np.arctan2``, ``abs``).
    call:
        A Numba expression of one call on float scalars ``a`` (and ``b``).
    oracle:
        The same function of JAX float64 scalars.
    points:
        Argument tuples inside the domain, away from kinks and poles.
    derivative:
        The derivative pyjlad gives it (for the documentation).
    array:
        A NumPy array expression of arrays ``x`` (and ``y``) whose sum is the sum of ``call``
        over the points, or ``None`` for scalar-only functions.
    float32:
        Also checked with float32 arguments.
    via:
        Who differentiates it: ``"Enzyme"`` (its rules for libm functions and LLVM
        instructions), or what ``pyjlad/special.py`` adds.
    """

    name: str
    call: str
    oracle: Callable[..., Any]
    points: tuple[tuple[float, ...], ...]
    derivative: str
    array: str | None = None
    float32: bool = False
    via: str = "Enzyme"

    @property
    def nargs(self) -> int:
        return len(self.points[0])


def _unary(name: str, call: str, oracle: Callable[..., Any], points: tuple[float, ...], derivative: str,
           array: str | None = None, float32: bool = False, via: str = "Enzyme") -> Special:
    return Special(name, call, oracle, tuple((p,) for p in points), derivative, array, float32, via)


def _binary(name: str, call: str, oracle: Callable[..., Any], points: tuple[tuple[float, float], ...],
            derivative: str, array: str | None = None, float32: bool = False, via: str = "Enzyme") -> Special:
    return Special(name, call, oracle, points, derivative, array, float32, via)


_RULE = "pyjlad rule (registered with Enzyme)"
_CLAMP = "Enzyme, its argument clamped to [-20, 20] by pyjlad"
_STEP = "pyjlad: x + inactive step"
_HYPOT = "pyjlad: libm's value, differentiated as m sqrt(1 + (s/m)^2)"
_HELPER = "pyjlad: Numba's helper defined around libm's (Enzyme's rule)"


_ANY = (-2.3, -0.4, 0.7, 1.9)
_UNIT = (-0.8, -0.3, 0.2, 0.65)
_POSITIVE = (0.05, 0.7, 2.5, 40.0)
_NONINTEGER = (-2.6, -0.4, 0.3, 1.7, 4.5)
_PAIRS = ((0.7, 1.3), (-1.2, 0.4), (2.5, -0.8), (-0.3, -1.7))
_POSITIVE_PAIRS = ((0.7, 1.3), (1.8, 0.4), (2.5, -0.8), (0.3, 2.2))
_DISTINCT_PAIRS = ((0.7, 1.3), (-1.2, 0.4), (2.5, -0.8), (-0.3, -1.7))  # a != b: no tie in max/min
_GAMMA_POINTS = (-3.7, -2.5, -0.5, 0.01, 0.3, 1.4616321449683622, 2.0, 7.5, 25.0, 150.5)
_LGAMMA_POINTS = (-3.7, -0.5, 0.01, 0.3, 1.4616321449683622, 2.0, 7.5, 25.0, 1.0e4)


def _gamma(a: Any) -> Any:
    return jnp.exp(jsp.gammaln(a)) * jsp.gammasgn(a)


def _frexp_mantissa(a: Any) -> Any:
    return a * 2.0 ** -sg(jnp.frexp(a)[1]).astype(a.dtype)


def _nextafter(a: Any, b: Any) -> Any:  # JAX has no derivative of nextafter: x plus a constant step
    return a + (jnp.nextafter(sg(a), sg(b)) - sg(a))


MATH = [
    _unary("math.acos", "math.acos(a)", jnp.arccos, _UNIT, "-1/sqrt(1-x^2)"),
    _unary("math.acosh", "math.acosh(a)", jnp.arccosh, (1.2, 2.5, 10.0), "1/sqrt(x^2-1)"),
    _unary("math.asin", "math.asin(a)", jnp.arcsin, _UNIT, "1/sqrt(1-x^2)"),
    _unary("math.asinh", "math.asinh(a)", jnp.arcsinh, _ANY, "1/sqrt(x^2+1)"),
    _unary("math.atan", "math.atan(a)", jnp.arctan, _ANY, "1/(1+x^2)"),
    _unary("math.atanh", "math.atanh(a)", jnp.arctanh, _UNIT, "1/(1-x^2)"),
    _unary("math.ceil", "math.ceil(a)", jnp.ceil, _NONINTEGER, "0"),
    _unary("math.cos", "math.cos(a)", jnp.cos, _ANY, "-sin(x)"),
    _unary("math.cosh", "math.cosh(a)", jnp.cosh, _ANY, "sinh(x)"),
    _unary("math.degrees", "math.degrees(a)", jnp.degrees, _ANY, "180/pi"),
    _unary("math.erf", "math.erf(a)", jsp.erf, (-2.0, -0.3, 0.5, 1.7), "2/sqrt(pi) exp(-x^2)", float32=True),
    _unary("math.erfc", "math.erfc(a)", jsp.erfc, (-2.0, -0.3, 0.5, 1.7, 4.0), "-2/sqrt(pi) exp(-x^2)",
           float32=True, via="Enzyme (declaration fixed by pyjlad)"),
    _unary("math.exp", "math.exp(a)", jnp.exp, _ANY, "exp(x)", float32=True),
    _unary("math.exp2", "math.exp2(a)", jnp.exp2, _ANY, "log(2) 2^x"),
    _unary("math.expm1", "math.expm1(a)", jnp.expm1, (-2.0, 1e-5, 0.7), "exp(x)"),
    _unary("math.fabs", "math.fabs(a)", jnp.abs, _ANY, "sign(x)"),
    _unary("math.floor", "math.floor(a)", jnp.floor, _NONINTEGER, "0"),
    _unary("math.frexp", "math.frexp(a)[0]", _frexp_mantissa, (0.3, -5.5, 1000.25, 3.0e-300),
           "mantissa: 2^-e (exponent: an integer)", float32=True, via=_HELPER),
    _unary("math.gamma", "math.gamma(a)", _gamma, _GAMMA_POINTS, "gamma(x) digamma(x) (pyjlad's digamma)",
           float32=True, via=_RULE),
    _unary("math.isfinite", "a * math.isfinite(a)", lambda a: a * jnp.isfinite(a), _ANY,
           "a bool: no derivative (here x * isfinite(x))"),
    _unary("math.isinf", "a * (1.0 - math.isinf(a))", lambda a: a * (1.0 - jnp.isinf(a)), _ANY,
           "a bool: no derivative (here x * (1 - isinf(x)))"),
    _unary("math.isnan", "a * (1.0 - math.isnan(a))", lambda a: a * (1.0 - jnp.isnan(a)), _ANY,
           "a bool: no derivative (here x * (1 - isnan(x)))"),
    _unary("math.ldexp", "math.ldexp(a, 3)", lambda a: a * 8.0, _ANY, "2^n", float32=True, via=_HELPER),
    _unary("math.lgamma", "math.lgamma(a)", jsp.gammaln, _LGAMMA_POINTS, "digamma(x) (pyjlad's digamma)",
           float32=True, via=_RULE),
    _unary("math.log", "math.log(a)", jnp.log, _POSITIVE, "1/x", float32=True),
    _unary("math.log10", "math.log10(a)", jnp.log10, _POSITIVE, "1/(x log 10)"),
    _unary("math.log1p", "math.log1p(a)", jnp.log1p, (-0.5, 1e-6, 3.0), "1/(1+x)"),
    _unary("math.log2", "math.log2(a)", jnp.log2, _POSITIVE, "1/(x log 2)"),
    _unary("math.radians", "math.radians(a)", jnp.radians, _ANY, "pi/180"),
    _unary("math.sin", "math.sin(a)", jnp.sin, _ANY, "cos(x)", float32=True),
    _unary("math.sinh", "math.sinh(a)", jnp.sinh, _ANY, "cosh(x)"),
    _unary("math.sqrt", "math.sqrt(a)", jnp.sqrt, _POSITIVE, "1/(2 sqrt(x))"),
    _unary("math.tan", "math.tan(a)", jnp.tan, (-1.2, 0.3, 1.0), "1 + tan(x)^2"),
    _unary("math.tanh", "math.tanh(a)", jnp.tanh, _ANY, "1 - tanh(x)^2 (0 for \\|x\\| > 20)", float32=True, via=_CLAMP),
    _unary("math.trunc", "math.trunc(a)", jnp.trunc, _NONINTEGER, "0"),
    _binary("math.atan2", "math.atan2(a, b)", jnp.arctan2, _PAIRS, "(b, -a)/(a^2+b^2)", float32=True),
    _binary("math.copysign", "math.copysign(a, b)", jnp.copysign, _PAIRS, "(sign(a) sign(b), 0)"),
    _binary("math.hypot", "math.hypot(a, b)", jnp.hypot, _PAIRS, "(a, b)/hypot(a, b)", float32=True, via=_HYPOT),
    _binary("math.nextafter", "math.nextafter(a, b)", _nextafter, _PAIRS, "(1, 0): a step of one ulp",
            float32=True, via=_STEP),
    _binary("math.pow", "math.pow(a, b)", jnp.power, _POSITIVE_PAIRS, "(b a^(b-1), a^b log a)"),
]

_UFUNC_UNARY = [
    # (ufunc, oracle, points, derivative)
    ("absolute", jnp.abs, _ANY, "sign(x)"),
    ("arccos", jnp.arccos, _UNIT, "-1/sqrt(1-x^2)"),
    ("arccosh", jnp.arccosh, (1.2, 2.5, 10.0), "1/sqrt(x^2-1)"),
    ("arcsin", jnp.arcsin, _UNIT, "1/sqrt(1-x^2)"),
    ("arcsinh", jnp.arcsinh, _ANY, "1/sqrt(x^2+1)"),
    ("arctan", jnp.arctan, _ANY, "1/(1+x^2)"),
    ("arctanh", jnp.arctanh, _UNIT, "1/(1-x^2)"),
    ("cbrt", jnp.cbrt, _ANY, "x^(-2/3)/3"),
    ("ceil", jnp.ceil, _NONINTEGER, "0"),
    ("conjugate", jnp.conjugate, _ANY, "1 (real x)"),
    ("cos", jnp.cos, _ANY, "-sin(x)"),
    ("cosh", jnp.cosh, _ANY, "sinh(x)"),
    ("deg2rad", jnp.deg2rad, _ANY, "pi/180"),
    ("degrees", jnp.degrees, _ANY, "180/pi"),
    ("exp", jnp.exp, _ANY, "exp(x)"),
    ("exp2", jnp.exp2, _ANY, "log(2) 2^x"),
    ("expm1", jnp.expm1, (-2.0, 1e-5, 0.7), "exp(x)"),
    ("fabs", jnp.fabs, _ANY, "sign(x)"),
    ("floor", jnp.floor, _NONINTEGER, "0"),
    ("log", jnp.log, _POSITIVE, "1/x"),
    ("log10", jnp.log10, _POSITIVE, "1/(x log 10)"),
    ("log1p", jnp.log1p, (-0.5, 1e-6, 3.0), "1/(1+x)"),
    ("log2", jnp.log2, _POSITIVE, "1/(x log 2)"),
    ("negative", jnp.negative, _ANY, "-1"),
    ("positive", jnp.positive, _ANY, "1"),
    ("rad2deg", jnp.rad2deg, _ANY, "180/pi"),
    ("radians", jnp.radians, _ANY, "pi/180"),
    ("reciprocal", jnp.reciprocal, _ANY, "-1/x^2"),
    ("rint", jnp.rint, _NONINTEGER, "0"),
    ("sign", jnp.sign, _ANY, "0"),
    ("sin", jnp.sin, _ANY, "cos(x)"),
    ("sinh", jnp.sinh, _ANY, "cosh(x)"),
    ("spacing", lambda a: jnp.spacing(sg(a)), _ANY, "0 (a step function; nextafter(x, inf) - x)"),
    ("sqrt", jnp.sqrt, _POSITIVE, "1/(2 sqrt(x))"),
    ("square", jnp.square, _ANY, "2x"),
    ("tan", jnp.tan, (-1.2, 0.3, 1.0), "1 + tan(x)^2"),
    ("tanh", jnp.tanh, _ANY, "1 - tanh(x)^2 (0 for \\|x\\| > 20)"),
    ("trunc", jnp.trunc, _NONINTEGER, "0"),
]
_UFUNC_FLOAT32 = {"cbrt", "spacing", "log1p", "arctanh", "tanh"}

_UFUNC_BINARY = [
    ("add", jnp.add, _PAIRS, "(1, 1)"),
    ("subtract", jnp.subtract, _PAIRS, "(1, -1)"),
    ("multiply", jnp.multiply, _PAIRS, "(b, a)"),
    ("divide", jnp.divide, _PAIRS, "(1/b, -a/b^2)"),
    ("true_divide", jnp.true_divide, _PAIRS, "(1/b, -a/b^2)"),
    ("floor_divide", lambda a, b: sg(jnp.floor_divide(a, b)), _PAIRS, "(0, 0)"),
    ("remainder", lambda a, b: a - b * sg(jnp.floor(a / b)), _PAIRS, "(1, -floor(a/b))"),
    ("mod", lambda a, b: a - b * sg(jnp.floor(a / b)), _PAIRS, "(1, -floor(a/b))"),
    ("fmod", lambda a, b: a - b * sg(jnp.trunc(a / b)), _PAIRS, "(1, -trunc(a/b))"),
    ("arctan2", jnp.arctan2, _PAIRS, "(b, -a)/(a^2+b^2)"),
    ("copysign", jnp.copysign, _PAIRS, "(sign(a) sign(b), 0)"),
    ("float_power", jnp.float_power, _POSITIVE_PAIRS, "(b a^(b-1), a^b log a)"),
    ("power", jnp.power, _POSITIVE_PAIRS, "(b a^(b-1), a^b log a)"),
    ("fmax", jnp.fmax, _DISTINCT_PAIRS, "the larger argument's"),
    ("fmin", jnp.fmin, _DISTINCT_PAIRS, "the smaller argument's"),
    ("maximum", jnp.maximum, _DISTINCT_PAIRS, "the larger argument's"),
    ("minimum", jnp.minimum, _DISTINCT_PAIRS, "the smaller argument's"),
    ("hypot", jnp.hypot, _PAIRS, "(a, b)/hypot(a, b)"),
    ("logaddexp", jnp.logaddexp, _PAIRS, "softmax weights (e^a, e^b)/(e^a+e^b)"),
    ("logaddexp2", jnp.logaddexp2, _PAIRS, "(2^a, 2^b)/(2^a+2^b)"),
    ("nextafter", _nextafter, _PAIRS, "(1, 0): a step of one ulp"),
]
_UFUNC_BINARY_FLOAT32 = {"nextafter", "logaddexp", "arctan2", "hypot"}

_PREDICATES = [
    ("isfinite", "x * isfinite(x)", lambda a: a * jnp.isfinite(a), "a * np.isfinite(a)", "x * np.isfinite(x)"),
    ("isinf", "x * (1 - isinf(x))", lambda a: a * (1.0 - jnp.isinf(a)), "a * (1.0 - np.isinf(a))",
     "x * (1.0 - np.isinf(x))"),
    ("isnan", "x * (1 - isnan(x))", lambda a: a * (1.0 - jnp.isnan(a)), "a * (1.0 - np.isnan(a))",
     "x * (1.0 - np.isnan(x))"),
    ("signbit", "x * signbit(x)", lambda a: a * jnp.signbit(a), "a * np.signbit(a)", "x * np.signbit(x)"),
]

NUMPY = [
    *(_unary(f"np.{u}", f"np.{u}(a)", oracle, points, derivative, f"np.{u}(x)", float32=u in _UFUNC_FLOAT32,
             via=_STEP if u == "spacing" else _CLAMP if u == "tanh" else "Enzyme")
      for u, oracle, points, derivative in _UFUNC_UNARY),
    *(_binary(f"np.{u}", f"np.{u}(a, b)", oracle, points, derivative, f"np.{u}(x, y)",
              float32=u in _UFUNC_BINARY_FLOAT32,
              via=_STEP if u == "nextafter" else _HYPOT if u == "hypot" else "Enzyme")
      for u, oracle, points, derivative in _UFUNC_BINARY),
    *(_unary(f"np.{u}", call, oracle, _ANY, f"a bool: no derivative (here {what})", array)
      for u, what, oracle, call, array in _PREDICATES),
    _unary("np.abs", "np.abs(a)", jnp.abs, _ANY, "sign(x)", "np.abs(x)"),
    _binary("np.divmod", "np.divmod(a, b)[1]", lambda a, b: a - b * sg(jnp.floor(a / b)), _PAIRS,
            "quotient: (0, 0); remainder: (1, -floor(a/b))", "np.divmod(x, y)[1]"),
    _unary("np.ldexp", "np.ldexp(a, 3)", lambda a: a * 8.0, _ANY, "2^n", "np.ldexp(x, 3)", float32=True,
           via=_HELPER),
    _unary("np.sinc", "np.sinc(a)", jnp.sinc, _ANY, "(cos(pi x) - sinc(x))/x", "np.sinc(x)"),
    _unary("np.round", "np.round(a, 2)", lambda a: sg(jnp.round(a, 2)), (-2.3171, 0.4449, 1.9), "0",
           "np.round(x, 2)"),
    _unary("np.around", "np.around(a)", lambda a: sg(jnp.round(a)), _NONINTEGER, "0", "np.around(x)"),
    _unary("np.nan_to_num", "np.nan_to_num(a)", jnp.nan_to_num, _ANY, "1 (finite x)", "np.nan_to_num(x)"),
    _unary("np.clip", "min(max(a, -0.5), 0.6)", lambda a: jnp.clip(a, -0.5, 0.6), (-2.3, -0.4, 0.2, 1.9),
           "1 inside the bounds, 0 outside (arrays only in Numba)", "np.clip(x, -0.5, 0.6)"),
]

BUILTINS = [
    _unary("abs", "abs(a)", jnp.abs, _ANY, "sign(x)"),
    _binary("min", "min(a, b)", jnp.minimum, _DISTINCT_PAIRS, "the smaller argument's"),
    _binary("max", "max(a, b)", jnp.maximum, _DISTINCT_PAIRS, "the larger argument's"),
    _binary("pow", "pow(a, b)", jnp.power, _POSITIVE_PAIRS, "(b a^(b-1), a^b log a)"),
    _binary("**", "a ** b", jnp.power, _POSITIVE_PAIRS, "(b a^(b-1), a^b log a)"),
    _binary("%", "a % b", lambda a, b: a - b * sg(jnp.floor(a / b)), _PAIRS, "(1, -floor(a/b))"),
    _binary("//", "a // b", lambda a, b: sg(jnp.floor_divide(a, b)), _PAIRS, "(0, 0)"),
    _unary("round", "round(a)", lambda a: sg(jnp.round(a)), _NONINTEGER, "0 (an integer)"),
    _unary("round(x, n)", "round(a, 2)", lambda a: sg(jnp.round(a, 2)), (-2.3171, 0.4449, 1.9), "0"),
]

#: Every function, in table order.
SPECIALS: list[Special] = [*MATH, *NUMPY, *BUILTINS]

#: Functions Numba 0.68 does not compile for float arguments (nothing for pyjlad to differentiate).
NOT_IN_NUMBA = {
    "math.fmod": "Numba: Unknown attribute 'fmod' (use np.fmod or %)",
    "math.remainder": "Numba: Unknown attribute 'remainder'",
    "math.modf": "Numba: Unknown attribute 'modf'",
    "math.fsum": "Numba: Unknown attribute 'fsum'",
    "math.log(x, base)": "Numba: no implementation for two arguments (use math.log(x) / math.log(base))",
    "math.gcd": "integers only",
    "np.heaviside": "Numba: unsupported NumPy function",
    "np.i0": "Numba: unsupported NumPy function",
    "np.clip (scalars)": "Numba: arrays only (min(max(x, lo), hi) on scalars)",
}


def by_name(name: str) -> Special:
    """The entry called ``name``."""
    for spec in SPECIALS:
        if spec.name == name:
            return spec
    raise KeyError(name)


def markdown() -> str:
    """``docs/functions.md``: the table of every function, its derivative, and who gives it."""
    lines = [
        "# Scalar functions inside differentiated code",
        "",
        "Every `math`, NumPy and builtin scalar function that Numba 0.68 compiles for float arguments,",
        "the derivative pyjlad gives it, and who provides that derivative: Enzyme (its rules for libm",
        "functions and LLVM instructions) or `pyjlad/special.py` (registered rules for `lgamma` and",
        "`gamma` with pyjlad's digamma; `tanh` called on its argument clamped to [-20, 20], the same value,",
        "where Enzyme's `1/cosh(x)^2` gave NaN Hessians from |x| > 355 until 2026-12-06,",
        "`tests/test_saturated_tanh.py`; `nextafter` as `x` plus an inactive step; `hypot` as libm's value",
        "differentiated in JAX's form `m sqrt(1 + (s/m)^2)` (m, s the larger and smaller magnitude), where",
        "Enzyme's rule gave Hessians off by 5.8e-3 at `hypot(1e7, 1)` until 2026-12-07; Numba's `frexp`/`ldexp`",
        "helpers defined around libm's). Every row is tested against JAX in float64",
        "(`tests/test_special_functions.py`: reverse mode in a loop and, for NumPy functions, as an",
        "array expression; forward mode, float32 and Hessians for a subset) and is a program of the",
        "corpus (`tests/corpus/family_special.py`). Status: **agree** everywhere; no function is refused.",
        "",
        "Derivatives of step functions (`floor`, `ceil`, `trunc`, `rint`, `round`, `sign`, `//`,",
        "`spacing`) are 0, as in JAX; the tests take points away from kinks (`abs` at 0, `max` at a",
        "tie), where any one-sided value is a valid answer. Integer and bool results carry no derivative.",
        "",
        "Special points of Numba's implementations (not points where the function itself is not smooth):",
        "`np.logaddexp`/`np.logaddexp2` at a tie (`x == y`, softplus `np.logaddexp(0.0, z)` at `z = 0`) had",
        "the derivative (1, 0) and a zero second derivative of Numba's `x + log(2)` branch until 2026-12-04,",
        "and `np.sinc` at exactly 0 (Numba computes `sinc(1e-20)`, `x` replaced by that constant) a second",
        "derivative of 0, not -pi^2/3; pyjlad gives the smooth functions' derivatives there (the copy Enzyme",
        "differentiates compiles `logaddexp` with its tie in smooth form, `pyjlad/smooth_logaddexp.py`; the portable",
        "pass `smooth-special-points` rewrites `sinc`; `tests/test_smooth_ties.py`). And `x ** p`, `np.power`, `math.pow` computed by `pow` at",
        "`x = p = 0` (polynomial features `np.power(x, np.arange(k))` of a sample at 0) had the derivative NaN (`0 *",
        "inf`) until 2026-12-06: the same pass reads the base there as 1, which gives 0, as JAX's rule for integer",
        "exponents does (`tests/test_zero_powers.py`; for a float exponent JAX's own rule gives NaN there).",
        "",
        "pyjlad's digamma (`pyjlad.special.digamma_ir`) has a relative error below 1e-13 against",
        "mpmath wherever |psi(x)| > 1e-3 and for every x > 0 (a Taylor series at its positive zero);",
        "near its negative zeros the error is below 1e-13 in absolute terms.",
        "",
        "Regenerate with `python tools/special_functions_doc.py`.",
        "",
        "| function | Numba call tested | derivative | given by | float32 tested | status |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for spec in SPECIALS:
        call = spec.call.replace("|", "\\|")
        lines.append(f"| `{spec.name}` | `{call}` | {spec.derivative} | {spec.via} | "
                     f"{'yes' if spec.float32 else ''} | agree |")
    lines += ["", "Not compiled by Numba for floats (nothing to differentiate):", ""]
    lines += [f"- `{name}`: {why}" for name, why in NOT_IN_NUMBA.items()]
    return "\n".join(lines) + "\n"
