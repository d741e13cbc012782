"""Where Numba's ``np.linalg.inv`` calls its two LAPACK helpers, one call instead: ``@pyjlad_inverse.<kind>``.

Numba's ``np.linalg.inv`` copies the matrix and calls ``numba_xxgetrf`` (LU factors, in place), checks its
status, then ``numba_ez_xxgetri`` (the inverse from the factors, in place) on the same buffer and pivots.
:func:`inverse_pairs_in` replaces the first by a call returning the factorization's status (Numba's code
checks it as before) and the second by one call of a function with a reverse rule of its own
(:mod:`pyjlad.lapack_inverse`); the second call's status becomes 0. A factorization on its own
(``np.linalg.det``) is unchanged.

Examples
--------
>>> from pyjlad.ir import parse
>>> module = parse("define i32 @f(ptr %a, ptr %p) {\\nentry:\\n"
...                "  %r = call i32 @numba_xxgetrf.d(i8 100, i64 3, i64 3, ptr %a, i64 3, ptr %p)\\n"
...                "  %s = call i32 @numba_ez_xxgetri.d(i8 100, i64 3, ptr %a, i64 3, ptr %p)\\n"
...                "  ret i32 %s\\n}\\n", strict=False)
>>> print("\\n".join(inverse_pairs_in(module.definitions[0])))
d
>>> print("\\n".join(module.definitions[0].body))
entry:
  %pyjlad.inverse.end1 = getelementptr double, ptr %a, i64 3
  %r = call i32 @pyjlad_inverse.status.d(ptr %a, ptr %pyjlad.inverse.end1)
  call void @pyjlad_inverse.d(ptr %a, ptr %pyjlad.inverse.end1)
  %s = add i32 0, 0
  ret i32 %s
"""

from __future__ import annotations

from .ir import Function
from .ir.instructions import parse_instruction

__all__ = ["ELEMENTS", "FACTOR", "INVERSE", "INVERT", "KIND_CODES", "inverse_declarations", "inverse_pairs_in"]

#: The function :func:`inverse_pairs_in` calls (``@pyjlad_inverse.d``, ``@pyjlad_inverse.s``).
INVERSE = "pyjlad_inverse"
#: Numba's LAPACK helpers of the inverse: the factorization, then the inverse from it.
FACTOR, INVERT = "numba_xxgetrf", "numba_ez_xxgetri"
#: Element kind letter -> Numba's code for it (the helpers' first argument).
KIND_CODES = {"d": 100, "s": 115}
#: Element kind letter -> the LLVM type of an element.
ELEMENTS = {"d": "double", "s": "float"}


def inverse_pairs_in(function: Function) -> set[str]:
    """Rewrite, in ``function``'s body, each factorization followed by the inverse of the same buffer and
    pivots as one call of ``@pyjlad_inverse.<kind>``; return the kinds rewritten.

    Numba's ``np.linalg.inv`` calls ``@numba_xxgetrf.<kind>(kind, n, n, a, n, ipiv)``, checks its status,
    then ``@numba_ez_xxgetri.<kind>(kind, n, a, n, ipiv)``; the pair is matched by those values (a square
    matrix, contiguous: leading dimension ``n``). The factorization becomes ``@pyjlad_inverse.status.<kind>``,
    which returns its status without changing the buffer (it factors a copy; inactive), and the inverse
    becomes ``void @pyjlad_inverse.<kind>``, which inverts the buffer in place, with the reverse rule.

    Both take pointers only, the buffer and the buffer plus ``n`` elements (which tells the order), and the
    inverse returns nothing: Enzyme v0.0.289 applies a registered reverse rule only where every argument has
    a shadow (an integer has none: assertion ``argsInverted[i] == DIFFE_TYPE::DUP_NONEED``) and the result is
    not an integer (its default activity for one is a shadow: "The required return activity ... was
    CONSTANT but the assumed (default) return activity was DUP_ARG").
    """
    body = function.body or []
    factors: dict[tuple[str, ...], int] = {}
    pairs: list[tuple[int, int, str]] = []
    for index, line in enumerate(body):
        if f"@{FACTOR}." not in line and f"@{INVERT}." not in line:
            continue
        instruction = parse_instruction(line)
        call = instruction.call() if instruction is not None else None
        if call is None or "." not in call.callee:
            continue
        helper, kind = call.callee[1:].rsplit(".", 1)
        values = call.values
        if helper == FACTOR and len(values) == 6 and values[1] == values[2] == values[4] and kind in KIND_CODES:
            factors[(kind, values[2], values[3], values[4], values[5])] = index
        elif helper == INVERT and len(values) == 5 and kind in KIND_CODES:
            found = factors.pop((kind, *values[1:]), None)
            if found is not None:
                pairs.append((found, index, kind))
    for factor, invert, kind in pairs:
        instruction = parse_instruction(body[factor])
        _, order, _, buffer, _, _ = instruction.call().values
        end = f"%pyjlad.inverse.end{factor}"
        assigned = f"{instruction.result} = " if instruction.result else ""
        body[factor] = (f"  {end} = getelementptr {ELEMENTS[kind]}, ptr {buffer}, i64 {order}\n"
                        f"  {assigned}call i32 @{INVERSE}.status.{kind}(ptr {buffer}, ptr {end})")
        second = parse_instruction(body[invert]).result
        body[invert] = (f"  call void @{INVERSE}.{kind}(ptr {buffer}, ptr {end})"
                        + (f"\n  {second} = add i32 0, 0" if second else ""))
    function.body = [part for line in body for part in line.split("\n")]
    return {kind for _, _, kind in pairs}


def inverse_declarations(kind: str) -> str:
    """The declarations of the functions :func:`inverse_pairs_in` calls."""
    return f"declare i32 @{INVERSE}.status.{kind}(ptr, ptr)\ndeclare void @{INVERSE}.{kind}(ptr, ptr)"
