"""Integer ``min``/``max`` intrinsics written as a compare and a ``select``, which Enzyme differentiates.

LLVM turns ``min(max(k, 1), n - 1)`` on integers (an index clamped into range, as interpolation
code does after ``np.searchsorted``) into ``@llvm.smax.i64`` / ``@llvm.smin.i64``. Enzyme v0.0.289 has no
reverse rule for these intrinsics, and where it cannot prove the integer inactive (an index loaded from
an array Numba's runtime allocated, whose element type it cannot see) it stops: "cannot handle
(reverse) unknown intrinsic llvm.smin". A ``select`` of the two operands on an ``icmp`` is the same
value, and Enzyme differentiates a ``select`` of any type; LLVM's optimizer turns it back into the
intrinsic after Enzyme.

Examples
--------
>>> body = '''define i64 @f(i64 %k, i64 %n) {
... entry:
...   %lo = tail call i64 @llvm.smax.i64(i64 %k, i64 1) #3
...   %hi = call i64 @llvm.umin.i64(i64 %lo, i64 %n)
...   %0 = call i64 @llvm.smin.i64(i64 %hi, i64 7)
...   ret i64 %0
... }'''
>>> text, changed = integer_min_max_as_selects(body)
>>> changed
True
>>> print(text)
define i64 @f(i64 %k, i64 %n) {
entry:
  %lo.pj.cmp = icmp sgt i64 %k, 1
  %lo = select i1 %lo.pj.cmp, i64 %k, i64 1
  %hi.pj.cmp = icmp ult i64 %lo, %n
  %hi = select i1 %hi.pj.cmp, i64 %lo, i64 %n
  %"0.pj.cmp" = icmp slt i64 %hi, 7
  %0 = select i1 %"0.pj.cmp", i64 %hi, i64 7
  ret i64 %0
}
"""

from __future__ import annotations

from .ir.instructions import valued_call
from .ir.lexer import tokenize, words
from .ir.names import decode_name, symbol_for

__all__ = ["integer_min_max_as_selects"]

#: The intrinsic -> the ``icmp`` predicate true where its first operand is the result.
_PREDICATES = {"smin": "slt", "smax": "sgt", "umin": "ult", "umax": "ugt"}


def _is_integer_type(word: str) -> bool:
    return word.startswith("i") and word[1:].isdigit()


def _as_select(line: str) -> str | None:
    """``line`` as an ``icmp`` and a ``select`` if it calls a scalar integer min/max intrinsic, else ``None``."""
    found = valued_call(line)
    if found is None or len(found[1].arguments) != 2:
        return None
    name, call, parts = found
    if len(parts) != 3 or parts[0] != "llvm" or parts[1] not in _PREDICATES or not _is_integer_type(parts[2]):
        return None
    types = [(words(tokenize(argument)) or [""])[0] for argument in call.arguments]
    if types != [parts[2], parts[2]]:
        return None
    (a, b), ty = call.values, parts[2]
    compare = symbol_for(decode_name(name) + ".pj.cmp", "%")
    indent = line[: len(line) - len(line.lstrip())]
    return (f"{indent}{compare} = icmp {_PREDICATES[parts[1]]} {ty} {a}, {b}\n"
            f"{indent}{name} = select i1 {compare}, {ty} {a}, {ty} {b}")


def integer_min_max_as_selects(define: str) -> tuple[str, bool]:
    """``define`` (one function's text, its ``define`` line to its ``}``) with each scalar
    ``@llvm.{s,u}{min,max}`` call written as an ``icmp`` and a ``select``, and whether anything changed."""
    lines = define.split("\n")
    rewritten = [_as_select(line) if "@llvm." in line else None for line in lines]
    if not any(rewritten):
        return define, False
    return "\n".join(new or line for new, line in zip(rewritten, lines)), True
