"""``np.logaddexp``/``np.logaddexp2`` at a tie (``x == y``) and ``np.sinc`` at 0 differentiated as the smooth
functions they are (:func:`smooth_ties`, :func:`smooth_sinc_zero`).

Numba computes ``np.logaddexp(x, y)`` as NumPy's ``npy_logaddexp`` does::

    if x == y:                          # (for infinities of one sign, without warnings)
        return x + log(2)
    d = x - y
    return x + log1p(exp(-d)) if d > 0 else y + log1p(exp(d))

Enzyme differentiates the branch taken: at a tie, ``x + log(2)``, whose derivative is ``(1, 0)``, not the
``(1/2, 1/2)`` of the smooth function, and whose second derivative is 0, not ``1/4``. Softplus written
``np.logaddexp(0.0, z)`` at ``z = 0`` (a logistic regression started at zero weights) had a wrong gradient
and a zero Hessian (a user-style probe, 2026-12-04). :func:`smooth_ties` writes the tie's value as

    x/2 + y/2 + log(2) + d*d/8        (d = x - y, taken as 0 where it is NaN: a tie of infinities)

equal to ``x + log(2)`` wherever ``x == y`` (``d`` is 0, or NaN for infinities, whose value stays the
infinity), with the smooth function's first and second derivatives there (those of
``(x + y)/2 + log(2 cosh(d/2))``). ``np.logaddexp2``'s tie ``x + 1`` alike, with ``ln(2) d*d/8``.

The tie's block is recognised by its shape: the ``fadd`` of ``x`` and ``log(2)`` (or ``1.0``) is in the block
a ``br i1 %c`` enters when true, ``%c = fcmp oeq`` of ``x`` and ``y``, in a function that calls ``log1p``.
"""

from __future__ import annotations

import math
import struct

from .ir.cfg import blocks
from .ir.instructions import parse_instruction

__all__ = ["smooth_sinc_zero", "smooth_ties"]

#: The constant a tie adds, as LLVM prints it, and the coefficient of ``d*d`` that gives the smooth function's
#: second derivative there: ``np.logaddexp`` (``log(2)``), ``np.logaddexp2`` (1).
_TIES = {"0x3FE62E42FEFA39EF": 0.125, "1.000000e+00": math.log(2.0) / 8.0}


def _float_literal(value: float) -> str:
    """``value`` as an LLVM ``double`` literal (its bits: exact)."""
    return "0x" + struct.pack(">d", value).hex().upper()


def smooth_ties(define: str) -> str:
    """``define`` (one definition's text) with each logaddexp tie written as its smooth form (see the module).

    >>> text = '''define double @f(double %x, double %y) {
    ... entry:
    ...   %c = fcmp oeq double %x, %y
    ...   br i1 %c, label %tie, label %other
    ... tie:
    ...   %t = fadd double %x, 0x3FE62E42FEFA39EF
    ...   ret double %t
    ... other:
    ...   %e = call double @log1p(double %x)
    ...   ret double %e
    ... }'''
    >>> print("\\n".join(smooth_ties(text).splitlines()[4:15]))
    tie:
      %t.pyjlad.d = fsub double %x, %y
      %t.pyjlad.ok = fcmp ord double %t.pyjlad.d, 0.000000e+00
      %t.pyjlad.dz = select i1 %t.pyjlad.ok, double %t.pyjlad.d, double 0.000000e+00
      %t.pyjlad.dd = fmul double %t.pyjlad.dz, %t.pyjlad.dz
      %t.pyjlad.q = fmul double %t.pyjlad.dd, 0x3FC0000000000000
      %t.pyjlad.hx = fmul double %x, 5.000000e-01
      %t.pyjlad.hy = fmul double %y, 5.000000e-01
      %t.pyjlad.m = fadd double %t.pyjlad.hx, %t.pyjlad.hy
      %t.pyjlad.l = fadd double %t.pyjlad.m, 0x3FE62E42FEFA39EF
      %t = fadd double %t.pyjlad.l, %t.pyjlad.q
    """
    if "@log1p" not in define or " fcmp oeq double " not in define:
        return define
    lines = define.split("\n")
    header, body, footer = lines[0], lines[1:-1], lines[-1]
    parsed = [parse_instruction(line) for line in body]
    equal = {ins.result: _compared(ins.text) for ins in parsed
             if ins is not None and ins.opcode == "fcmp" and " fcmp oeq double " in ins.text and ins.result}
    entered: dict[str, tuple[str, str]] = {}  # a block -> the operands of the equality its branch tested
    for ins in parsed:
        if ins is not None and ins.opcode == "br" and ins.text.lstrip().startswith("br i1 "):
            words = ins.text.replace(",", " ").split()
            condition, target = words[2], words[4].lstrip("%")
            if condition in equal:
                entered[target] = equal[condition]
    if not entered:
        return define
    out: list[str] = []
    for name, block in blocks(body):
        operands = entered.get(name)
        for line in block:
            ins = parse_instruction(line) if operands is not None else None
            replaced = _smooth(ins, operands) if ins is not None and ins.opcode == "fadd" else None
            out += replaced if replaced is not None else [line]
    return "\n".join([header, *_folded_ties(out, equal), footer])


