"""``x ** p`` at ``x == 0, p == 0`` differentiated as JAX does: 0, not NaN (:func:`safe_zero_powers`).

Enzyme v0.0.289 differentiates ``pow(x, p)`` with respect to ``x`` as ``p * pow(x, p - 1)``: at ``x = p = 0``,
``0 * inf``, NaN, where ``x ** 0`` is 1 everywhere and its derivative 0 (JAX's rule special-cases ``p == 0``).
The polynomial features ``np.power(x, np.arange(k))`` of a sample at 0 made a whole gradient NaN, with no error,
until 2026-12-06 (found by a user-style probe; ``tests/test_zero_powers.py``). Each call of ``pow`` (the
``llvm.pow`` intrinsic or the C function) now reads its base through a ``select``: 1 where ``x == 0`` and ``p ==
0``, else ``x``. The value is the same (``1 ** 0 == 0 ** 0 == 1``); the derivative there is taken at the base 1:
0 with respect to ``x`` (the ``select``'s constant side) and ``pow(1, 0) * log(1) = 0`` with respect to ``p``, as
JAX's. Elsewhere nothing changes. Vector calls are left as they are (Enzyme's copy has none).
"""

from __future__ import annotations

from .ir.instructions import parse_instruction
from .ir.lexer import tokenize

__all__ = ["safe_zero_powers"]

#: The scalar power functions and the type each takes.
_POWERS = {"@llvm.pow.f64": "double", "@llvm.pow.f32": "float", "@pow": "double", "@powf": "float"}
_PREFIX = "%pyjlad.zero.pow."


def _call_with_base(line: str, callee: str, base: str) -> str | None:
    """``line`` (a call of ``callee``) with its first argument's value written ``base``; ``None`` if unread."""
    tokens = tokenize(line)
    texts = [t.text for t in tokens]
    try:
        start = next(k for k, t in enumerate(texts) if t == callee and k + 1 < len(texts) and texts[k + 1] == "(")
    except StopIteration:
        return None
    depth, first = 0, None
    for k in range(start + 1, len(tokens)):
        if texts[k] == "(":
            depth += 1
        elif texts[k] == ")":
            depth -= 1
            if depth == 0:
                break
        elif texts[k] == "," and depth == 1:
            break
        elif depth == 1 and tokens[k].kind == "local":
            first = k  # the last value of the first argument
    if first is None:
        return None
    return "".join(base if k == first else text for k, text in enumerate(texts))


def safe_zero_powers(define: str) -> str:
    """``define`` (one definition's text) with the base of each scalar ``pow`` call read through a ``select`` (see
    the module).

    >>> text = '''define double @f(double %x, double %p) {
    ... entry:
    ...   %r = tail call fast double @llvm.pow.f64(double %x, double %p)
    ...   ret double %r
    ... }'''
    >>> print(safe_zero_powers(text))
    define double @f(double %x, double %p) {
    entry:
      %pyjlad.zero.pow.0.x = fcmp oeq double %x, 0.0
      %pyjlad.zero.pow.0.p = fcmp oeq double %p, 0.0
      %pyjlad.zero.pow.0.at = and i1 %pyjlad.zero.pow.0.x, %pyjlad.zero.pow.0.p
      %pyjlad.zero.pow.0 = select i1 %pyjlad.zero.pow.0.at, double 1.0, double %x
      %r = tail call fast double @llvm.pow.f64(double %pyjlad.zero.pow.0, double %p)
      ret double %r
    }
    """
    if "pow" not in define:
        return define
    out, count = [], 0
    for line in define.split("\n"):
        instruction = parse_instruction(line) if "pow" in line else None
        call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
        kind = _POWERS.get(call.callee) if call is not None else None
        values = call.values if kind is not None else []
        if kind is None or len(values) != 2 or not values[0].startswith("%") or values[0].startswith(_PREFIX):
            out.append(line)
            continue
        while f"{_PREFIX}{count} =" in define:  # a body rewritten before (a nested derivative's)
            count += 1
        name = f"{_PREFIX}{count}"
        rewritten = _call_with_base(line, call.callee, name)
        if rewritten is None:
            out.append(line)
            continue
        count += 1
        x, p = values
        out += [f"  {name}.x = fcmp oeq {kind} {x}, 0.0", f"  {name}.p = fcmp oeq {kind} {p}, 0.0",
                f"  {name}.at = and i1 {name}.x, {name}.p", f"  {name} = select i1 {name}.at, {kind} 1.0, {kind} {x}",
                rewritten]
    return "\n".join(out)
