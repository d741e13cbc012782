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

import re

__all__ = ["integer_min_max_as_selects"]

#: The intrinsic -> the ``icmp`` predicate true where its first operand is the result.
_PREDICATES = {"smin": "slt", "smax": "sgt", "umin": "ult", "umax": "ugt"}
_OPERAND = r"(?:-?\d+|true|false|%[-\w.$]+|%\"[^\"]+\")"
_CALL_RE = re.compile(
    r"^(?P<indent>\s*)(?P<name>%[-\w.$]+|%\"[^\"]+\") = (?:tail |notail |musttail )?call (?:[a-z_]+ )*"
    r"(?P<type>i\d+) @llvm\.(?P<op>smin|smax|umin|umax)\.i\d+\("
    r"(?P=type) (?:noundef )?(?P<a>" + _OPERAND + r"), (?P=type) (?:noundef )?(?P<b>" + _OPERAND + r")\)"
    r"(?P<rest>.*)$", re.M)


def _compare_name(name: str) -> str:
    """A new local name beside ``name``; quoted where ``name`` is quoted or a number (``%8``: ``%8.x`` is no
    name)."""
    bare = name[2:-1] if name.startswith('%"') else name[1:]
    return f'%"{bare}.pj.cmp"' if name.startswith('%"') or bare.isdigit() else f"%{bare}.pj.cmp"


def _as_select(call: re.Match[str]) -> str:
    indent, name, ty = call.group("indent"), call.group("name"), call.group("type")
    a, b, compare = call.group("a"), call.group("b"), _compare_name(name)
    return (f"{indent}{compare} = icmp {_PREDICATES[call.group('op')]} {ty} {a}, {b}\n"
            f"{indent}{name} = select i1 {compare}, {ty} {a}, {ty} {b}")


def integer_min_max_as_selects(define: str) -> tuple[str, bool]:
    """Each scalar ``@llvm.{s,u}{min,max}`` call of one ``define`` as an ``icmp`` and a ``select``.

    Parameters
    ----------
    define : str
        The text of one LLVM ``define`` (from its ``define`` line to its ``}``).

    Returns
    -------
    tuple of (str, bool)
        The function, and whether it changed.
    """
    text, count = _CALL_RE.subn(_as_select, define)
    return text, count > 0
