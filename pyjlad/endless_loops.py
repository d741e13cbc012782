"""Loops of a derivative that can never be left once they repeat: Enzyme's second reverse sweep of some loops.

Enzyme v0.0.289 differentiates a reverse sweep a second time (the reverse-mode ``pyjlad.jacobian`` of an
``@njit`` function returning ``pyjlad.grad(f)(x)``) into code that never returns where ``f`` has a loop with a
run-time trip count that it can leave early: a ``break``, a ``return`` in the loop, or an exception raised in a
loop and caught by ``try``/``except`` around it (user-style probes, 2026-12-07). The loop it builds for the reverse
of the inner reverse loop tests a value it read once, before the loop, to decide whether to go round again
(a cache of the inner loop's last iteration, read at the wrong level): entered with "again", it spins for ever.

:func:`endless_loops` finds such loops in the derivative Enzyme and LLVM's optimizer produced: a natural loop
with no way out at all, or whose every way out is a branch (or ``switch``) on a value defined outside the loop
(or a constant). (A block that returns is never in a loop: it reaches no back edge.) Such a loop runs once or for ever, which
no terminating source loop compiles to (LLVM's own loop passes move such a test in front of the loop). The
engine (:func:`pyjlad.engines.differentiate.run_enzyme`) refuses a derivative that calls pyjlad derivatives
from ``@njit`` code and has one, with :class:`pyjlad.nested.NestedDerivativeError`, instead of running it.

>>> text = '''define void @f(i1 %again, ptr %p) {
... entry:
...   br label %spin
... spin:
...   %v = load double, ptr %p
...   %w = fadd double %v, 1.0
...   store double %w, ptr %p
...   br i1 %again, label %spin, label %out
... out:
...   ret void
... }'''
>>> endless_loops(text)
[('f', 'spin')]
>>> endless_loops(text.replace("br i1 %again", "%more = fcmp olt double %w, 9.0\\n  br i1 %more"))
[]
"""

from __future__ import annotations

from .ir.cfg import ControlFlow, Loop, terminator_index
from .ir.instructions import parse_instruction
from .ir.module import parse

__all__ = ["endless_loops"]

def endless_loops(module_text: str) -> list[tuple[str, str]]:
    """``(function, loop header)`` of each loop in ``module_text`` that runs once or for ever (see the module's
    docstring), in module order."""
    found = []
    for function in parse(module_text, strict=False).definitions:
        body = function.body or []
        if not body or parse_instruction(body[0]) is not None:
            continue  # an entry block without a label: no block branches back to it, its loops are named
        graph = ControlFlow.of(body)
        inside_defined = _definitions_by_block(graph)
        found += [(function.name, loop.header) for loop in graph.loops()
                  if not _can_leave(graph, loop, inside_defined)]
    return found


def _definitions_by_block(graph: ControlFlow) -> dict[str, set[str]]:
    """The values (``%x``) each block defines."""
    defined: dict[str, set[str]] = {}
    for name, lines in graph.lines.items():
        results = (parse_instruction(line) for line in lines)
        defined[name] = {i.result for i in results if i is not None and i.result is not None}
    return defined


def _can_leave(graph: ControlFlow, loop: Loop, defined: dict[str, set[str]]) -> bool:
    """Whether ``loop`` has a way out whose test it computes anew (or one this does not judge)."""
    computed_inside = set().union(*(defined[block] for block in loop.blocks))
    for block in loop.blocks:
        lines = graph.lines[block]
        terminator = parse_instruction(lines[terminator_index(lines)])
        if terminator is None or terminator.opcode not in ("br", "switch"):
            return True  # (no terminator read, or indirectbr, invoke, callbr: not judged)
        tested = terminator.operands()[:1]  # (the tested value comes first; the others are the targets' labels)
        if any(s not in loop.blocks for s in graph.succ[block]) and computed_inside.intersection(tested):
            return True
    return False
