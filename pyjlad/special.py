"""Derivatives of the special functions Enzyme cannot differentiate by name.

Enzyme differentiates the libm functions Numba calls for ``math``/NumPy
scalar functions by name (``sin``, ``erf``, ``atan2``, ...). A few of the
functions Numba calls are not among them, or Enzyme's rule is unusable:

===================================  =============================================  ================================
Numba calls (double / float)         for                                            here
===================================  =============================================  ================================
``lgamma`` / ``lgammaf``             ``math.lgamma``                                rule: ``digamma(x)``
``numba_gamma`` / ``numba_gammaf``   ``math.gamma`` (Numba's helper around tgamma)  rule: ``gamma(x) * digamma(x)``
``nextafter``, ``numba_nextafter``   ``math.nextafter``, ``np.nextafter``,          rule: ``(1, 0)``
(and ``...f``)                       ``np.spacing``
``tanh`` / ``tanhf``                 ``math.tanh``, ``np.tanh``                     its argument clamped to
                                                                                    [-20, 20] (Enzyme's rule)
``numba_frexp`` / ``numba_frexpf``   ``math.frexp``                                 defined in IR around libm
                                                                                    ``frexp`` (Enzyme's rule)
``numba_ldexp`` / ``numba_ldexpf``   ``math.ldexp``, ``np.ldexp``                   defined in IR around libm
                                                                                    ``ldexp`` (Enzyme's rule)
``hypot`` / ``hypotf``               ``math.hypot``, ``np.hypot``                   its value, differentiated as
                                                                                    ``m sqrt(1 + (s/m)^2)``
``numba_cpow`` / ``numba_cpowf``     ``z ** w`` of complex numbers (``w`` not the   its value (CPython's formula),
                                     constant 2)                                    differentiated in polar form
===================================  =============================================  ================================

Enzyme aborts on ``lgamma`` (its rule expects another signature), and sees
Numba's ``numba_*`` helpers as opaque external functions. Its rule for ``tanh``,
``1 / cosh(x)^2``, has a derivative (a Hessian's) of ``inf / inf`` once ``cosh(x)^2``
overflows: NaN Hessians of ``tanh`` from ``|x| > 355`` (``> 44`` in float32), where
JAX's are 0 (a user-style probe, 2026-12-06: a saturated unit of a tanh network made a
whole row of a Hessian-vector product NaN). ``tanh`` is called on its argument clamped
to [-20, 20] by two ``select``s of constants: the same value (``tanh(20)`` rounds to 1 in
float64 and float32), derivatives of 0 beyond (JAX's ``1 - tanh(x)^2`` is 0 there too),
and no registered rule, so vector mode still applies. :func:`prepare`
rewrites a module before Enzyme runs: calls to the functions with a rule go
to ``pyjlad.special.<name>``, which calls the original function and carries
a derivative registered with Enzyme (``__enzyme_register_gradient_*`` for
reverse mode, ``__enzyme_register_derivative_*`` for forward mode, read by the
``preserve-nvvm`` pass as for :mod:`pyjlad.rules`); Numba's ``frexp``/``ldexp``
helpers are replaced by definitions with their exact semantics (see Numba's
``_helperlib.c``) around the libm functions Enzyme knows. Values are those
of the functions Numba calls: only derivatives are added.

``hypot(a, b)``: Enzyme's rule ``a / hypot(a, b)``, differentiated again (Hessians), is ``1/h - a^2/h^3``,
which cancels where ``|a| >> |b|`` (``d2/dx2 hypot(x, 1)`` off by 5.8e-3 at ``x = 1e7``). pyjlad's
``hypot`` is ``f + (h - f)``: ``h`` libm's value from an inactive call, ``f = m sqrt(1 + (s/m)^2)`` with
``m``, ``s`` the larger and smaller of ``|a|``, ``|b|`` (JAX's form), which Enzyme differentiates with no
cancellation at any order. ``f`` is within a few units in the last place of ``h``, so ``h - f`` is exact and
the sum is ``h`` bitwise; where it is not (an infinity, NaN, ``m = 0``), ``h`` itself is returned, with the
derivative of the discarded side (NaN there, as Enzyme's rule gave).

``nextafter(x, y)`` moves ``x`` by one unit in the last place: its derivative
is taken as ``(1, 0)``, so ``np.spacing(x) = nextafter(x, inf) - x`` has
derivative 0, as a step function should.

The digamma function (the derivative of ``lgamma``) is written here in LLVM IR
(:func:`digamma_ir`): reflection ``psi(x) = psi(1 - x) - pi / tan(pi x)`` for
``x <= 0``, the recurrence ``psi(x) = psi(x + 1) - 1/x`` up to ``x >= 10``, then
the asymptotic series ``log x - 1/(2x) - sum B_2k / (2k x^2k)``. Enzyme
differentiates that code itself when a derivative of the derivative is needed
(Hessians: the derivative of the series is the series of the trigamma function).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction

from .ir.lexer import Token, texts_of, tokenize
from .portable import dedupe_declarations

__all__ = ["prepare", "digamma_ir", "HANDLED"]

_PI = "0x400921FB54442D18"
_INF = "0x7FF0000000000000"
# Bernoulli numbers B_2k, k = 1..8: psi(x) ~ log x - 1/(2x) - sum_k B_2k / (2k x^2k).
_BERNOULLI = (Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66),
              Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510))
#: The recurrence shifts x up to this value before the asymptotic series (its 9th term is then < 1e-17).
_SERIES_FROM = 10.0
#: The positive zero of psi (x0 = 1.4616...) as a sum of two doubles, and the Taylor coefficients there,
#: psi^(k)(x0) / k! = (-1)^(k+1) zeta(k+1, x0), k = 1..13 (mpmath at 50 digits; the tests recompute
#: them). Near x0 the recurrence's absolute error (~1e-16) would be a large relative error.
_ROOT = (float.fromhex("0x1.762d86356be3fp+0"), float.fromhex("0x1.b86a722197829p-54"))
_ROOT_TAYLOR = tuple(float.fromhex(h) for h in (
    "0x1.ef72bc8ee38acp-1", "-0x1.c563b54aa1a35p-2", "0x1.08b4294d50381p-2", "-0x1.4fc1317257da8p-3",
    "0x1.b9a5b6370f3abp-4", "-0x1.27baba261cc2cp-4", "0x1.8fce02b239ca7p-5", "-0x1.0fa7ec36a7d8fp-5",
    "0x1.723d6807edcc0p-6", "-0x1.f970508e1b6a2p-7", "0x1.5955caaa962f3p-7", "-0x1.d828079282eb8p-8",
    "0x1.42e1acf81d8dcp-8",
))
#: The Taylor series is used for |x - x0| below this (its 14th term is then < 1e-18 of the first).
_ROOT_RADIUS = 0.05


def _hex(value: float) -> str:
    """An LLVM IR double constant (hexadecimal: exact)."""
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def digamma_ir() -> str:
    """``double @pyjlad.digamma(double)``: the digamma function (psi), in LLVM IR.

    NaN for NaN, -inf and the poles (0, -1, -2, ...); +inf for +inf.
    """
    # Horner form of sum_k c_k t^k with t = 1/x^2 and c_k = B_2k / (2k).
    coefficients = [float(b / (2 * (k + 1))) for k, b in enumerate(_BERNOULLI)]
    horner = [f"  %h{len(coefficients)} = fmul double %t, {_hex(coefficients[-1])}"]
    for k in range(len(coefficients) - 1, 0, -1):
        horner.append(f"  %s{k} = fadd double %h{k + 1}, {_hex(coefficients[k - 1])}")
        horner.append(f"  %h{k} = fmul double %t, %s{k}")
    root = [f"  %p{len(_ROOT_TAYLOR)} = fadd double {_hex(_ROOT_TAYLOR[-1])}, 0.0"]
    for k in range(len(_ROOT_TAYLOR) - 1, 0, -1):
        root.append(f"  %q{k} = fmul double %p{k + 1}, %u")
        root.append(f"  %p{k} = fadd double %q{k}, {_hex(_ROOT_TAYLOR[k - 1])}")
    return "\n".join([
        "define linkonce_odr double @pyjlad.digamma(double %x) nounwind {",
        "entry:",
        "  %nan = fcmp uno double %x, 0.0",
        f"  %pinf = fcmp oeq double %x, {_INF}",
        "  %same = or i1 %nan, %pinf",
        "  br i1 %same, label %identity, label %sign",
        "identity:",
        "  ret double %x",
        "sign:",
        "  %nonpositive = fcmp ole double %x, 0.0",
        "  br i1 %nonpositive, label %negative, label %positive",
        "positive:",
        f"  %u0 = fsub double %x, {_hex(_ROOT[0])}",  # exact (Sterbenz)
        f"  %u = fsub double %u0, {_hex(_ROOT[1])}",
        "  %du = call double @llvm.fabs.f64(double %u)",
        f"  %near = fcmp olt double %du, {_hex(_ROOT_RADIUS)}",
        "  br i1 %near, label %root, label %loop",
        "root:",
        *root,
        "  %rootpsi = fmul double %p1, %u",
        "  ret double %rootpsi",
        "negative:",
        "  %floor = call double @llvm.floor.f64(double %x)",
        "  %pole = fcmp oeq double %floor, %x",  # 0, negative integers and -inf
        "  br i1 %pole, label %poles, label %reflect",
        "poles:",
        "  ret double 0x7FF8000000000000",
        "reflect:",
        # tan(pi x) = tan(pi r) with r = x - rint(x) in [-1/2, 1/2], computed exactly.
        "  %nearest = call double @llvm.rint.f64(double %x)",
        "  %r = fsub double %x, %nearest",
        f"  %pir = fmul double %r, {_PI}",
        "  %tan = call double @tan(double %pir)",
        f"  %cot = fdiv double {_PI}, %tan",
        "  %start = fneg double %cot",
        "  %mirror = fsub double 1.0, %x",
        "  br label %loop",
        "loop:",
        "  %v = phi double [ %x, %positive ], [ %mirror, %reflect ], [ %next, %step ]",
        "  %acc = phi double [ 0.0, %positive ], [ %start, %reflect ], [ %accnext, %step ]",
        f"  %small = fcmp olt double %v, {_hex(_SERIES_FROM)}",
        "  br i1 %small, label %step, label %series",
        "step:",
        "  %inv = fdiv double 1.0, %v",
        "  %accnext = fsub double %acc, %inv",
        "  %next = fadd double %v, 1.0",
        "  br label %loop",
        "series:",
        "  %log = call double @llvm.log.f64(double %v)",
        "  %iv = fdiv double 1.0, %v",
        "  %t = fmul double %iv, %iv",
        *horner,
        "  %half = fmul double %iv, 0.5",
        "  %a1 = fsub double %log, %half",
        "  %a2 = fsub double %a1, %h1",
        "  %psi = fadd double %acc, %a2",
        "  ret double %psi",
        "}",
    ])


_DIGAMMA_DECLS = ("declare double @llvm.floor.f64(double)", "declare double @llvm.rint.f64(double)",
                  "declare double @llvm.fabs.f64(double)",
                  "declare double @tan(double)", "declare double @llvm.log.f64(double)")


@dataclass(frozen=True)
class _Rule:
    """A function given a derivative: ``callee`` (libm or Numba's helper) of one float type."""

    callee: str
    ty: str  # "double" or "float"
    derivative: str  # "digamma" (d/dx = digamma(x)) or "gamma" (d/dx = callee(x) * digamma(x))


_RULES = {rule.callee: rule for rule in (
    _Rule("lgamma", "double", "digamma"), _Rule("lgammaf", "float", "digamma"),
    _Rule("numba_gamma", "double", "gamma"), _Rule("numba_gammaf", "float", "gamma"),
)}


def _derivative_lines(rule: _Rule, x: str, out: str) -> list[str]:
    """IR computing ``%<out>`` = d callee / dx at ``%<x>``."""
    lines = []
    xd = x
    if rule.ty == "float":
        lines.append(f"  %{x}.d = fpext float %{x} to double")
        xd = f"{x}.d"
    lines.append(f"  %{out}.psi = call double @pyjlad.digamma(double %{xd})")
    value = f"{out}.psi"
    if rule.derivative == "gamma":
        # through the wrapper: a derivative of this derivative (Hessians) uses the registered rules
        lines.append(f"  %{out}.g = call {rule.ty} @pyjlad.special.{rule.callee}({rule.ty} %{x})")
        if rule.ty == "float":
            lines.append(f"  %{out}.gd = fpext float %{out}.g to double")
            lines.append(f"  %{out}.d = fmul double %{out}.gd, %{out}.psi")
        else:
            lines.append(f"  %{out}.d = fmul double %{out}.g, %{out}.psi")
        value = f"{out}.d"
    if rule.ty == "float":
        lines.append(f"  %{out} = fptrunc double %{value} to float")
    else:
        lines.append(f"  %{out} = fadd double %{value}, 0.0")
    return lines


def _rule_ir(rule: _Rule) -> str:
    """``pyjlad.special.<callee>``: calls the function; its derivatives are registered with Enzyme."""
    T, name = rule.ty, f"pyjlad.special.{rule.callee}"
    return "\n".join([
        f"define linkonce_odr {T} @{name}({T} %x) noinline nounwind {{",
        "entry:",
        f"  %r = call {T} @{rule.callee}({T} %x)",
        f"  ret {T} %r",
        "}",
        # reverse: the augmented forward pass returns the value (no tape: the reverse pass gets the
        # argument again); the reverse pass returns the argument's adjoint.
        f"define linkonce_odr {T} @{name}.aug({T} %x) {{",
        "entry:",
        f"  %r = call {T} @{name}({T} %x)",  # the wrapper: forward over reverse (Hessians) uses its rules
        f"  ret {T} %r",
        "}",
        f"define linkonce_odr {T} @{name}.rev({T} %x, {T} %dret) {{",
        "entry:",
        *_derivative_lines(rule, "x", "d"),
        f"  %g = fmul {T} %dret, %d",
        f"  ret {T} %g",
        "}",
        # forward: (value, tangent) from the argument and its tangent. The value is the wrapper's result plus
        # 0.0, not the call itself: in a Hessian-vector product (Enzyme's reverse sweep over this rule), a value
        # that was the call made Enzyme want a shadow of the call (an assertion, "cannot find deal with ptr that
        # isnt arg", where the function returned the value, as `lgamma(t[0])` does) or, where the forward sweep
        # returned the tangent alone (Enzyme then wraps the rule in one returning the tangent), build the reverse
        # sweep with no adjoint for the rule (a second derivative of zero). An fadd of 0.0, which LLVM
        # may not fold away (x - 0.0 would be exact but foldable): x + 0.0 is x except that -0.0 becomes +0.0
        # (lgamma never returns -0.0; gamma only by underflow, below -170).
        f"define linkonce_odr {{ {T}, {T} }} @{name}.fwd({T} %x, {T} %dx) {{",
        "entry:",
        f"  %v0 = call {T} @{name}({T} %x)",
        f"  %v = fadd {T} %v0, 0.0",
        *_derivative_lines(rule, "x", "d"),
        f"  %t = fmul {T} %dx, %d",
        f"  %o0 = insertvalue {{ {T}, {T} }} undef, {T} %v, 0",
        f"  %o = insertvalue {{ {T}, {T} }} %o0, {T} %t, 1",
        f"  ret {{ {T}, {T} }} %o",
        "}",
        # weak_odr: llvm-link drops unreferenced linkonce globals (a rule module linked with the
        # function's would lose its registration); weak_odr ones merge and stay.
        f"@__enzyme_register_gradient_{name} = weak_odr global [3 x ptr] "
        f"[ptr @{name}, ptr @{name}.aug, ptr @{name}.rev]",
        f"@__enzyme_register_derivative_{name} = weak_odr global [2 x ptr] [ptr @{name}, ptr @{name}.fwd]",
        f"declare {T} @{rule.callee}({T})",
    ])


def _moved_where_exact(T: str, moved: str, value: str, result: str, tag: str = "") -> list[str]:
    """Lines setting ``result`` to ``moved`` where it is bitwise ``value``, else to ``value`` (whose derivative,
    through an inactive call, is 0): a differentiable form plus an inactive difference is not always the value.
    ``tag`` ends the names of the lines' own values (for a second use in one function)."""
    bits = "i64" if T == "double" else "i32"
    return [
        f"  %moved.bits{tag} = bitcast {T} {moved} to {bits}",
        f"  %value.bits{tag} = bitcast {T} {value} to {bits}",
        f"  %exact{tag} = icmp eq {bits} %moved.bits{tag}, %value.bits{tag}",
        f"  {result} = select i1 %exact{tag}, {T} {moved}, {T} {value}",
    ]


def _inactive_value(callee: str, T: str) -> list[str]:
    """``pyjlad.special.<callee>.value(x, y)``: the two-argument ``callee``'s value, a constant to Enzyme."""
    return [
        f'define linkonce_odr {T} @pyjlad.special.{callee}.value({T} %x, {T} %y) nounwind "enzyme_inactive" {{',
        "entry:",
        f"  %n = call {T} @{callee}({T} %x, {T} %y)",
        f"  ret {T} %n",
        "}",
    ]


def _step_ir(callee: str, ty: str) -> str:
    """``pyjlad.special.<callee>(x, y)``: ``nextafter``'s value, with derivative 1 in x and 0 in y.

    The value is ``x + s`` with the step ``s = nextafter(x, y) - x`` (exact: adjacent
    floats) computed by an inactive call, so Enzyme differentiates ``x + constant``.
    Where that sum is not bitwise the function's value (an infinite ``x``, signed
    zeros, NaN), the value itself is returned (derivative 0 there).
    """
    T, name = ty, f"pyjlad.special.{callee}"
    return "\n".join([
        f"define linkonce_odr {T} @{name}({T} %x, {T} %y) {{",
        "entry:",
        f"  %n = call {T} @{name}.value({T} %x, {T} %y)",
        f"  %s = call {T} @{name}.step({T} %x, {T} %y)",
        f"  %moved = fadd {T} %x, %s",
        *_moved_where_exact(T, "%moved", "%n", "%r"),
        f"  ret {T} %r",
        "}",
        *_inactive_value(callee, T),
        f'define linkonce_odr {T} @{name}.step({T} %x, {T} %y) nounwind "enzyme_inactive" {{',
        "entry:",
        f"  %n = call {T} @{callee}({T} %x, {T} %y)",
        f"  %s = fsub {T} %n, %x",
        f"  ret {T} %s",
        "}",
        f"declare {T} @{callee}({T}, {T})",
    ])


def _clamped_ir(callee: str, ty: str) -> str:
    """``pyjlad.special.<callee>(x)``: ``tanh`` of ``x`` clamped to [-20, 20] (see the module's docstring)."""
    T, name = ty, f"pyjlad.special.{callee}"
    return "\n".join([
        f"define linkonce_odr {T} @{name}({T} %x) {{",
        "entry:",
        f"  %above = fcmp ogt {T} %x, 20.0",
        f"  %below = fcmp olt {T} %x, -20.0",
        f"  %high = select i1 %above, {T} 20.0, {T} %x",
        f"  %clamped = select i1 %below, {T} -20.0, {T} %high",
        f"  %r = call {T} @{callee}({T} %clamped)",
        f"  ret {T} %r",
        "}",
        f"declare {T} @{callee}({T})",
    ])


def _hypot_ir(callee: str, ty: str) -> str:
    """``pyjlad.special.<callee>(a, b)``: libm's ``hypot`` value, differentiated as ``m sqrt(1 + (s/m)^2)``
    (see the module's docstring).

    The form is computed in double (``hypotf`` too), its arguments scaled by a power of two where ``m`` is below
    ``2^-500`` or above ``2^500`` (Enzyme's derivative of ``s / m`` divides by ``m^2``). Below ``m = 2^-1000`` it
    is ``sqrt(m^2 + s^2)`` of the scaled arguments: there a forward derivative's tangent of ``r = s/m``,
    ``(ds - r dm) / m``, overflows whatever the scale (its second derivatives cancel, as Enzyme's rule's did)."""
    T, name = ty, f"pyjlad.special.{callee}"
    wide = (["  %a.d = fpext float %a to double", "  %b.d = fpext float %b to double"] if T == "float"
            else ["  %a.d = fadd double %a, 0.0", "  %b.d = fadd double %b, 0.0"])
    narrow = "  %f = fptrunc double %f.d to float" if T == "float" else "  %f = fadd double %f.d, 0.0"
    return "\n".join([
        f"define linkonce_odr {T} @{name}({T} %a, {T} %b) {{",
        "entry:",
        f"  %h = call {T} @{name}.value({T} %a, {T} %b)",
        *wide,
        "  %aa = call double @llvm.fabs.f64(double %a.d)",
        "  %ab = call double @llvm.fabs.f64(double %b.d)",
        "  %a.larger = fcmp oge double %aa, %ab",
        "  %m = select i1 %a.larger, double %aa, double %ab",
        "  %s = select i1 %a.larger, double %ab, double %aa",
        f"  %tiny = fcmp olt double %m, {_hex(2.0 ** -500)}",
        f"  %huge = fcmp ogt double %m, {_hex(2.0 ** 500)}",
        f"  %up0 = select i1 %huge, double {_hex(2.0 ** -600)}, double 1.0",
        f"  %up = select i1 %tiny, double {_hex(2.0 ** 600)}, double %up0",
        f"  %down0 = select i1 %huge, double {_hex(2.0 ** 600)}, double 1.0",
        f"  %down = select i1 %tiny, double {_hex(2.0 ** -600)}, double %down0",
        "  %ms = fmul double %m, %up",
        "  %ss = fmul double %s, %up",
        "  %r = fdiv double %ss, %ms",
        "  %rr = fmul double %r, %r",
        "  %q = fadd double %rr, 1.0",
        "  %root = call double @llvm.sqrt.f64(double %q)",
        "  %fs = fmul double %ms, %root",
        "  %fr = fmul double %fs, %down",
        # where m is nearly subnormal, a forward derivative's tangent of r = s/m, (ds - r dm)/m, overflows
        "  %mm = fmul double %ms, %ms",
        "  %sq = fmul double %ss, %ss",
        "  %sum = fadd double %mm, %sq",
        "  %plain = call double @llvm.sqrt.f64(double %sum)",
        "  %fp = fmul double %plain, %down",
        f"  %deep = fcmp olt double %m, {_hex(2.0 ** -1000)}",
        "  %f.d = select i1 %deep, double %fp, double %fr",
        narrow,
        f"  %gap = call {T} @{name}.gap({T} %h, {T} %f)",
        f"  %moved = fadd {T} %f, %gap",
        *_moved_where_exact(T, "%moved", "%h", "%v"),
        f"  ret {T} %v",
        "}",
        *_inactive_value(callee, T),
        # h - f, a constant to Enzyme (the derivative is f's alone)
        f'define linkonce_odr {T} @{name}.gap({T} %h, {T} %f) nounwind "enzyme_inactive" {{',
        "entry:",
        f"  %d = fsub {T} %h, %f",
        f"  ret {T} %d",
        "}",
        f"declare {T} @{callee}({T}, {T})",
        "declare double @llvm.fabs.f64(double)",
        "declare double @llvm.sqrt.f64(double)",
    ])


#: hypot: libm's value, differentiated in the form of :func:`_hypot_ir`.
_HYPOT = {"hypot": "double", "hypotf": "float"}

#: tanh: called on its argument clamped (:func:`_clamped_ir`).
_CLAMPED = {"tanh": "double", "tanhf": "float"}

#: nextafter: libm's (math.nextafter) and Numba's helper (np.nextafter, np.spacing).
_STEPS = {"nextafter": "double", "nextafterf": "float", "numba_nextafter": "double", "numba_nextafterf": "float"}


# Numba's frexp/ldexp helpers (numba/_helperlib.c), with their exact semantics, around libm's.
_HELPERS = {
    "numba_frexp": ("double", "frexp"), "numba_frexpf": ("float", "frexpf"),
    "numba_ldexp": ("double", "ldexp"), "numba_ldexpf": ("float", "ldexpf"),
}
_FLOAT_INF = {"double": _INF, "float": _INF}  # LLVM writes float constants as doubles


def _helper_ir(name: str) -> str:
    T, libm = _HELPERS[name]
    checks = [
        f"  %abs = call {T} @llvm.fabs.{'f64' if T == 'double' else 'f32'}({T} %x)",
        f"  %finite = fcmp olt {T} %abs, {_FLOAT_INF[T]}",
        f"  %nonzero = fcmp une {T} %x, 0.0",
        "  %ok0 = and i1 %finite, %nonzero",
    ]
    if libm.startswith("frexp"):  # !isfinite(x) || !x: *exp = 0, x unchanged
        return "\n".join([
            # the exponent slot holds an integer (Enzyme's forward mode cannot tell from `store i32 0`)
            f"define linkonce_odr {T} @{name}({T} %x, ptr %e) {{", "entry:",
            "  call void @__enzyme_integer(ptr %e, i64 4)", *checks,
            "  br i1 %ok0, label %call, label %keep",
            "call:", f"  %m = call {T} @{libm}({T} %x, ptr %e)", f"  ret {T} %m",
            "keep:", "  store i32 0, ptr %e, align 4", f"  ret {T} %x", "}",
            f"declare {T} @{libm}({T}, ptr)",
            "declare void @__enzyme_integer(ptr nocapture readnone, i64) readnone nounwind willreturn",
            f"declare {T} @llvm.fabs.{'f64' if T == 'double' else 'f32'}({T})",
        ])
    return "\n".join([  # isfinite(x) && x && exp: ldexp(x, exp), else x
        f"define linkonce_odr {T} @{name}({T} %x, i32 signext %n) {{", "entry:", *checks,
        "  %shift = icmp ne i32 %n, 0",
        "  %ok = and i1 %ok0, %shift",
        "  br i1 %ok, label %call, label %keep",
        "call:", f"  %m = call {T} @{libm}({T} %x, i32 signext %n)", f"  ret {T} %m",
        "keep:", f"  ret {T} %x", "}",
        f"declare {T} @{libm}({T}, i32 signext)",
        f"declare {T} @llvm.fabs.{'f64' if T == 'double' else 'f32'}({T})",
    ])


#: Numba's complex power helpers (``z ** w`` where ``w`` is not the constant 2): their element type.
_COMPLEX_POWERS = {"numba_cpow": "double", "numba_cpowf": "float"}


def _complex_power_ir(name: str) -> str:
    """``numba_cpow(a, b, out)``: ``*out = a ** b``, the value CPython's ``_Py_c_pow`` computes (Numba's helper
    calls it, then writes NaN, NaN where it set ``EDOM``: ``0 ** b`` with a negative or complex ``b``), from an
    inactive copy of that formula (:func:`_complex_power_value_ir`); for ``a != 0``, plus the inactive difference
    from ``|a|^p e^(-q arg a) (cos, sin)(p arg a + q log|a|)`` (``b = p + iq``), which Enzyme differentiates. That
    form has no branch on ``b`` (``_Py_c_pow`` skips the ``q`` terms where ``q == 0``, so a derivative taken through
    it has none in ``q`` there, and none in ``b`` at ``b == 0``); each part is the form plus the difference where
    that sum is bitwise the value (:func:`_moved_where_exact`), the value otherwise (derivative 0 there).
    ``hypot`` is :func:`_hypot_ir`'s. ``numba_cpowf`` computes in double, as Numba's does."""
    T = _COMPLEX_POWERS[name]
    C = f"{{ {T}, {T} }}"
    wide = T == "double"
    load = []
    for side in ("a", "b"):  # %ar, %ai, %br, %bi in double (a float's widened: exact)
        load += [f"  %{side}r{'' if wide else '.n'} = load {T}, ptr %{side}, align 4",
                 f"  %{side}.im = getelementptr inbounds {C}, ptr %{side}, i64 0, i32 1",
                 f"  %{side}i{'' if wide else '.n'} = load {T}, ptr %{side}.im, align 4"]
        if not wide:
            load += [f"  %{side}{part} = fpext float %{side}{part}.n to double" for part in ("r", "i")]
    out = [] if wide else ["  %out.re = fptrunc double %re to float", "  %out.im = fptrunc double %im to float"]
    re, im = ("%re", "%im") if wide else ("%out.re", "%out.im")
    return "\n".join([
        f"define linkonce_odr void @{name}(ptr %a, ptr %b, ptr %out) {{",
        "entry:",
        *load,
        "  %h = call { double, double } @pyjlad.special.cpow.value(double %ar, double %ai, double %br, double %bi)",
        "  %hr = extractvalue { double, double } %h, 0",
        "  %hi = extractvalue { double, double } %h, 1",
        "  %ar.zero = fcmp oeq double %ar, 0.0",
        "  %ai.zero = fcmp oeq double %ai, 0.0",
        "  %a.zero = and i1 %ar.zero, %ai.zero",
        "  br i1 %a.zero, label %done, label %form",
        "form:",
        "  %vabs = call double @pyjlad.special.hypot(double %ar, double %ai)",
        "  %len0 = call double @pow(double %vabs, double %br)",
        "  %at = call double @atan2(double %ai, double %ar)",
        "  %t = fmul double %at, %bi",
        "  %e = call double @exp(double %t)",
        "  %len = fdiv double %len0, %e",
        "  %lv = call double @log(double %vabs)",
        "  %phase0 = fmul double %at, %br",
        "  %t2 = fmul double %bi, %lv",
        "  %phase = fadd double %phase0, %t2",
        "  %c = call double @cos(double %phase)",
        "  %s = call double @sin(double %phase)",
        "  %pr = fmul double %len, %c",
        "  %pi = fmul double %len, %s",
        "  %gr = call double @pyjlad.special.cpow.gap(double %hr, double %pr)",
        "  %gi = call double @pyjlad.special.cpow.gap(double %hi, double %pi)",
        "  %mr = fadd double %pr, %gr",
        "  %mi = fadd double %pi, %gi",
        *_moved_where_exact("double", "%mr", "%hr", "%fr", ".re"),
        *_moved_where_exact("double", "%mi", "%hi", "%fi", ".im"),
        "  br label %done",
        "done:",
        "  %re = phi double [ %hr, %entry ], [ %fr, %form ]",
        "  %im = phi double [ %hi, %entry ], [ %fi, %form ]",
        *out,
        f"  store {T} {re}, ptr %out, align 4",
        f"  %out.im.p = getelementptr inbounds {C}, ptr %out, i64 0, i32 1",
        f"  store {T} {im}, ptr %out.im.p, align 4",
        "  ret void",
        "}",
        _complex_power_value_ir(),
    ])


def _complex_power_value_ir() -> str:
    """``pyjlad.special.cpow.value(ar, ai, br, bi)``: CPython's ``_Py_c_pow`` (NaN, NaN where it sets ``EDOM``), and
    ``pyjlad.special.cpow.gap(h, f) = h - f``, both constants to Enzyme."""
    nan = "0x7FF8000000000000"
    return "\n".join([
        "define linkonce_odr { double, double } @pyjlad.special.cpow.value(double %ar, double %ai, double %br, "
        'double %bi) nounwind "enzyme_inactive" {',
        "entry:",
        "  %br.zero = fcmp oeq double %br, 0.0",
        "  %bi.zero = fcmp oeq double %bi, 0.0",
        "  %b.zero = and i1 %br.zero, %bi.zero",
        "  br i1 %b.zero, label %done, label %a.test",
        "a.test:",
        "  %ar.zero = fcmp oeq double %ar, 0.0",
        "  %ai.zero = fcmp oeq double %ai, 0.0",
        "  %a.zero = and i1 %ar.zero, %ai.zero",
        "  br i1 %a.zero, label %zero, label %general",
        "zero:",  # 0 ** b: 0, or NaN where CPython sets EDOM (b complex or negative)
        "  %bi.nonzero = fcmp une double %bi, 0.0",
        "  %br.negative = fcmp olt double %br, 0.0",
        "  %edom = or i1 %bi.nonzero, %br.negative",
        f"  %z = select i1 %edom, double {nan}, double 0.0",
        "  br label %done",
        "general:",
        "  %vabs = call double @hypot(double %ar, double %ai)",
        "  %len0 = call double @pow(double %vabs, double %br)",
        "  %at = call double @atan2(double %ai, double %ar)",
        "  %phase0 = fmul double %at, %br",
        "  %bi.nonzero2 = fcmp une double %bi, 0.0",
        "  br i1 %bi.nonzero2, label %complex.exponent, label %polar",
        "complex.exponent:",
        "  %t = fmul double %at, %bi",
        "  %e = call double @exp(double %t)",
        "  %len1 = fdiv double %len0, %e",
        "  %lv = call double @log(double %vabs)",
        "  %t2 = fmul double %bi, %lv",
        "  %phase1 = fadd double %phase0, %t2",
        "  br label %polar",
        "polar:",
        "  %len = phi double [ %len0, %general ], [ %len1, %complex.exponent ]",
        "  %phase = phi double [ %phase0, %general ], [ %phase1, %complex.exponent ]",
        "  %c = call double @cos(double %phase)",
        "  %s = call double @sin(double %phase)",
        "  %pr = fmul double %len, %c",
        "  %pi = fmul double %len, %s",
        "  br label %done",
        "done:",
        "  %re = phi double [ 1.0, %entry ], [ %z, %zero ], [ %pr, %polar ]",
        "  %im = phi double [ 0.0, %entry ], [ %z, %zero ], [ %pi, %polar ]",
        "  %r0 = insertvalue { double, double } undef, double %re, 0",
        "  %r = insertvalue { double, double } %r0, double %im, 1",
        "  ret { double, double } %r",
        "}",
        'define linkonce_odr double @pyjlad.special.cpow.gap(double %h, double %f) nounwind "enzyme_inactive" {',
        "entry:",
        "  %d = fsub double %h, %f",
        "  ret double %d",
        "}",
        *(f"declare double @{f}(double)" for f in ("exp", "log", "cos", "sin")),
        "declare double @pow(double, double)",
        "declare double @atan2(double, double)",
        "declare double @hypot(double, double)",
    ])


#: The external functions this module gives derivatives (callees of rules and Numba's helpers it defines).
HANDLED = (frozenset(_RULES) | frozenset(_STEPS) | frozenset(_HELPERS) | frozenset(_CLAMPED) | frozenset(_HYPOT)
           | frozenset(_COMPLEX_POWERS))



def _handled_callee(tokens: list[Token], index: int) -> str | None:
    """The name of the function of :data:`HANDLED` that ``tokens[index]`` calls (``@name(``), if any."""
    token = tokens[index]
    if (token.kind == "global" and token.text[1:] in HANDLED and index + 1 < len(tokens)
            and tokens[index + 1].text == "("):
        return token.text[1:]
    return None


def _declared_handled(line: str) -> str | None:
    """The name of the function of :data:`HANDLED` that a ``declare`` line declares, if any."""
    after = line[len("declare"):len("declare") + 1]
    if not line.startswith("declare") or after.isalnum() or after == "_":
        return None
    tokens = tokenize(line)
    first = next((k for k, t in enumerate(tokens) if t.kind == "global"), None)
    return None if first is None else _handled_callee(tokens, first)


def _redirected(line: str, used: set[str]) -> str:
    """``line`` with its calls of functions with a rule or a step sent to their ``pyjlad.special.*`` wrappers;
    every function of :data:`HANDLED` it calls is added to ``used``."""
    tokens = tokenize(line)
    out = []
    for index, token in enumerate(tokens):
        name = _handled_callee(tokens, index)
        if name is not None:
            used.add(name)
            if name in _RULES or name in _STEPS or name in _CLAMPED or name in _HYPOT:
                token = Token("global", f"@pyjlad.special.{name}")
        out.append(token.text)
    return "".join(out)


def _own_definition(line: str) -> bool:
    """Whether the ``define`` line ``line`` defines a function this module adds (a ``pyjlad.special.*`` wrapper,
    one of Numba's helpers defined here)."""
    symbol = next(iter(texts_of(line, "global")), "")
    return symbol.startswith("@pyjlad.special.") or symbol[1:] in _HELPERS or symbol[1:] in _COMPLEX_POWERS


def prepare(text: str) -> str:
    """``text`` (a module given to Enzyme) with derivatives for the functions of :data:`HANDLED`.

    Calls to functions with a rule are redirected to their ``pyjlad.special.*``
    wrappers, Numba's helpers are defined; the definitions needed are appended
    (``linkonce_odr``: modules prepared separately link together). A module
    calling none of them is returned unchanged.
    """
    if not any(symbol[1:] in HANDLED for symbol in set(texts_of(text, "global"))):
        return text
    used: set[str] = set()
    out = []
    own = False  # in a definition of this module's (a module prepared before): its calls stay as they are
    for line in text.splitlines():
        declared = _declared_handled(line)
        if declared is not None:
            if declared in _HELPERS or declared in _COMPLEX_POWERS:
                continue  # defined below
            out.append(line)
            continue
        if line.startswith("define"):
            own = _own_definition(line)
        elif line.startswith("}"):
            own = False
        elif not own and "@" in line and any(symbol[1:] in HANDLED for symbol in texts_of(line, "global")):
            line = _redirected(line, used)
        out.append(line)
    if used & set(_COMPLEX_POWERS):
        used.add("hypot")  # the complex power's modulus
    # a module prepared before (linked into this one) defines some already
    defined = {name for line in out if line.startswith("define") for name in texts_of(line, "global")}
    used = {name for name in used if f"@{name}" not in defined and f"@pyjlad.special.{name}" not in defined}
    if not used:
        return "\n".join(out) + "\n" if out != text.splitlines() else text
    extra: list[str] = []
    rules = [_RULES[name] for name in sorted(used) if name in _RULES]
    if rules:
        extra += [digamma_ir(), *_DIGAMMA_DECLS]
    extra += [_rule_ir(rule) for rule in rules]
    extra += [_step_ir(name, _STEPS[name]) for name in sorted(used) if name in _STEPS]
    extra += [_clamped_ir(name, _CLAMPED[name]) for name in sorted(used) if name in _CLAMPED]
    extra += [_hypot_ir(name, _HYPOT[name]) for name in sorted(used) if name in _HYPOT]
    extra += [_helper_ir(name) for name in sorted(used) if name in _HELPERS]
    extra += [_complex_power_ir(name) for name in sorted(used) if name in _COMPLEX_POWERS]
    return dedupe_declarations("\n".join([*out, *extra]) + "\n")