def _folded_ties(body: list[str], equal: dict[str, tuple[str, str]]) -> list[str]:
    """``body`` with each tie LLVM folded to a constant (``np.logaddexp(0.0, z)``: the branch on ``z == 0.0``
    goes straight to a ``phi`` that takes ``log(2)`` from the comparing block) computed on an edge block of its
    own in the smooth form. (On its own block: the form's ``d*d`` is infinite where ``z`` is, and its adjoint,
    0 where the edge is not taken, would be ``0 * inf``.)"""
    out = list(body)
    for name, lines in list(blocks(out)):
        block = [line for line in lines if line.strip()]
        last = parse_instruction(block[-1]) if block else None
        if last is None or last.opcode != "br" or not last.text.lstrip().startswith("br i1 "):
            continue
        words = last.text.replace(",", " ").split()
        condition, target, other = words[2], words[4].lstrip("%"), words[6].lstrip("%")
        if condition not in equal or target == other or "0.000000e+00" not in equal[condition]:
            continue
        zero = equal[condition].index("0.000000e+00")
        z = equal[condition][1 - zero]
        joins = [(k, line) for k, line in enumerate(out) if line == f"{target}:" or line.startswith(f"{target}:")]
        if not joins:
            continue
        start = joins[0][0] + 1
        edge = f"{name}.pyjlad.tie"
        changed = False
        k = start
        while k < len(out) and parse_instruction(out[k]) is not None and parse_instruction(out[k]).opcode == "phi":
            for constant in _TIES:
                incoming = f"[ {constant}, %{name} ]"
                if incoming in out[k] and not changed:
                    result = f"%{edge}.v"
                    steps = _smooth_steps(result, "0.000000e+00", z, constant)
                    out[k] = out[k].replace(incoming, f"[ {result}, %{edge} ]")
                    changed = True
                    tie_block = [f"{edge}:", *("  " + step for step in steps), f"  br label %{target}"]
            k += 1
        if not changed:
            continue
        for j in range(start, k):  # the join's other phis: what they took from the comparing block, from the edge
            out[j] = out[j].replace(f", %{name} ]", f", %{edge} ]")
        branch_at = out.index(block[-1])
        out[branch_at] = block[-1].replace(f"label %{target}", f"label %{edge}", 1)
        out[branch_at + 1:branch_at + 1] = tie_block
    return out


def _compared(text: str) -> tuple[str, str]:
    """The two operands of ``%c = fcmp oeq double a, b`` (values or literals)."""
    first, _, rest = text.split(" fcmp oeq double ", 1)[1].partition(",")
    return first.strip(), rest.split(",")[0].strip()


