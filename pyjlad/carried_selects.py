"""Keep Enzyme from tracking a running max/min by the index of its last update where that is wrong.

A running maximum (or minimum) is a loop-carried value updated by a ``select``::

    loop:
      %m = phi double [ %x0, %pre ], [ %m.next, %loop ]
      %v = load double, ptr %p
      %c = fcmp ogt double %v, %m
      %m.next = select i1 %c, double %v, double %m
      %s.next = fadd double %s, %m.next        ; the running max used in the loop

Enzyme v0.0.289's reverse rule for a ``select`` has a special case for this
shape (``createSelectInstAdjoint`` in ``AdjointGenerator.h``, with its other half
in ``createInvertedTerminator``): when one operand of the select is a loop-header
phi whose latch value is that select, it does not cache the condition of every
iteration; it adds an integer phi that records the iteration of the last
update (``getOrInsertConditionalIndex``) and, in the reverse loop, sends the
select's adjoint to the other operand only at the iteration where the *final*
value was taken, and never along the phi. No option turns it off, and it is
wrong in every case pyjlad's corpus met that is not a plain ``np.max``:

* the running max used inside its own loop (``s += m``, cumulative maxima):
  ``x = [1, 2, 3, 4]`` gives ``[0, 0, 0, 1]`` instead of ``[1, 1, 1, 1]``;
* a max per window in a nested loop (max-pooling): the adjoint of windows
  whose maximum is not their first element is dropped;
* next to a Numba array that is freed in the loop's function, Enzyme aborts
  ("Illegal replace ficticious phi").

:func:`freeze_carried_selects` puts a ``freeze`` after each such select, so the
phi's latch value is no longer a select and the special case never applies;
Enzyme reverses the select by its general rule (the condition cached per
iteration, one byte per iteration of tape). A ``freeze`` of a value that is
not poison is that value: the function computes the same numbers.
"""

from __future__ import annotations

import re

__all__ = ["freeze_carried_selects"]

_LOCAL = r'%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
_FLOAT_TYPE = r"(?:double|float|half|<\d+ x (?:double|float|half)>)"
_PHI_RE = re.compile(r"^\s*(" + _LOCAL + r") = phi (?:[a-z]+ )*(" + _FLOAT_TYPE + r") (.*)$")
_PHI_INCOMING_RE = re.compile(r"\[\s*([^,\[\]]+?),\s*(" + _LOCAL + r")\s*\]")
_SELECT_RE = re.compile(
    r"^(\s*)(" + _LOCAL + r") = select (?:[a-z]+ )*(?:i1|<\d+ x i1>) [^,]+, (" + _FLOAT_TYPE + r") ([^,]+), "
    + _FLOAT_TYPE + r" ([^,]+?)\s*(,.*)?$"
)


def _frozen_name(name: str) -> str:
    if name.startswith('%"'):
        return name[:-1] + '.pj.unfrozen"'
    if name[1:].isdigit():
        return f"%pj.unfrozen.{name[1:]}"
    return name + ".pj.unfrozen"


def freeze_carried_selects(define: str) -> tuple[str, bool]:
    """Freeze each float ``select`` that a loop-header phi takes back as its own latch value.

    Parameters
    ----------
    define : str
        The text of one LLVM ``define`` (from its ``define`` line to its ``}``).

    Returns
    -------
    tuple of (str, bool)
        The function, and whether it changed.

    Examples
    --------
    >>> body = '''define double @f(ptr %x, i64 %n) {
    ... entry:
    ...   %x0 = load double, ptr %x
    ...   br label %loop
    ... loop:
    ...   %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
    ...   %m = phi double [ %x0, %entry ], [ %m.next, %loop ]
    ...   %s = phi double [ 0.0, %entry ], [ %s.next, %loop ]
    ...   %p = getelementptr double, ptr %x, i64 %i
    ...   %v = load double, ptr %p
    ...   %c = fcmp ogt double %v, %m
    ...   %m.next = select i1 %c, double %v, double %m
    ...   %s.next = fadd double %s, %m.next
    ...   %i.next = add i64 %i, 1
    ...   %done = icmp eq i64 %i.next, %n
    ...   br i1 %done, label %exit, label %loop
    ... exit:
    ...   ret double %s.next
    ... }'''
    >>> text, changed = freeze_carried_selects(body)
    >>> changed
    True
    >>> print(text.split("\\n")[11])
      %m.next.pj.unfrozen = select i1 %c, double %v, double %m
    >>> print(text.split("\\n")[12])
      %m.next = freeze double %m.next.pj.unfrozen
    """
    if " select " not in define or " phi " not in define:
        return define, False
    lines = define.split("\n")
    incoming: dict[str, set[str]] = {}
    selects: list[tuple[int, re.Match[str]]] = []
    for k, line in enumerate(lines):
        if (phi := _PHI_RE.match(line)) is not None:
            incoming[phi.group(1)] = {v.strip() for v, _ in _PHI_INCOMING_RE.findall(phi.group(3))}
        elif (select := _SELECT_RE.match(line)) is not None:
            selects.append((k, select))
    changed = False
    for k, select in reversed(selects):
        name = select.group(2)
        if not any(name in incoming.get(operand.strip(), ()) for operand in (select.group(4), select.group(5))):
            continue
        indent, ty, unfrozen = select.group(1), select.group(3), _frozen_name(name)
        lines[k:k + 1] = [
            indent + unfrozen + lines[k][len(indent) + len(name):],
            f"{indent}{name} = freeze {ty} {unfrozen}",
        ]
        changed = True
    return ("\n".join(lines), True) if changed else (define, False)
