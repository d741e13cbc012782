"""The reliability probes of issue 14, one entry each: adding a probe is adding one ``Probe(...)``.

Each probe is data: a name, a category, what to run (``call``, run in a forked child of a warmed
worker, or in a fresh interpreter when it sets ``env``; or ``script``, Python source run in a fresh
interpreter) and the outcome expected of it:

``clear-error``
    ``call`` raises ``error`` and its message contains the regular expression ``words``.
``correct``
    ``call(*inputs())`` equals ``oracle(*copies)`` (a hand-derived formula, computed from copies of
    the inputs taken before the call) and leaves its inputs unchanged; a ``script`` exits 0 after its
    own asserts against hand-written oracles and prints ``ok`` last.
``degrades``
    ``call`` returns ``{"value": ..., "warnings": [...]}``: the value is the oracle's and exactly one
    ``CacheWarning`` matching ``words`` was issued.
``defect``
    a known defect, described in ``note``: run and reported, never counted as a pass or failure.

``rows`` names the rows of docs/errors.md a probe exercises (tests/test_reliability.py checks every
row has one); ``quick`` puts a probe in the subset ``tools/reliability.py --quick`` and the test suite run.
The runner is ``tools/reliability.py``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numba import jit, njit
from numba.core.errors import TypingError as _TypingError

import pyjlad
from pyjlad import Active, Duplicated, Forward, Reverse
from pyjlad.nested import NestedDerivativeError

CATEGORIES = ("integrity", "bad-input", "odd-input", "cache-fault", "cache-attack", "concurrency",
              "memory-safety")
EXPECTATIONS = ("clear-error", "correct", "degrades", "defect")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Probe:
    """One reliability probe (see the module docstring)."""

    name: str
    category: str
    expect: str
    call: Callable[..., Any] | None = None
    script: str | None = None
    inputs: Callable[[], tuple] | None = None
    oracle: Callable[..., Any] | None = None
    error: type[BaseException] | tuple[type[BaseException], ...] | None = None
    words: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    rows: tuple[int, ...] = ()
    quick: bool = False
    timeout: float = 300.0
    rtol: float = 1e-12
    atol: float = 1e-12
    note: str = ""

    def __post_init__(self) -> None:
        assert self.category in CATEGORIES, self.category
        assert self.expect in EXPECTATIONS, self.expect
        assert (self.call is None) != (self.script is None), self.name
        assert self.expect != "clear-error" or (self.error is not None and self.words), self.name
        assert self.expect != "correct" or self.oracle is not None or self.script is not None, self.name


# ================================================================== integrity: derivatives against hand formulas

N = 5
_X = np.linspace(0.3, 1.1, N)
_V = np.array([0.5, -1.0, 2.0, 0.25, 1.5])
_W = np.linspace(1.0, 2.0, N)
_A = np.array([[2.0, 0.5, 0.0, 1.0, -1.0], [0.1, 3.0, 0.2, 0.0, 0.4], [0.0, -0.3, 1.5, 0.6, 0.0],
               [1.2, 0.0, 0.7, 2.5, 0.3], [0.0, 0.9, 0.0, -0.2, 1.8]])
_W2 = np.arange(1.0, 13.0).reshape(3, 4) / 6.0
_X2 = np.linspace(-0.9, 1.3, 12).reshape(3, 4)


@njit
def sumsq(x):
    return np.sum(x * x)


@njit
def sin_times_x(x):
    return np.sum(np.sin(x) * x)


@njit
def exp_weighted(x, w):
    return np.sum(np.exp(x) * w)


@njit
def log1p_square(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.log1p(x[i] * x[i])
    return s


@njit
def cube_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * x[i]
    return s


@njit
def tanh_sum(x):
    return np.sum(np.tanh(x))


@njit
def neighbours(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += x[i] * x[i + 1]
    return s


@njit
def norm(x):
    return math.sqrt(np.sum(x * x))


@njit
def softplus(x):
    return np.sum(np.log(1.0 + np.exp(x)))


@njit
def quadratic_form(x, a):
    return np.dot(x, np.dot(a, x))


@njit
def lorentzian(x):
    return np.sum(1.0 / (1.0 + x * x))


@njit
def cumsum_square(x):
    c = np.cumsum(x)
    return np.sum(c * c)


@njit
def x_exp_minus_x(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * math.exp(-x[i])
    return s


@njit
def weighted_2d(a, w):
    return np.sum(a * a * w)


@njit
def fourth_power_2d(a):
    return np.sum(a ** 4)


@njit
def loop_weighted_2d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] * a[i, j] * (i + 1)
    return s


_ROWS = np.arange(1.0, 4.0)[:, None]


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _neighbour_grad(x):
    g = np.zeros_like(x)
    g[:-1] += x[1:]
    g[1:] += x[:-1]
    return g


def _cumsum_grad(x):
    c = np.cumsum(x)
    return 2.0 * np.cumsum(c[::-1])[::-1]


def _norm_hess(x):
    r = np.sqrt(np.sum(x * x))
    return (np.eye(x.size) - np.outer(x, x) / r**2) / r


#: (name, function, extra constant arguments, gradient(x, *extra), Hessian(x, *extra)), all by hand.
SCALAR_FUNCTIONS: list[tuple[str, Any, tuple, Callable, Callable]] = [
    ("sumsq", sumsq, (), lambda x: 2 * x, lambda x: 2 * np.eye(x.size)),
    ("sin_times_x", sin_times_x, (), lambda x: np.cos(x) * x + np.sin(x),
     lambda x: np.diag(2 * np.cos(x) - x * np.sin(x))),
    ("exp_weighted", exp_weighted, (_W,), lambda x, w: np.exp(x) * w, lambda x, w: np.diag(np.exp(x) * w)),
    ("log1p_square", log1p_square, (), lambda x: 2 * x / (1 + x * x),
     lambda x: np.diag(2 * (1 - x * x) / (1 + x * x) ** 2)),
    ("cube_loop", cube_loop, (), lambda x: 3 * x * x, lambda x: np.diag(6 * x)),
    ("tanh_sum", tanh_sum, (), lambda x: 1 - np.tanh(x) ** 2,
     lambda x: np.diag(-2 * np.tanh(x) * (1 - np.tanh(x) ** 2))),
    ("neighbours", neighbours, (), _neighbour_grad,
     lambda x: np.eye(x.size, k=1) + np.eye(x.size, k=-1)),
    ("norm", norm, (), lambda x: x / np.sqrt(np.sum(x * x)), _norm_hess),
    ("softplus", softplus, (), _sig, lambda x: np.diag(_sig(x) * (1 - _sig(x)))),
    ("quadratic_form", quadratic_form, (_A,), lambda x, a: (a + a.T) @ x, lambda x, a: a + a.T),
    ("lorentzian", lorentzian, (), lambda x: -2 * x / (1 + x * x) ** 2,
     lambda x: np.diag((6 * x * x - 2) / (1 + x * x) ** 3)),
    ("cumsum_square", cumsum_square, (), _cumsum_grad,
     lambda x: 2.0 * (x.size - np.maximum.outer(np.arange(x.size), np.arange(x.size)))),
    ("x_exp_minus_x", x_exp_minus_x, (), lambda x: np.exp(-x) * (1 - x), lambda x: np.diag(np.exp(-x) * (x - 2))),
]


def _copies_gradient(module: str, name: str):
    """The gradient with respect to ``u0`` of the kernel ``name`` of test module ``module`` (a time loop's copies)."""
    def call(u, steps):
        import importlib

        return pyjlad.gradient(getattr(importlib.import_module(module), name), u, steps, wrt=0)
    return call


def _copies_probes() -> list[Probe]:
    """Row 68: copies Enzyme must be told the type of (before: the gradient through them silently zero)."""
    return [Probe(f"gradient through the copies of a time loop ({kind})", "integrity", "correct",
                  inputs=lambda: (_X.copy() + 2.0, 3), call=_copies_gradient(module, name),
                  oracle=lambda u, n: 2.0 * u, rows=(68,))
            for kind, module, name in (("serial", "test_copy_types", "copied_in_a_time_loop"),
                                       ("parallel=True", "test_parallel_time_loops", "scaled_in_a_loop"))]


def _integrity_probes() -> list[Probe]:
    out: list[Probe] = _copies_probes()
    for name, f, extra, grad, hess in SCALAR_FUNCTIONS:
        nones = (None,) * len(extra)
        quick = name in ("sumsq", "quadratic_form")

        def inputs(extra=extra):
            return (_X.copy(), *[e.copy() for e in extra])

        def strided(extra=extra):
            base = np.zeros(2 * N)
            base[::2] = _X
            return (base[::2], *[e.copy() for e in extra])

        out += [
            Probe(f"gradient of {name}", "integrity", "correct", quick=quick, inputs=inputs,
                  call=lambda *a, f=f: pyjlad.gradient(f, *a), oracle=grad),
            Probe(f"gradient of {name} at a strided view", "integrity", "correct", inputs=strided,
                  call=lambda *a, f=f: pyjlad.gradient(f, *a), oracle=grad),
            Probe(f"jvp of {name}", "integrity", "correct", quick=quick, inputs=inputs,
                  call=lambda *a, f=f, nones=nones: pyjlad.jvp(f, a, (_V, *nones))[1],
                  oracle=lambda *a, grad=grad: grad(*a) @ _V),
            Probe(f"vjp of {name}", "integrity", "correct", inputs=inputs,
                  call=lambda *a, f=f: pyjlad.vjp(f, a, 1.75)[1][0],
                  oracle=lambda *a, grad=grad: 1.75 * grad(*a)),
            Probe(f"hessian of {name}", "integrity", "correct", quick=quick, inputs=inputs,
                  call=lambda *a, f=f: pyjlad.hessian(f, *a), oracle=hess),
            Probe(f"hvp of {name}", "integrity", "correct", inputs=inputs,
                  call=lambda *a, f=f: pyjlad.hvp(f, a, _V), oracle=lambda *a, hess=hess: hess(*a) @ _V),
        ]

    def inputs_2d():
        return (_X2.copy(), _W2.copy())

    def hess_2d(a, w):
        return np.diag(2 * w.ravel()).reshape(3, 4, 3, 4)

    fortran = lambda: (np.asfortranarray(_X2), _W2.copy())  # noqa: E731
    out += [
        Probe("gradient of a 2-D weighted sum", "integrity", "correct", inputs=inputs_2d,
              call=lambda a, w: pyjlad.gradient(weighted_2d, a, w), oracle=lambda a, w: 2 * a * w),
        Probe("gradient of a 2-D weighted sum, Fortran order", "integrity", "correct", inputs=fortran,
              call=lambda a, w: pyjlad.gradient(weighted_2d, a, w), oracle=lambda a, w: 2 * a * w),
        # Was a known defect until Enzyme got a copy compiled without vectorizers (pyjlad/enzyme_copy.py): opt ran for
        # minutes (over 200 s) on the reverse-over-forward sweep of the vectorized loop; now seconds.
        Probe("hessian of a 2-D weighted sum (doubled shape)", "integrity", "correct", inputs=inputs_2d,
              call=lambda a, w: pyjlad.hessian(weighted_2d, a, w), oracle=hess_2d, timeout=120.0),
        Probe("hessian of a 2-D array's np.sum(a ** 4) (doubled shape)", "integrity", "correct",
              inputs=lambda: (_X2.copy(),), call=lambda a: pyjlad.hessian(fourth_power_2d, a),
              oracle=lambda a: np.diag(12 * a.ravel() ** 2).reshape(3, 4, 3, 4)),
        Probe("hvp of a 2-D loop-weighted sum", "integrity", "correct", inputs=lambda: (_X2.copy(),),
              call=lambda a: pyjlad.hvp(loop_weighted_2d, (a,), _W2), oracle=lambda a: 2 * _ROWS * _W2),
        Probe("gradient with respect to both 2-D arguments", "integrity", "correct", inputs=inputs_2d,
              call=lambda a, w: pyjlad.gradient(weighted_2d, a, w, wrt=(0, 1)),
              oracle=lambda a, w: (2 * a * w, a * a)),
        Probe("float32 gradient", "integrity", "correct", rtol=1e-5, atol=1e-6,
              inputs=lambda: (_X.astype(np.float32),), call=lambda x: pyjlad.gradient(sin_times_x, x),
              oracle=lambda x: (np.cos(x.astype(np.float64)) * x + np.sin(x.astype(np.float64)))),
    ]
    out += _jacobian_probes() + _scalar_probes()
    return out


@njit
def elementwise(x):
    return np.sin(x) * x


@njit
def matvec(x, a):
    return np.dot(a, x)


@njit
def running_sum(x):
    return np.cumsum(x)


def _jacobian_probes() -> list[Probe]:
    out = []
    for mode in ("reverse", "forward"):
        out.append(Probe(f"{mode} jacobian of an elementwise function", "integrity", "correct",
                         inputs=lambda: (_X.copy(),), call=lambda x, m=mode: pyjlad.jacobian(elementwise, x, mode=m),
                         oracle=lambda x: np.diag(np.cos(x) * x + np.sin(x))))
        out.append(Probe(f"{mode} jacobian of a matrix-vector product", "integrity", "correct",
                         inputs=lambda: (_X.copy(), _A.copy()),
                         call=lambda x, a, m=mode: pyjlad.jacobian(matvec, x, a, mode=m), oracle=lambda x, a: a))
        out.append(Probe(f"{mode} jacobian of a cumulative sum", "integrity", "correct",
                         inputs=lambda: (_X.copy(),), call=lambda x, m=mode: pyjlad.jacobian(running_sum, x, mode=m),
                         oracle=lambda x: np.tril(np.ones((x.size, x.size)))))
        out.append(Probe(f"{mode} jacobian with respect to two arguments", "integrity", "correct",
                         inputs=lambda: (_X.copy(), _A.copy()),
                         call=lambda x, a, m=mode: pyjlad.jacobian(matvec, x, a, wrt=(0, 1), mode=m)[0],
                         oracle=lambda x, a: a))
    out.append(Probe("vjp of a vector function", "integrity", "correct", inputs=lambda: (_X.copy(), _A.copy()),
                     call=lambda x, a: pyjlad.vjp(matvec, (x, a), _V)[1][0], oracle=lambda x, a: a.T @ _V))
    out.append(Probe("jvp of a vector function", "integrity", "correct", inputs=lambda: (_X.copy(), _A.copy()),
                     call=lambda x, a: pyjlad.jvp(matvec, (x, a), (_V, None))[1], oracle=lambda x, a: a @ _V))
    return out


@njit
def rosenbrock(x, y):
    return (1.0 - x) ** 2 + 100.0 * (y - x * x) ** 2


@njit
def scalar_mix(x, y):
    return math.sin(x) * math.cos(y) + math.exp(-x * y) + math.log(x + 2.0) + x ** 3 + math.sqrt(y * y + 1.0)


def _mix_grad(x, y):
    return (math.cos(x) * math.cos(y) - y * math.exp(-x * y) + 1 / (x + 2) + 3 * x * x,
            -math.sin(x) * math.sin(y) - x * math.exp(-x * y) + y / math.sqrt(y * y + 1))


def _scalar_probes() -> list[Probe]:
    xy = lambda: (0.7, -0.4)  # noqa: E731
    return [
        Probe("gradient of the Rosenbrock function", "integrity", "correct", inputs=xy,
              call=lambda x, y: pyjlad.gradient(rosenbrock, x, y, wrt=(0, 1)),
              oracle=lambda x, y: (-2 * (1 - x) - 400 * x * (y - x * x), 200 * (y - x * x))),
        Probe("second derivative of the Rosenbrock function in x", "integrity", "correct", inputs=xy,
              call=lambda x, y: pyjlad.hessian(rosenbrock, x, y), oracle=lambda x, y: 2 - 400 * y + 1200 * x * x),
        Probe("jvp of a scalar function of two scalars", "integrity", "correct", inputs=xy,
              call=lambda x, y: pyjlad.jvp(rosenbrock, (x, y), (1.0, 0.0))[1],
              oracle=lambda x, y: -2 * (1 - x) - 400 * x * (y - x * x)),
        Probe("gradient of a mix of math functions", "integrity", "correct", inputs=xy, quick=True,
              call=lambda x, y: pyjlad.gradient(scalar_mix, x, y, wrt=(0, 1)), oracle=_mix_grad),
        Probe("repeated gradient calls agree (warm path)", "integrity", "correct", inputs=lambda: (_X.copy(),),
              call=lambda x: [pyjlad.gradient(cube_loop, x) for _ in range(3)], oracle=lambda x: [3 * x * x] * 3),
    ]


# ================================================================== bad inputs: errors in the user's terms

@njit
def _scale(x, n):
    return x * n


@njit
def _total(x):
    return np.sum(x * x)


def _star(*xs):
    return xs[0] * xs[1]


def _with_default(x, y=2.0):
    return x * y


class _Model:
    def loss(self, x):
        return x * x


@njit
def _write_into(out, x, n):
    for i in range(out.shape[0]):
        out[i] = x[i] * n


@njit
def _tuple_result(x, s):
    return x * s, np.sum(x), s * s


@njit
def _alloc(x, s):
    return x * s


@njit
def _weighted(x, w, c, n):
    return np.sum(x * w) * c * n


def _objmode():
    @jit(forceobj=True)
    def objmode(x):
        return x * 2.0
    return objmode


def _python_objects(x):
    return float(len(str(object()))) * x


def _generator(x):
    yield x


def _dict_user(x):
    d = {1: x}
    return d[1] * x


def _refusal(name: str):
    import test_refusals

    return getattr(test_refusals, name)


def _rule_calls(kind: str):
    f = pyjlad.custom_derivative(njit(lambda x, y: x * y))
    if kind == "vjp arity":
        f.defvjp(njit(lambda x, g: g))
    elif kind == "jvp arity":
        f.defjvp(njit(lambda x, y, dx: dx))
    elif kind == "*args":
        pyjlad.custom_derivative(njit(lambda *xs: xs[0]))
    elif kind == "no arguments":
        pyjlad.custom_derivative(njit(lambda: 1.0))
    elif kind == "adjoints":
        f.defvjp(njit(lambda x, y, dg: (y * dg,)))

        @njit
        def uses(x):
            return f(x, 2.0)

        pyjlad.gradient(uses, 1.0)


def _julia_rule_refusal():
    from test_rules import square_loss

    from pyjlad.engines.julia import julia_module_text
    from pyjlad.export import export, numba_argtypes

    julia_module_text(export(square_loss, numba_argtypes((2.0,))))


def _segfault_in_opt():
    from test_toolchain import SEGFAULT_IR

    from pyjlad.toolchain import locate

    try:
        locate().run(SEGFAULT_IR, "enzyme", what="a module that crashes opt")
    finally:
        locate().self_test()


def _llvm_crash_in_compile():
    from test_native import CODEGEN_CRASH_IR, _bitcode

    from pyjlad import cache
    from pyjlad.engines import embedded

    embedded._load_library(cache.cache_key("probe-llvm-crash"), lambda: _bitcode(CODEGEN_CRASH_IR), "driver", "a module LLVM 22 aborts on")


_ONES = np.ones(3)
_X6 = np.linspace(0.1, 0.6, 6)


def _bad(name, call, error, words, rows=(), quick=False, **kw) -> Probe:
    return Probe(name, "bad-input", "clear-error", call=call, error=error, words=words, rows=rows, quick=quick, **kw)


_UE = pyjlad.UnsupportedFunctionError


def _bad_input_probes() -> list[Probe]:
    g = pyjlad.gradient
    out = [
        _bad("object-mode function", lambda: g(_objmode(), 1.0), TypeError, "object mode", (1,)),
        _bad("function Numba cannot compile", lambda: g(_python_objects, 1.0), TypeError,
             r"(?s)Numba cannot compile .*_python_objects", (2,)),
        _bad("not a function", lambda: g(42, 1.0), TypeError, "cannot differentiate 42", (3,)),
        _bad("string argument", lambda: g(lambda x: 1.0, "text"), TypeError,
             r"argument 0 is a string \(Numba type unicode_type\).*bind it in an @njit function",
             (4,)),
        _bad("dict argument", lambda: g(lambda x: 1.0, {"a": 1.0}), TypeError, r"argument 0 is a dict.*NamedTuple",
             (5,)),
        _bad("list argument", lambda: g(lambda x: 1.0, [1.0, 2.0]), TypeError, r"argument 0 is a list.*tuple", (6,)),
        _bad("arbitrary object argument", lambda: g(lambda x: 1.0, object()), TypeError, r"argument 0 \(object\)",
             (7,)),
        _bad("complex argument", lambda: g(lambda x: 1.0, 1 + 2j), TypeError, "argument 0 is complex", (8,),
             quick=True),
        _bad("complex array argument", lambda: g(_total, np.ones(3, complex)), TypeError, "complex", (8,)),
        _bad("wrt=5 out of range", lambda: g(_scale, 2.0, 3.0, wrt=5), TypeError, "wrt=5 is out of range", (9,)),
        _bad("wrt=(0, 9) out of range", lambda: g(_scale, 2.0, 3.0, wrt=(0, 9)), TypeError, "out of range", (9,)),
        _bad("wrt naming an int", lambda: g(_scale, 2.0, 3, wrt=1), TypeError,
             r"argument 1 of _scale is int64, which is a constant", (10, 39), quick=True),
        _bad("wrt naming an int array", lambda: g(njit(lambda a: float(a[0])), np.arange(3)), TypeError,
             "array of int64", (11,)),
        _bad("wrt naming a bool", lambda: g(njit(lambda x, b: x if b else -x), 1.0, True, wrt=1), TypeError,
             "bool", (12,)),
        _bad("wrt naming a uint8", lambda: g(_scale, 1.0, np.uint8(3), wrt=1), TypeError,
             "argument 1 of _scale is uint8, which is a constant", (39,)),
        _bad("an int as the only argument", lambda: g(njit(lambda x: x * x), 3), TypeError,
             r"is int64, which is a constant .* pass it as a float", (39,)),
        _bad("an int32 array named in wrt", lambda: g(_total, np.arange(3, dtype=np.int32)), TypeError,
             "int32", (11,)),
        _bad("negative wrt beyond the call", lambda: g(_scale, 2.0, 3.0, wrt=-3), TypeError,
             "wrt=-3 is out of range for a call with 2 positional argument", (14,)),
        _bad("wrt=10**20", lambda: g(_total, np.ones(2), wrt=10**20), TypeError, "out of range", (44,)),
        _bad("array result for gradient", lambda: g(njit(lambda x: x * 2.0), np.ones(3)), TypeError,
             r"returns array.*real scalar.*np.sum", (15,), quick=True),
        _bad("integer result for gradient", lambda: g(njit(lambda x: int(x)), 1.5), TypeError,
             "floating-point scalar", (16,)),
        _bad("tuple result for gradient", lambda: g(_tuple_result, np.ones(2), 1.0), TypeError, "returns", (15,)),
        _bad("tangent of the wrong shape", lambda: pyjlad.jvp(_alloc, (np.ones(3), 1.0), (np.ones(4), None)),
             ValueError, r"the tangent of argument 0 has shape \(4,\); the argument has shape \(3,\)", (17,)),
        _bad("tangent for an int argument",
             lambda: pyjlad.jvp(_write_into, (np.zeros(2), np.ones(2), 3), (None, None, 1.0)), TypeError,
             "pass None", (18,)),
        _bad("too few tangents", lambda: pyjlad.jvp(_alloc, (np.ones(3), 1.0), (np.ones(3),)), (TypeError, ValueError),
             "tangent", (17,)),
        _bad("cotangent of the wrong structure", lambda: pyjlad.vjp(_tuple_result, (np.ones(2), 1.0), np.ones(2)),
             ValueError, "tuple of 3", (19,)),
        _bad("cotangent of the wrong shape", lambda: pyjlad.vjp(_alloc, (np.ones(3), 1.0), np.ones(4)), ValueError,
             "shape", (19,)),
        _bad("shadow of the wrong shape", lambda: pyjlad.autodiff(Reverse, _weighted, Duplicated(_X6, np.zeros(3)),
                                                                   _X6, 1.0, 6),
             ValueError, "shadow must be an ndarray of shape", (20,)),
        _bad("shadow of the wrong dtype", lambda: pyjlad.autodiff(Reverse, _weighted,
                                                                   Duplicated(_X6, np.zeros(6, np.float32)), _X6,
                                                                   1.0, 6),
             ValueError, "dtype float64", (20,)),
        _bad("Active on an array", lambda: pyjlad.autodiff(Reverse, _weighted, Active(_X6), _X6, 1.0, 6), TypeError,
             "Active wraps a float scalar", (21,)),
        _bad("Duplicated on a reverse-mode scalar",
             lambda: pyjlad.autodiff(Reverse, _weighted, _X6, _X6, Duplicated(1.0, 1.0), 6), TypeError,
             "mark it Active", (21,)),
        _bad("Active in forward mode", lambda: pyjlad.autodiff(Forward, _weighted, _X6, _X6, Active(1.0), 6),
             TypeError, "Active applies", (21,)),
        _bad("Active on an int", lambda: pyjlad.autodiff(Reverse, _weighted, _X6, _X6, 1.0, Active(6)), TypeError,
             "Active wraps a float scalar", (21,)),
        _bad("Duplicated on an int in forward mode",
             lambda: pyjlad.autodiff(Forward, _weighted, _X6, _X6, 1.0, Duplicated(6, 1)), TypeError,
             "integers and bools have no derivative", (21,)),
        _bad("autodiff mode that is not a mode", lambda: pyjlad.autodiff("sideways", _weighted, _X6, _X6, 1.0, 6),
             ValueError, "mode", (21,)),
        _bad("generator", lambda: g(_generator, 1.0), TypeError, "generator", (24,)),
        _bad("print() inside f", lambda: g(_refusal("uses_print"), np.ones(3)), pyjlad.EnzymeError,
             r"it uses print\(\)", (25, 37), quick=True),
        _bad("a dict inside f", lambda: g(_dict_user, 1.0), pyjlad.EnzymeError, r"it uses a typed dict", (27,)),
        _bad("a typed List inside f", lambda: g(_refusal("uses_typed_list"), np.ones(3)), pyjlad.EnzymeError,
             "typed list", (37,)),
        _bad("a typed Dict inside f", lambda: g(_refusal("uses_typed_dict"), np.ones(3)), pyjlad.EnzymeError,
             "typed dict", (37,)),
        _bad("np.random inside f", lambda: g(_refusal("uses_random"), np.ones(3)), pyjlad.EnzymeError,
             "np.random", (37,)),
        _bad("a jitclass instance built inside f", lambda: g(_refusal("uses_jitclass"), np.ones(3)),
             pyjlad.EnzymeError, "a jitclass instance created inside the function", (37,)),
        _bad("np.linalg.eigh inside f", lambda: g(_refusal("uses_eigh"), np.ones(3)), pyjlad.EnzymeError,
             "eigh", (37,)),
        _bad("np.linalg.svd inside f", lambda: g(_refusal("uses_svd"), np.ones(3)), pyjlad.EnzymeError, "svd",
             (37,)),
        _bad("an unidentified Enzyme failure is called a defect", _unidentified_failure, pyjlad.EnzymeError,
             r"(?s)a matrix product \(@ / np.dot\).*This is a defect in pyjlad or Enzyme", (38,)),
        _bad("jacobian mode that is not a mode", lambda: pyjlad.jacobian(_alloc, np.ones(2), 1.0, mode="sideways"),
             ValueError, "mode must be 'reverse' or 'forward'", (33,)),
        _bad("custom rule: vjp of the wrong arity", lambda: _rule_calls("vjp arity"), _UE, "must take 3", (34,)),
        _bad("custom rule: jvp of the wrong arity", lambda: _rule_calls("jvp arity"), _UE, "must take 4", (34,)),
        _bad("custom rule: *args", lambda: _rule_calls("*args"), _UE, "plain positional", (34,)),
        _bad("custom rule: no arguments", lambda: _rule_calls("no arguments"), _UE, "no arguments", (34,)),
        _bad("custom rule: wrong number of adjoints", lambda: _rule_calls("adjoints"), _UE, "a tuple of 2 floats",
             (35,)),
        _bad("custom rule on the Julia engine", _julia_rule_refusal, _UE, "engine='embedded'", (36,)),
        _bad("hessian(f, 2) of an int", lambda: pyjlad.hessian(njit(lambda x: x * x), 2), TypeError,
             r"pass 2.0, not 2", (40,), quick=True),
        _bad("*args function", lambda: g(_star, 1.0, 2.0), TypeError, r"takes \*args", (41,)),
        _bad("omitted default", lambda: pyjlad.jacobian(_with_default, 1.0), TypeError,
             r"_with_default\(x, y=2.0\) takes 2 argument\(s\) but was given 1", (41,)),
        _bad("too many arguments", lambda: g(_with_default, 1.0, 2.0, 3.0), TypeError, "argument", (41,)),
        _bad("float16 array", lambda: g(_total, np.ones(3, np.float16)), TypeError,
             r"float16, which Numba does not support: pass x.astype\(np.float32\)", (42,), quick=True),
        _bad("float16 scalar", lambda: g(njit(lambda x: x * x), np.float16(1.0)), TypeError, "float16", (42,)),
        _bad("big-endian array", lambda: g(_total, np.ones(3, ">f8")), TypeError, "non-native byte order", (42,)),
        _bad("big-endian float32 array", lambda: g(_total, np.ones(3, ">f4")), TypeError, "non-native byte order",
             (42,)),
        _bad("object array", lambda: g(_total, np.array([1.0, 2.0], dtype=object)), TypeError, "dtype=object",
             (42,)),
        _bad("masked array", lambda: g(_total, np.ma.array([1.0, 2.0], mask=[0, 1])), TypeError, "masked array",
             (42,)),
        _bad("longdouble array", lambda: g(_total, np.ones(3, np.longdouble)), TypeError,
             r"float128 \(extended precision\), which Numba does not support: pass x.astype\(np.float64\)", (42,)),
        _bad("longdouble scalar", lambda: g(njit(lambda x: x * x), np.longdouble(2.0)), TypeError,
             "extended precision", (42,)),
        _bad("clongdouble array", lambda: g(_total, np.ones(3, np.clongdouble)), TypeError,
             r"complex256 \(extended precision\).*x.real and x.imag", (42, 8)),
        _bad("unicode string array", lambda: g(_total, np.array(["a", "b"])), TypeError, "Numba cannot compile",
             (2,)),
        _bad("datetime64 array", lambda: g(_total, np.ones(2, "M8[s]")), TypeError, "Numba cannot compile", (2,)),
        _bad("structured (record) array", lambda: g(_total, np.zeros(2, dtype=[("a", "f8")])), TypeError,
             "Numba cannot compile", (2,)),
        _bad("bound method", lambda: g(_Model().loss, 1.0), TypeError, "bound method", (43,)),
        _bad("jvp with a bare array as primals", lambda: pyjlad.jvp(_total, np.ones(2), np.ones(2)), TypeError,
             r"primals must be a tuple .* got ndarray", (45,)),
        _bad("vjp with a bare float as primals", lambda: pyjlad.vjp(njit(lambda x: x * x), 1.0, 1.0), TypeError,
             r"primals must be a tuple .* got float", (45,)),
        _bad("hvp with a bare array as primals", lambda: pyjlad.hvp(_total, np.ones(2), np.ones(2)), TypeError,
             "primals must be a tuple", (45,)),
        _bad("unknown engine name", lambda: g(_total, np.ones(2), engine="tensorflow"),
             pyjlad.EngineUnavailableError, "unknown engine 'tensorflow'", ()),
    ]
    # (wrt=None is not among them: it is the default, argument 0, since argnums joined wrt)
    out += [_bad(f"wrt={w!r} of the wrong type", lambda w=w: g(_scale, 2.0, 3.0, wrt=w), TypeError, "wrt", (13,))
            for w in ["x", 1.5, (), (0, "a"), True, [0]]]
    out.append(_bad("wrt=(0, 1) naming an int among floats", lambda: g(_scale, 1.0, 3, wrt=(0, 1)), TypeError,
                    "argument 1 of _scale is int64, which is a constant", (39,)))
    out.append(_bad("a wrong loose-typed derivative (copies left untyped)", _untyped_copies_gradient, RuntimeError,
                    "cannot be trusted", (69,)))
    out.append(_bad("types none of the explicit signatures takes", lambda: g(_one_signature, np.ones((2, 2))),
                    TypeError, "compilation is disabled; its signatures are", (70,)))
    out.append(_bad("None for an argument whose default is None", lambda: g(_default_none, np.ones(2), None),
                    TypeError, "is None, which pyjlad cannot pass", (71,)))
    out.append(_bad("an @njit function passed as an argument", lambda: g(_applied, np.ones(2), _total), _UE,
                    r"argument 1 is a function \(Numba type type\(CPUDispatcher", (73,)))
    out.append(_bad("a derivative pyjlad made passed as the function (jacfwd of grad)",
                    lambda: pyjlad.jacfwd(pyjlad.grad(_total))(np.ones(2)), _UE,
                    r"it is a derivative pyjlad made, not a Numba function\. For second derivatives use pyjlad\.hessian",
                    (78,)))
    out.append(_bad("the same array as an input and the output the function writes",
                    lambda: g(_doubled_into, _SHARED, _SHARED), pyjlad.ArgumentError,
                    r"arguments 0 and 1 of _doubled_into are the same memory, and _doubled_into writes argument 1",
                    (74,)))
    out.append(_bad("pyjlad.gradient written inside @njit code", lambda: _gradient_inside(np.ones(3)), _TypingError,
                    r"pyjlad.gradient cannot be called inside @njit code: build the derivative in Python", (75,)))
    out.append(_bad("a global array changed in place after Numba compiled the function", _changed_after_compile,
                    _UE, r"reads the global or closure value\(s\) `_FROZEN`, changed since Numba compiled it", (76,)))
    out.append(_bad("reverse over reverse through a loop left by return", _loop_left_early_hessian,
                    NestedDerivativeError,
                    r"(?s)a second time in reverse mode: _sines_until_over has a loop.*mode=\"forward\"", (79,)))
    return out


@njit
def _sines_until_over(x):  # a return inside the loop
    total = 0.0
    for k in range(x.shape[0]):
        total += np.sin(x[k])
        if total > 1.5:
            return total * x[k]
    return total


_d_sines_until_over = pyjlad.grad(_sines_until_over)


@njit
def _sines_gradient(x):
    return _d_sines_until_over(x)


def _loop_left_early_hessian():
    return pyjlad.jacobian(_sines_gradient, np.array([1.0, 2.0, 3.0]))


_FROZEN = np.array([1.0, 2.0, 3.0])


@njit
def _reads_frozen(x):
    return np.sum(_FROZEN * x)


def _changed_after_compile():
    _reads_frozen(np.ones(3))  # Numba freezes _FROZEN now
    _FROZEN[:] = _FROZEN + 1.0
    return pyjlad.gradient(_reads_frozen, np.ones(3))


@njit
def _gradient_inside(x):
    return pyjlad.gradient(_doubled_sum, x)


@njit
def _doubled_sum(x):
    return np.sum(2.0 * x * x)


_SHARED = np.linspace(0.1, 0.6, 6)


@njit
def _doubled_into(x, out):
    for i in range(x.size):
        out[i] = 2.0 * x[i]
    return np.sum(x * out)


@njit
def _applied(x, fn):
    return fn(x) * 2.0


@njit("float64(float64[:])")
def _one_signature(x):
    return np.sum(x * x)


@njit
def _default_none(x, w=None):
    return np.sum(x * x) if w is None else np.sum(w * x * x)


def _untyped_copies_gradient() -> Any:
    """Row 69: the gradient of a median of a sorted slice with pyjlad's typing of copies switched off, so that
    Enzyme builds the wrong (zero) loose-typed derivative it built before that typing existed; the disk cache
    off meanwhile (no other caller may load that derivative)."""
    from pyjlad.engines import differentiate

    def median_of_sorted_tail(x):
        y = x.copy()
        y.sort()
        return np.median(y[2:])

    typed, cached = differentiate._copies_typed, os.environ.get("PYJLAD_DISABLE_DISK_CACHE")
    os.environ["PYJLAD_DISABLE_DISK_CACHE"] = "1"
    differentiate._copies_typed = lambda m: m.decode() if isinstance(m, bytes) else m
    try:
        return pyjlad.gradient(njit(median_of_sorted_tail), np.array([0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 3.1]))
    finally:
        differentiate._copies_typed = typed
        if cached is None:
            del os.environ["PYJLAD_DISABLE_DISK_CACHE"]
        else:
            os.environ["PYJLAD_DISABLE_DISK_CACHE"] = cached


def _unidentified_failure():
    """Enzyme's report of a failure inside Numba's matrix product, which no known construct explains
    (the shape of det(B @ C)'s former failure): pyjlad's explanation, raised."""
    from pyjlad.export import export, numba_argtypes
    from pyjlad.refusals import explain

    @njit
    def product(b, c):
        return np.sum(b @ c)

    b = np.ones((2, 2))
    diagnostics = ("error: <unknown>:0:0: in function preprocess__ZN5numba2np6linalg8dot_2_mm12_3clocals_3e"
                   "8dot_implB3v99E5ArrayIdLi2E1C7mutable7alignedE i32 (ptr, ptr): Enzyme: <analysis>\n"
                   "Illegal updateAnalysis prev:{[-1]:Integer} new: {[-1]:Pointer}\n")
    raise explain(export(product, numba_argtypes((b, b))), pyjlad.EnzymeError("Enzyme failed", diagnostics), [])


# ================================================================== settings: bad values named at first use

_TRIVIAL = "import pyjlad\npyjlad.gradient(lambda x: x * x * 1.75, 3.0)\n"


def _setting(name: str, value: str, words: str, error=pyjlad.SettingError, rows=(65,), quick=False,
             code: str = _TRIVIAL, label: str = "") -> Probe:
    env = {name: value}
    if name not in ("PYJLAD_CACHE_MAX_BYTES", "PYJLAD_LOCK_TIMEOUT", "PYJLAD_DISABLE_DISK_CACHE"):
        env["PYJLAD_DISABLE_DISK_CACHE"] = "1"
    return Probe(f"{name}={value!r}{label}", "bad-input", "clear-error", call=lambda: exec(code, {}), env=env, error=error,
                 words=words, rows=rows, quick=quick)


def _settings_probes() -> list[Probe]:
    out = []
    for name in ("PYJLAD_POOL_BYTES", "PYJLAD_STACK_BYTES", "PYJLAD_CACHE_MAX_BYTES"):
        for value in ("lots", "-1", "1.5", "2G"):
            out.append(_setting(name, value, f"{name}='{value}' is not a whole number of bytes", rows=(64, 65),
                                code=_RECURSIVE if name == "PYJLAD_STACK_BYTES" else _TRIVIAL))
    for name in ("PYJLAD_OPT_TIMEOUT", "PYJLAD_LOCK_TIMEOUT"):
        for value in ("abc", "-5", "nan", "inf", "10 min"):
            out.append(_setting(name, value, f"{name}='{value}' is not a .*number of seconds", rows=(46, 64, 65),
                                quick=value == "abc"))
    out.append(_setting("PYJLAD_OPT_TIMEOUT", "0", "is not a positive number of seconds", rows=(65,)))
    out.append(_setting("PYJLAD_OPT_TIMEOUT", "abc", "PYJLAD_OPT_TIMEOUT='abc'", error=pyjlad.ToolchainError,
                        rows=(46,), label=" (still a ToolchainError)"))
    out.append(_setting("PYJLAD_DISABLE_DISK_CACHE", "yes please", "PYJLAD_DISABLE_DISK_CACHE='yes please' is not",
                        rows=(65,)))
    out.append(_setting("PYJLAD_SCOPE_TEMPORARIES", "maybe", "PYJLAD_SCOPE_TEMPORARIES='maybe' is not", rows=(65,)))
    out.append(_setting("PYJLAD_OPT", "/nonexistent/opt", "PYJLAD_OPT='/nonexistent/opt' is not an executable file",
                        error=pyjlad.ToolchainError, rows=(46,), quick=True))
    out.append(_setting("PYJLAD_OPT", "/etc/hostname", "PYJLAD_OPT='/etc/hostname' (is not an executable file|"
                        "cannot be run)", rows=(46,)))
    out.append(_setting("PYJLAD_OPT", "/bin/false", "opt|Enzyme", error=pyjlad.PyjladError, rows=(46,)))
    out.append(_setting("PYJLAD_ENZYME_PLUGIN", "/nonexistent/LLVMEnzyme-15.so", "pyjlad toolchain install",
                        error=pyjlad.ToolchainError, rows=(29,)))
    out.append(_setting("PYJLAD_ENZYME_PLUGIN", str(ROOT / "README.md"), "Enzyme", error=pyjlad.PyjladError,
                        rows=(30,)))
    out.append(_setting("PYJLAD_ENGINE", "tensorflow", "PYJLAD_ENGINE", error=pyjlad.EngineUnavailableError,
                        rows=()))
    return out


_RECURSIVE = textwrap.dedent("""
    import pyjlad
    from numba import njit

    @njit
    def rec(x, n):
        return x if n <= 0 else 0.5 * rec(x, n - 1) + x * x
    pyjlad.gradient(rec, 0.5, 3)
""")


# ================================================================== odd but legal inputs

@njit
def _sum_of_squares(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@njit
def _writes(out, x):
    out[0] = x[0] * x[0]


_A23 = np.arange(6.0).reshape(2, 3)


@njit
def _product_into(a, x, out):
    out[:] = a @ x  # a is only read (by BLAS): the output is out, not a


@njit
def _counts_then_raises(x, counter):
    counter[0] += 1.0
    if x[0] > 0.0:
        raise ValueError("positive")
    return x[0] * x[0]


@njit
def _checked_sqrt(x):
    if x < 0.0:
        raise ValueError("x must be non-negative")
    return math.sqrt(x)


@njit
def _recursive(x, n):
    if n <= 0:
        return x
    return 0.5 * _recursive(x, n - 1) + math.sin(x)


def _recursive_grad(x, n):
    d = 1.0
    for _ in range(n):
        d = 0.5 * d + math.cos(x)
    return d


def _broadcast(n=5):
    return np.broadcast_to(np.array([2.0]), (n,))


def _exception_once():
    counter = np.zeros(1)
    try:
        pyjlad.gradient(_counts_then_raises, np.array([1.0]), counter)
    except ValueError as exc:
        assert "positive" in str(exc)
        return counter[0]
    raise AssertionError("no exception")


def _read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def _odd(name, call, oracle, rows=(), inputs=None, quick=False, **kw) -> Probe:
    return Probe(name, "odd-input", "correct", call=call, oracle=oracle, inputs=inputs, rows=rows, quick=quick, **kw)


def _odd_error(name, call, error, words, rows=(), quick=False) -> Probe:
    return Probe(name, "odd-input", "clear-error", call=call, error=error, words=words, rows=rows, quick=quick)


def _odd_input_probes() -> list[Probe]:
    g = pyjlad.gradient
    m = np.broadcast_to(np.array([[1.0], [3.0]]), (2, 3))
    return [
        _odd("zero-stride input: gradient", lambda: g(_sum_of_squares, _broadcast()), lambda: np.full(5, 4.0), (47,),
             quick=True),
        _odd("zero-stride input: vjp", lambda: pyjlad.vjp(_sum_of_squares, (_broadcast(),), 1.0)[1][0],
             lambda: np.full(5, 4.0), (47,)),
        _odd("zero-stride input: jvp", lambda: pyjlad.jvp(_sum_of_squares, (_broadcast(),), (np.arange(5.0),))[1],
             lambda: 40.0, (47,)),
        _odd("zero-stride input: hvp", lambda: pyjlad.hvp(_sum_of_squares, (_broadcast(),), np.ones(5)),
             lambda: np.full(5, 2.0), (47,)),
        _odd("zero stride in the second dimension", lambda: g(weighted_2d, m, np.ones((2, 3))),
             lambda: 2 * np.asarray(m), (47,)),
        _odd_error("zero-stride Duplicated primal",
                   lambda: pyjlad.autodiff(Reverse, _sum_of_squares, Duplicated(_broadcast(3), np.zeros(3))),
                   ValueError, "share memory", (47,)),
        _odd_error("gradient of a function returning None", lambda: g(_writes, np.zeros(1), np.array([3.0]), wrt=1),
                   TypeError, r"returns nothing \(None\); a gradient needs a real scalar", (48,), quick=True),
        _odd("vjp of a function returning None", lambda: pyjlad.vjp(_writes, (np.zeros(1), np.array([3.0])),
                                                                    np.array([1.0]))[1][1],
             lambda: np.array([6.0]), (48,)),
        _odd("jacobian of a function writing a product into its output argument",
             lambda: pyjlad.jacobian(_product_into, _A23.copy(), np.ones(3), np.zeros(2), wrt=1), lambda: _A23, (48,)),
        _odd_error("Duplicated(x, x)", lambda: pyjlad.autodiff(Reverse, _sum_of_squares, Duplicated(_X, _X)),
                   ValueError, "shares memory with the argument itself", (49,)),
        _odd_error("Duplicated(x, view of x)",
                   lambda: pyjlad.autodiff(Reverse, _sum_of_squares, Duplicated(_X, _X[::-1])),
                   ValueError, "share", (49,)),
        _odd("wrt=(0, 0) gives two separate arrays", _wrt_twice, lambda: True, (50,), quick=True),
        _odd_error("complex tangent", lambda: pyjlad.jvp(_sum_of_squares, (np.ones(2),), (np.array([1 + 1j, 0]),)),
                   TypeError, "complex", (51,)),
        _odd_error("complex cotangent", lambda: pyjlad.vjp(njit(lambda x: x * 2.0), (np.ones(2),),
                                                           np.array([1j, 1.0])), TypeError, "complex", (51,)),
        _odd_error("complex hvp direction", lambda: pyjlad.hvp(_sum_of_squares, (np.ones(2),), np.array([1j, 1.0])),
                   TypeError, "complex", (51,)),
        _odd_error("complex scalar tangent", lambda: pyjlad.jvp(rosenbrock, (1.0, 2.0), (1j, 0.0)), TypeError,
                   "complex", (51,)),
        _odd("a raising f runs its side effects once", _exception_once, lambda: 1.0, (52,)),
        _odd_error("f raising ValueError surfaces unchanged", lambda: g(_checked_sqrt, -1.0), ValueError,
                   "x must be non-negative", (26,)),
        _odd_error("f dividing by zero (Python error model)", lambda: g(njit(lambda x: 1.0 / x), 0.0),
                   ZeroDivisionError, "division", (22, 26)),
        _odd("NaN input propagates", lambda: math.isnan(g(njit(lambda x: x * x), float("nan"))), lambda: True, (22,)),
        _odd("inf input propagates", lambda: g(njit(lambda x: x * x), float("inf")), lambda: math.inf, (22,)),
        _odd("1/x at 0 (NumPy error model) is -inf", lambda: g(njit(error_model="numpy")(lambda x: 1.0 / x), 0.0),
             lambda: -math.inf, (22,)),
        _odd("recursion is differentiated", lambda: g(_recursive, 0.4, 6), lambda: _recursive_grad(0.4, 6), (23,)),
        _odd("read-only input array", lambda x: g(sin_times_x, x), lambda x: np.cos(x) * x + np.sin(x),
             inputs=lambda: (_read_only(_X),)),
        _odd("read-only tangent", lambda x: pyjlad.jvp(sumsq, (x,), (_read_only(_V),))[1], lambda x: 2 * x @ _V,
             inputs=lambda: (_X.copy(),)),
        _odd("negative-stride input", lambda x: g(cube_loop, x[::-1]), lambda x: 3 * x[::-1] ** 2,
             inputs=lambda: (_X.copy(),)),
        _odd("non-contiguous 2-D slice", lambda a: g(weighted_2d, a[:, ::2], np.ones((3, 2))),
             lambda a: 2 * a[:, ::2], inputs=lambda: (_X2.copy(),)),
        _odd("empty array", lambda: g(sumsq, np.zeros(0)), lambda: np.zeros(0)),
        _odd("one-element array", lambda: g(sumsq, np.array([3.0])), lambda: np.array([6.0])),
        _odd("0-d array argument", lambda: g(njit(lambda x: x[()] * x[()]), np.array(3.0)), lambda: 6.0),
        _odd("numpy float64 scalar", lambda: g(njit(lambda x: x * x), np.float64(3.0)), lambda: 6.0),
        _odd("float32 scalar", lambda: g(njit(lambda x: x * x), np.float32(3.0)), lambda: 6.0),
        _odd("negative zero", lambda: g(njit(lambda x: x * x), -0.0), lambda: 0.0),
        _odd("subnormal input", lambda: g(njit(lambda x: x * 3.0), 5e-324), lambda: 3.0),
        _odd("huge input", lambda: g(njit(lambda x: x * x), 1e300), lambda: 2e300, rtol=0.0, atol=0.0),
        _odd("huge input whose derivative overflows", lambda: g(njit(lambda x: x * x * x), 1e300), lambda: math.inf),
        _odd("int array as a constant argument", lambda x: g(_gather, x, np.array([2, 0, 2])), _gather_grad,
             inputs=lambda: (_X.copy(),)),
        _odd("bool constant argument", lambda: g(njit(lambda x, b: x * x if b else -x), 2.0, True), lambda: 4.0),
        _odd("plain Python function (njit-compiled by pyjlad)", lambda: g(lambda x: x * x * 1.5, 2.0), lambda: 6.0),
        _odd("lambda closing over a constant", _closure_grad, lambda: 2.0 * 2.5),
        _odd("a lambda made anew at each call, three times", _lambdas_made_at_each_call,
             lambda: ([2.0, 4.0, 6.0], 1), (77,)),
        _odd("same array passed twice", lambda x: g(_two_args, x, x, wrt=(0, 1)), lambda x: (x, x),
             inputs=lambda: (_X.copy(),)),
        _odd("wrt=(1, 0) in reverse order", lambda x, w: g(exp_weighted, x, w, wrt=(1, 0)),
             lambda x, w: (np.exp(x), np.exp(x) * w), inputs=lambda: (_X.copy(), _W.copy())),
    ]


@njit
def _gather(x, idx):
    s = 0.0
    for i in idx:
        s += x[i] * x[i]
    return s


def _gather_grad(x):
    g = np.zeros_like(x)
    for i in (2, 0, 2):
        g[i] += 2 * x[i]
    return g


@njit
def _two_args(a, b):
    return np.sum(a * b)


def _wrt_twice():
    g0, g1 = pyjlad.gradient(_sum_of_squares, np.array([1.0, 2.0]), wrt=(0, 0))
    assert g0 is not g1
    g0[0] = 99.0
    return g1.tolist() == [2.0, 4.0]


def _closure_grad():
    c = 2.5
    return pyjlad.gradient(njit(lambda x: c * x * x), 1.0)


def _lambdas_made_at_each_call():
    """Three gradients of a lambda written at the call (one code, three function objects), as in an optimisation
    loop: each right; one pyjlad.RecompilationWarning, at the third."""
    x, scale = np.array([1.0, 2.0, 3.0]), 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradients = [pyjlad.gradient(lambda v: scale * _sum_of_squares(v), x) for _ in range(3)]
    assert all(np.array_equal(gr, gradients[0]) for gr in gradients)
    return gradients[-1].tolist(), sum(issubclass(w.category, pyjlad.RecompilationWarning) for w in caught)


# ================================================================== memory safety (fresh interpreters)

def _odd_script(name: str) -> str:
    import test_odd_inputs

    return getattr(test_odd_inputs, name)


def _script_source(name: str) -> str:
    return _LAZY_SCRIPTS[name]()


_LAZY_SCRIPTS = {
    "strided": lambda: _odd_script("_STRIDED_ALIASED"),
    "memmap": lambda: _odd_script("_READ_ONLY_COTANGENT"),
    "oom": lambda: _odd_script("_OUT_OF_MEMORY").replace('print("alive")',
                                                         'print("alive")\nprint("ok")'),
    "deep": lambda: _odd_script("_DEEP_RECURSION"),
}


def _memory_probes() -> list[Probe]:
    return [
        Probe("strided constant arrays merged with other memory (shadow overrun)", "memory-safety", "correct",
              script="strided", rows=(53, 32)),
        Probe("read-only memmap cotangent", "memory-safety", "correct", script="memmap", rows=(54,), quick=True),
        Probe("out of memory inside the derivative", "memory-safety", "correct", script="oom", rows=(55,)),
        Probe("deep recursion (depth 3e5)", "memory-safety", "correct", script="deep", rows=(56,)),
        Probe("Enzyme segfaulting inside opt", "memory-safety", "clear-error", call=_segfault_in_opt,
              error=pyjlad.EnzymeError, words="crashed with signal 11", rows=(28,)),
        Probe("LLVM aborting while compiling a derivative to machine code", "memory-safety", "clear-error",
              call=_llvm_crash_in_compile, error=pyjlad.EnzymeError, words="LLVM crashed", rows=(67,)),
        Probe("solve with a vector b held constant", "memory-safety", "correct", call=_solve_constant_b,
              oracle=lambda: True, rows=(32,)),
        Probe("a read one row past the end of an argument (no boundscheck)", "memory-safety", "clear-error",
              call=_read_past_the_end, error=pyjlad.OutOfBoundsError, quick=True, rows=(72,),
              words=r"reads its argument 0 \(x, shape \(1000, 7\)\) outside its elements.*IndexError"),
    ]


@njit
def _next_row_differences(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += (x[i + 1, j] - x[i, j]) ** 2  # x[i + 1] past the last row: undefined, not checked
    return s


def _read_past_the_end():
    # Before the guard zones: the gradient added into the row after its shadow, glibc's bookkeeping, and the
    # process aborted later ("free(): invalid next size").
    return pyjlad.gradient(_next_row_differences, np.linspace(0.0, 1.0, 7000).reshape(1000, 7))


@njit
def _solve(a, b):
    return np.sum(np.linalg.solve(a, b))


def _solve_constant_b():
    a = np.array([[3.0, 1.0], [1.0, 2.0]])
    b = np.array([1.0, 2.0])
    before = b.copy()
    got = pyjlad.gradient(_solve, a, b)
    x = np.linalg.solve(a, b)
    lam = np.linalg.solve(a.T, np.ones(2))
    np.testing.assert_allclose(got, -np.outer(lam, x), rtol=1e-12)
    assert b.tobytes() == before.tobytes()
    return True


# ================================================================== the disk cache: faults and attacks

def _tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="pyjlad-probe-"))


def _cache_test():
    import test_cache_integrity

    return test_cache_integrity


def _run_cache_test(name: str, *, directory_fixture: bool = False) -> bool:
    """Run one of tests/test_cache_integrity.py's checks (its asserts are hand-written oracles) on a fresh
    temporary directory; True when every assert held."""
    import pytest

    t = _cache_test()
    tmp = _tmp()
    with pytest.MonkeyPatch.context() as mp:
        kwargs: dict[str, Any] = {}
        test = getattr(t, name)
        params = test.__code__.co_varnames[: test.__code__.co_argcount]
        if "cache_dir" in params:
            directory = tmp / "cache"
            mp.setattr(t.cache, "cache_dir", lambda: directory)
            for var in ("PYJLAD_DISABLE_DISK_CACHE", "PYJLAD_CACHE_MAX_BYTES", "PYJLAD_LOCK_TIMEOUT"):
                mp.delenv(var, raising=False)
            kwargs["cache_dir"] = directory
        if "tmp_path" in params:
            kwargs["tmp_path"] = tmp
        if "monkeypatch" in params:
            kwargs["monkeypatch"] = mp
        if "mode" in params:
            kwargs["mode"] = 0o770
        test(**kwargs)
    shutil.rmtree(tmp, ignore_errors=True)
    return True


def _gradients(directory: Path, names: str, **extra: str) -> dict:
    t = _cache_test()
    return t._gradients(_tmp(), directory, names, **extra)


def _degraded_efbig() -> dict:
    tmp = _tmp()
    result = _gradients(tmp / "cache", "f,g", TEST_FILE_SIZE_LIMIT="4096")
    leftovers = [p.name for p in (tmp / "cache").rglob("*") if p.suffix in (".tmp", ".bin")]
    assert leftovers == [], leftovers
    return {"value": [result["f"], result["g"]], "warnings": result["warnings"]}


def _tmpfs(size: str, steps: list[str]) -> list[dict]:
    t = _cache_test()
    if not t._private_mounts_work():
        raise RuntimeError("this machine cannot mount a private tmpfs (unshare -rm): probe not runnable")
    return t._in_private_tmpfs(_tmp(), size, steps)


def _degraded_enospc() -> dict:
    (result,) = _tmpfs("12k", ["RUN f,g"])
    return {"value": [result["f"], result["g"]], "warnings": result["warnings"]}


def _degraded_erofs() -> dict:
    first, second = _tmpfs("16m", ["RUN f", "mount -o remount,ro MNT", "RUN f,g"])
    assert first["warnings"] == []
    return {"value": [second["f"], second["g"]], "warnings": second["warnings"]}


def _expected_fg():
    x = np.linspace(0.0, 1.0, 7)
    return [np.cos(x) - x * np.sin(x), 3.0 * x**2]


def _in_process_cache(directory: Path):
    from pyjlad import cache

    cache.cache_dir = lambda: directory
    for var in ("PYJLAD_DISABLE_DISK_CACHE", "PYJLAD_CACHE_MAX_BYTES", "PYJLAD_LOCK_TIMEOUT"):
        os.environ.pop(var, None)
    return cache


def _poisoned(kind: str) -> dict:
    """A stored entry damaged (``truncated``, ``flipped``, ``garbage``, ``empty``): never loaded, rebuilt."""
    from pyjlad.errors import CacheWarning

    cache = _in_process_cache(_tmp() / "cache")
    key = cache.cache_key("poisoned", kind)
    cache.put(key, b"genuine payload " * 100)
    path = cache.cache_dir() / key[:2] / f"{key}.bin"
    data = bytearray(path.read_bytes())
    if kind == "truncated":
        data = data[: len(data) // 2]
    elif kind == "flipped":
        data[-5] ^= 0x40
    elif kind == "garbage":
        data = bytearray(os.urandom(len(data)))
    elif kind == "empty":
        data = bytearray()
    elif kind == "flipped signature":
        data[len(cache.entries.MAGIC) + 3] ^= 1
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = cache.get_or_build(key, lambda: b"rebuilt")
    return {"value": value == b"rebuilt", "warnings": [str(w.message) for w in caught
                                                       if issubclass(w.category, CacheWarning)]}


def _unusable_dir(mode: int) -> dict:
    """A cache directory group/others may write: nothing read from it, gradients in memory."""
    from pyjlad.errors import CacheWarning

    cache = _in_process_cache(_tmp() / "cache")
    key = cache.cache_key("shared", str(mode))
    cache.put(key, b"planted by anyone")
    cache.cache_dir().chmod(mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [cache.get(key), cache.get_or_build(key, lambda: b"built here")]
    return {"value": got == [None, b"built here"],
            "warnings": [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]}


def _unusable_real_gradient(how: str) -> dict:
    """A real gradient with an unusable cache directory: the right answer, one warning."""
    tmp = _tmp()
    directory = tmp / "cache"
    if how == "file":
        directory.write_text("not a directory")
    elif how == "group-writable":
        directory.mkdir(mode=0o700)
        directory.chmod(0o775)
    elif how == "under a file":
        (tmp / "file").write_text("a file, not a directory")
        directory = tmp / "file" / "cache"
    result = _gradients(directory, "f,g")
    return {"value": [result["f"], result["g"]], "warnings": result["warnings"]}


def _cache_probes() -> list[Probe]:
    fault, attack = "cache-fault", "cache-attack"

    def test_probe(category, test, rows=(), quick=False):
        return Probe(f"{test.removeprefix('test_').replace('_', ' ')}", category, "correct",
                     call=lambda: _run_cache_test(test), oracle=lambda: True, rows=rows, quick=quick)

    out = [
        Probe("file-size-limited cache dir (EFBIG)", fault, "degrades", call=_degraded_efbig, oracle=_expected_fg,
              words="cannot be written.*EFBIG", rows=(58,), quick=True),
        Probe("full cache dir (ENOSPC)", fault, "degrades", call=_degraded_enospc, oracle=_expected_fg,
              words="ENOSPC", rows=(58,)),
        Probe("read-only cache dir (EROFS) still serves its entries", fault, "degrades", call=_degraded_erofs,
              oracle=_expected_fg, words="EROFS", rows=(58,)),
        Probe("cache dir that is a file", fault, "degrades", call=lambda: _unusable_real_gradient("file"),
              oracle=_expected_fg, words="cache", rows=(58,)),
        Probe("cache dir under a file (ENOTDIR)", fault, "degrades",
              call=lambda: _unusable_real_gradient("under a file"), oracle=_expected_fg, words="cannot",
              rows=(58,)),
        test_probe(fault, "test_writer_killed_before_its_rename_leaves_nothing_behind", (58,)),
        test_probe(fault, "test_truncated_opt_output_is_never_stored", (62,)),
        test_probe(fault, "test_damaged_entries_of_a_real_gradient_are_rebuilt", (31, 61)),
        test_probe(fault, "test_signed_entry_with_bad_contents_is_rebuilt_and_reported_once", (61,)),
        test_probe(fault, "test_least_recently_used_entries_are_evicted_beyond_the_cap", (31,)),
        test_probe(fault, "test_cli_cache_info_and_clear", ()),
        test_probe(attack, "test_temporary_files_are_private_and_follow_no_planted_link", (60,)),
        test_probe(attack, "test_entries_writable_by_others_foreign_or_linked_are_ignored", (60,)),
        test_probe(attack, "test_planted_and_copied_entries_are_ignored_and_rebuilt", (60,)),
        test_probe(attack, "test_secret_key_is_private_and_replaced_when_others_can_read_it", (60,)),
        test_probe(attack, "test_toolchain_identity_hashes_the_plugin_bytes", ()),
        Probe("a plugin others could replace is not loaded", attack, "correct", rows=(66,),
              call=_plugin_others_could_replace, oracle=lambda: True),
        Probe("group-writable cache dir of a real gradient", attack, "degrades",
              call=lambda: _unusable_real_gradient("group-writable"), oracle=_expected_fg,
              words="group or others may write", rows=(59,), quick=True),
    ]
    out += [Probe(f"cache entry {kind}", attack if kind == "flipped signature" else fault, "degrades",
                  call=lambda kind=kind: _poisoned(kind), oracle=lambda: True,
                  words="pyjlad ignored the disk-cache entry", rows=(31,))
            for kind in ("truncated", "flipped", "garbage", "empty", "flipped signature")]
    out += [Probe(f"cache dir of mode {mode:o}", attack, "degrades", call=lambda mode=mode: _unusable_dir(mode),
                  oracle=lambda: True, words="group or others may write", rows=(59,))
            for mode in (0o770, 0o707, 0o777, 0o720)]
    if os.geteuid() == 0:
        out.append(test_probe(attack, "test_cache_dir_of_another_user_is_refused", (59,)))
    else:
        out.append(Probe("cache dir of another user (needs root: checked via a foreign-owner stat)", attack,
                         "correct", call=_foreign_owner, oracle=lambda: True, rows=(59,)))
    return out


def _foreign_owner() -> bool:
    """Without root a directory cannot be given away; check the ownership test itself on a stat result."""
    from pyjlad.ownership import foreign

    st = os.stat(_tmp())
    fake = os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, os.geteuid() + 1, st.st_gid,
                           st.st_size, st.st_atime, st.st_mtime, st.st_ctime))
    why = foreign(fake)
    assert why is not None and f"owned by uid {os.geteuid() + 1}" in why, why
    assert foreign(st) is None
    return True


def _plugin_others_could_replace() -> bool:
    import pytest
    import test_settings

    with pytest.MonkeyPatch.context() as mp:
        test_settings.test_a_plugin_others_could_replace_is_not_loaded(_tmp(), mp)
    return True


# ================================================================== concurrency

def _threads_build_together() -> list:
    import threading

    results: dict[int, Any] = {}
    fs = [sumsq, cube_loop, sin_times_x, tanh_sum]

    def work(i):
        results[i] = pyjlad.gradient(fs[i], _X.copy())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(fs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return [results[i] for i in range(len(fs))]


def _fork_after_build() -> float:
    pyjlad.gradient(cube_loop, _X.copy())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ok = np.allclose(pyjlad.gradient(cube_loop, _X.copy()), 3 * _X * _X) and \
                np.allclose(pyjlad.gradient(tanh_sum, _X.copy()), 1 - np.tanh(_X) ** 2)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the forked child died: status {status}"
    return answer == b"1"


def _locks_test(name: str) -> bool:
    import pytest
    import test_locks

    gen = test_locks.parked_build.__wrapped__ if hasattr(test_locks.parked_build, "__wrapped__") else None
    with pytest.MonkeyPatch.context() as mp:
        fixture = (gen or _fixture_function(test_locks.parked_build))(mp)
        next(fixture)
        try:
            getattr(test_locks, name)(None)
        finally:
            next(fixture, None)
    return True


def _fixture_function(fixture):
    """The function under a ``@pytest.fixture`` (pytest keeps it as ``__pytest_wrapped__.obj``)."""
    return fixture.__pytest_wrapped__.obj


def _concurrency_probes() -> list[Probe]:
    c = "concurrency"
    return [
        Probe("four threads build four gradients at once", c, "correct", call=_threads_build_together,
              oracle=lambda: [2 * _X, 3 * _X * _X, np.cos(_X) * _X + np.sin(_X), 1 - np.tanh(_X) ** 2],
              rows=(57,), quick=True),
        Probe("a forked child after a build works", c, "correct", call=_fork_after_build, oracle=lambda: True,
              rows=(57,)),
        Probe("warm gradients proceed during another thread's build", c, "correct", rows=(57,),
              call=lambda: _locks_test("test_warm_gradients_and_other_builds_proceed_during_a_build"),
              oracle=lambda: True),
        Probe("fork during a build gives a working child", c, "correct", rows=(57,),
              call=lambda: _locks_test("test_fork_during_a_build_gives_a_working_child"), oracle=lambda: True),
        Probe("lock wait times out naming the lock; a dead holder frees it", c, "correct", rows=(63,),
              call=lambda: _run_cache_test(
                  "test_lock_wait_times_out_naming_the_lock_file_and_a_dead_holder_frees_it"),
              oracle=lambda: True),
    ]


# ================================================================== the table

PROBES: list[Probe] = (_integrity_probes() + _bad_input_probes() + _settings_probes() + _odd_input_probes()
                       + _memory_probes() + _cache_probes() + _concurrency_probes())
BY_NAME: dict[str, Probe] = {p.name: p for p in PROBES}
assert len(BY_NAME) == len(PROBES), "probe names must be unique"


def script_source(probe: Probe) -> str:
    """The Python source a ``script`` probe runs."""
    assert probe.script is not None
    return _script_source(probe.script)


def run_in_subprocess(code: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -c code`` with the tests directory importable."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), full.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full)



def doc_rows() -> list[int]:
    """The numbers of the rows of docs/errors.md's table."""
    text = (ROOT / "docs" / "errors.md").read_text()
    return [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", text, re.MULTILINE)]


def uncovered_rows() -> list[int]:
    """Rows of docs/errors.md that no probe names."""
    covered = {row for probe in PROBES for row in probe.rows}
    return [row for row in doc_rows() if row not in covered]