def _smooth(ins, operands: tuple[str, str]) -> list[str] | None:
    """The smooth form of a tie's ``fadd`` (``x + constant`` for the tested ``x`` and a tie's constant)."""
    words = ins.text.split()
    if len(words) < 6 or words[-3] != "double" or '"' in ins.text or ins.text.count(",") != 1:
        return None
    added, constant = words[-2].rstrip(","), words[-1]
    if constant not in _TIES or added not in operands:
        return None
    x = added
    y = operands[1] if operands[0] == x else operands[0]
    indent = ins.text[: len(ins.text) - len(ins.text.lstrip())] or "  "
    return [indent + step for step in _smooth_steps(ins.result, x, y, constant)]


def _smooth_steps(r: str, x: str, y: str, constant: str) -> list[str]:
    """Instructions computing ``r`` as the smooth form of the tie ``x + constant`` of ``x`` and ``y``."""
    return [
        f"{r}.pyjlad.d = fsub double {x}, {y}",
        f"{r}.pyjlad.ok = fcmp ord double {r}.pyjlad.d, 0.000000e+00",
        f"{r}.pyjlad.dz = select i1 {r}.pyjlad.ok, double {r}.pyjlad.d, double 0.000000e+00",
        f"{r}.pyjlad.dd = fmul double {r}.pyjlad.dz, {r}.pyjlad.dz",
        f"{r}.pyjlad.q = fmul double {r}.pyjlad.dd, {_float_literal(_TIES[constant])}",
        f"{r}.pyjlad.hx = fmul double {x}, 5.000000e-01",
        f"{r}.pyjlad.hy = fmul double {y}, 5.000000e-01",
        f"{r}.pyjlad.m = fadd double {r}.pyjlad.hx, {r}.pyjlad.hy",
        f"{r}.pyjlad.l = fadd double {r}.pyjlad.m, {constant}",
        f"{r} = fadd double {r}.pyjlad.l, {r}.pyjlad.q",
    ]


#: ``pi * 1e-20`` and ``pi`` as LLVM prints them: Numba's ``np.sinc(x)`` is ``sin(pi x) / (pi x)`` with ``x``
#: replaced by ``1e-20`` where it is 0, and LLVM folds ``pi * 1e-20``.
_SINC_TINY, _PI = "0x3BE28B70CAA3E9F8", "0x400921FB54442D18"
#: -1/6, exactly as a double.
_MINUS_SIXTH = "0xBFC5555555555555"


