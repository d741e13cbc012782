"""``np.sinc`` at 0 differentiated as the smooth function it is (:func:`smooth_sinc_zero`).

(The ties of ``np.logaddexp``/``np.logaddexp2``, rewritten here in the IR until 2026-12-07, are written in smooth
form when Numba compiles the copy Enzyme differentiates: :mod:`pyjlad.smooth_logaddexp`.)
"""

from __future__ import annotations

from .ir.cfg import blocks
from .ir.instructions import parse_instruction

__all__ = ["smooth_sinc_zero"]


def _compared(text: str) -> tuple[str, str]:
    """The two operands of ``%c = fcmp oeq double a, b`` or ``fcmp oeq float a, b`` (values or literals)."""
    kind = " fcmp oeq double " if " fcmp oeq double " in text else " fcmp oeq float "
    first, _, rest = text.split(kind, 1)[1].partition(",")
    return first.strip(), rest.split(",")[0].strip()


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
                  if ins.opcode == "fcmp" and (" fcmp oeq double " in ins.text or " fcmp oeq float " in ins.text)
                  and _compared(ins.text)[1] == "0.000000e+00"}
    guarded = {}  # %y -> (%c, %x, widen): y is pi x, or pi * 1e-20 where c (x == 0)
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
        condition, x, widen = guarded[denominator]
        r = ins.result
        indent = line[: len(line) - len(line.lstrip())]
        out += [indent + step for step in (
            f"{r}.pyjlad.raw = fdiv double {numerator}, {denominator}",
            *([f"{r}.pyjlad.xd = fpext float {x} to double"] if widen else []),
            f"{r}.pyjlad.px = fmul double {f'{r}.pyjlad.xd' if widen else x}, {_PI}",
            f"{r}.pyjlad.pp = fmul double {r}.pyjlad.px, {r}.pyjlad.px",
            f"{r}.pyjlad.t = fmul double {r}.pyjlad.pp, {_MINUS_SIXTH}",
            f"{r}.pyjlad.taylor = fadd double {r}.pyjlad.t, 1.000000e+00",
            f"{r} = select i1 {condition}, double {r}.pyjlad.taylor, double {r}.pyjlad.raw")]
    return "\n".join(out)


def _sinc_argument(ins, by_result, zero_tests, lines) -> tuple[str, str, bool] | None:
    """``(condition, x, widen)`` where ``ins`` is ``y``: ``pi x``, or ``pi * 1e-20`` where ``condition`` (``x == 0``);
    ``widen`` where ``x`` is a float32 that ``pi x`` widened to double."""
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
    if product.text.replace(" ", "").endswith(f"fmuldouble{x},{_PI}"):
        return condition, x, False
    # float32: Numba's 1e-20 makes the sinc double, of x widened (``fpext float %x to double``)
    widened = product.text.replace(",", " ").split()[-2]
    ext = by_result.get(widened)
    if (ext is not None and ext.opcode == "fpext" and ext.text.replace(" ", "").endswith(f"fpextfloat{x}todouble")
            and product.text.replace(" ", "").endswith(f"fmuldouble{widened},{_PI}")):
        return condition, x, True
    return None


def _branch_condition(lines: list[str], block: str) -> str | None:
    """The condition of the ``br i1`` ending ``block`` (``None`` if it does not end so)."""
    for name, body in blocks(lines[1:-1]):
        if name == block:
            ends = [line for line in body if line.strip()]
            last = ends[-1].strip() if ends else ""
            return last.replace(",", " ").split()[2] if last.startswith("br i1 ") else None
    return None
