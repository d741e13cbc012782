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

import itertools

from .ir.lexer import split_top_level, words
from .ir.module import Instruction, parse_instruction

__all__ = ["float_select", "freeze_carried_selects"]

_FLOATS = frozenset({"double", "float", "half"})


def _is_vector_of(type_: str, elements: frozenset[str]) -> bool:
    """Whether ``type_`` is written ``<N x T>`` with ``T`` one of ``elements``."""
    if not (type_.startswith("<") and type_.endswith(">")):
        return False
    parts = type_[1:-1].split(" ")
    return len(parts) == 3 and parts[0].isdigit() and parts[1] == "x" and parts[2] in elements


def _is_float_type(type_: str) -> bool:
    """``double``, ``float``, ``half`` or a vector of them."""
    return type_ in _FLOATS or _is_vector_of(type_, _FLOATS)


def _is_condition_type(type_: str) -> bool:
    """``i1`` or a vector of ``i1``."""
    return type_ == "i1" or _is_vector_of(type_, frozenset({"i1"}))


def _is_flag(word: str) -> bool:
    """A fast-math flag or similar lowercase keyword between an opcode and its type (``fast``, ``nnan``)."""
    return word.isalpha() and word.isascii() and word.islower()


def _float_phi_incoming(instruction: Instruction) -> set[str] | None:
    """The incoming values of a ``phi`` of a float type; ``None`` for any other instruction."""
    if instruction.opcode != "phi" or instruction.result is None:
        return None
    before = list(itertools.takewhile(lambda word: not word.startswith("["), words(instruction.after_opcode())))
    if not before or not _is_float_type(before[-1]) or not all(map(_is_flag, before[:-1])):
        return None
    return {value for value, _ in instruction.phi_incoming()}


def float_select(instruction: Instruction) -> tuple[str, str, str, str] | None:
    """``(condition, type, true value, false value)`` of a ``select`` between floats (scalars or vectors);
    ``None`` for anything else (also read by :mod:`pyjlad.guarded_selects`)."""
    if instruction.opcode != "select" or instruction.result is None:
        return None
    parts = [words(part) for part in split_top_level(instruction.after_opcode())]
    if len(parts) < 3:
        return None
    condition, true, false = parts[:3]
    if (len(condition) < 2 or not _is_condition_type(condition[-2]) or not all(map(_is_flag, condition[:-2]))
            or len(true) != 2 or len(false) != 2 or not _is_float_type(true[0]) or not _is_float_type(false[0])):
        return None
    return condition[-1], true[0], true[1], false[1]


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
    selects: list[tuple[int, str, tuple[str, str, str]]] = []
    for k, line in enumerate(lines):
        if " = phi " not in line and " = select " not in line:
            continue  # cheap: most lines are neither
        instruction = parse_instruction(line)
        if instruction is None or instruction.result is None:
            continue
        if (values := _float_phi_incoming(instruction)) is not None:
            incoming[instruction.result] = values
        elif (select := float_select(instruction)) is not None:
            selects.append((k, instruction.result, select))
    changed = False
    for k, name, (_, ty, true, false) in reversed(selects):
        if not any(name in incoming.get(operand, ()) for operand in (true, false)):
            continue
        indent = lines[k][:lines[k].index(name)]
        unfrozen = _frozen_name(name)
        lines[k:k + 1] = [
            indent + unfrozen + lines[k][len(indent) + len(name):],
            f"{indent}{name} = freeze {ty} {unfrozen}",
        ]
        changed = True
    return ("\n".join(lines), True) if changed else (define, False)