def smooth_sinc_zero(define: str) -> str:
    """``define`` with ``np.sinc(x)`` at ``x == 0`` computed as ``1 - (pi x)^2 / 6`` (the value 1, and the
    function's first and second derivatives there: 0 and ``-pi^2/3``) instead of ``sinc(1e-20)``, whose
    derivatives are those of a constant (Enzyme gave a Hessian of 0 at ``x = 0``).

    Numba's ``np.sinc`` replaces ``x`` by ``1e-20`` where it is 0 and returns ``sin(y) / y`` of ``y = pi x``:
    after Numba's O3 (and ``guarded-selects``) ``%y = phi double [ pi*1e-20, %B ], [ %m, %E ]`` (or a
    ``select`` on the same condition), ``%m = fmul double %x, pi``, ``%B`` ending in ``br i1 %c`` of
    ``%c = fcmp oeq double %x, 0.0``. The ``fdiv`` of ``sin(%y)`` by ``%y`` is kept, and its result taken
    where ``%c`` is false.

    >>> text = '''define double @f(double %x) {
    ... entry:
    ...   %c = fcmp oeq double %x, 0.000000e+00
    ...   %m = fmul double %x, 0x400921FB54442D18
    ...   %y = select i1 %c, double 0x3BE28B70CAA3E9F8, double %m
    ...   %s = tail call double @llvm.sin.f64(double %y)
    ...   %r = fdiv double %s, %y
    ...   ret double %r
    ... }'''
    >>> print("\\n".join(smooth_sinc_zero(text).splitlines()[6:13]))
      %r.pyjlad.raw = fdiv double %s, %y
      %r.pyjlad.px = fmul double %x, 0x400921FB54442D18
      %r.pyjlad.pp = fmul double %r.pyjlad.px, %r.pyjlad.px
      %r.pyjlad.t = fmul double %r.pyjlad.pp, 0xBFC5555555555555
      %r.pyjlad.taylor = fadd double %r.pyjlad.t, 1.000000e+00
      %r = select i1 %c, double %r.pyjlad.taylor, double %r.pyjlad.raw
      ret double %r
    """
    if _SINC_TINY not in define or "@llvm.sin.f64" not in define:
        return define
    lines = define.split("\n")
    parsed = [parse_instruction(line) for line in lines]
    by_result = {ins.result: ins for ins in parsed if ins is not None and ins.result}
    zero_tests = {ins.result: _compared(ins.text)[0] for ins in by_result.values()
                  if ins.opcode == "fcmp" and " fcmp oeq double " in ins.text and _compared(ins.text)[1] == "0.000000e+00"}
    guarded = {}  # %y -> (%c, %x): y is pi x, or pi * 1e-20 where c (x == 0)
    for ins in by_result.values():
        found = _sinc_argument(ins, by_result, zero_tests, lines)
        if found is not None:
            guarded[ins.result] = found
    if not guarded:
        return define
    out = []
    for line, ins in zip(lines, parsed):
        if ins is None or ins.opcode != "fdiv" or '"' in ins.text:
            out.append(line)
            continue
        words = ins.text.replace(",", " ").split()
        numerator, denominator = words[-2], words[-1]
        sine = by_result.get(numerator)
        if denominator not in guarded or sine is None or f"@llvm.sin.f64(double {denominator})" not in sine.text:
            out.append(line)
            continue
        condition, x = guarded[denominator]
        r = ins.result
        indent = line[: len(line) - len(line.lstrip())]
        out += [indent + step for step in (
            f"{r}.pyjlad.raw = fdiv double {numerator}, {denominator}",
            f"{r}.pyjlad.px = fmul double {x}, {_PI}",
            f"{r}.pyjlad.pp = fmul double {r}.pyjlad.px, {r}.pyjlad.px",
            f"{r}.pyjlad.t = fmul double {r}.pyjlad.pp, {_MINUS_SIXTH}",
            f"{r}.pyjlad.taylor = fadd double {r}.pyjlad.t, 1.000000e+00",
            f"{r} = select i1 {condition}, double {r}.pyjlad.taylor, double {r}.pyjlad.raw")]
    return "\n".join(out)


def _sinc_argument(ins, by_result, zero_tests, lines) -> tuple[str, str] | None:
    """``(condition, x)`` where ``ins`` is ``y``: ``pi x``, or ``pi * 1e-20`` where ``condition`` (``x == 0``)."""
    words = ins.text.replace(",", " ").replace("[", " ").replace("]", " ").split()
    if ins.opcode == "select" and len(words) >= 9 and words[6] == _SINC_TINY:
        condition, other = words[4], words[8]
    elif ins.opcode == "phi" and _SINC_TINY in words and len(words) == 8:
        values = {words[4]: words[5], words[6]: words[7]}  # value -> its block
        others = [v for v in values if v != _SINC_TINY]
        if len(others) != 1:
            return None
        other, tiny_block = others[0], values[_SINC_TINY].lstrip("%")
        condition = _branch_condition(lines, tiny_block)
        if condition is None:
            return None
    else:
        return None
    product = by_result.get(other)
    if product is None or product.opcode != "fmul" or condition not in zero_tests:
        return None
    x = zero_tests[condition]
    if product.text.replace(" ", "").endswith(f"fmuldouble{x},{_PI}") is False:
        return None
    return condition, x


def _branch_condition(lines: list[str], block: str) -> str | None:
    """The condition of the ``br i1`` ending ``block`` (``None`` if it does not end so)."""
    for name, body in blocks(lines[1:-1]):
        if name == block:
            ends = [line for line in body if line.strip()]
            last = ends[-1].strip() if ends else ""
            return last.replace(",", " ").split()[2] if last.startswith("br i1 ") else None
    return None
