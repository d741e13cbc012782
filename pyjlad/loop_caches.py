"""Whether Enzyme may size a loop's caches once, for the loop's whole trip count (``-enzyme-max-cache``).

Enzyme keeps what a loop's reverse sweep needs in caches with one slot per iteration, allocated before the
loop when the iterations can be counted in advance. A loop with an early exit cannot be counted, and then
Enzyme grows its caches with ``realloc`` as the loop runs, from nothing every time the loop starts. Numba's
code is full of such exits that are never taken in a normal run: ``np.max``, ``np.min``, ``np.argmax`` stop at
the first NaN, and every ``raise`` (an empty array, a zero division, a check in an inlined NumPy function)
leaves the loop it is in. In the softmax classifier of ``benchmarks/temporaries.py`` (``z.max()`` per sample),
Enzyme's output (``PYJLAD_DUMP_IR``) grows two caches with ``realloc`` for every sample.

Enzyme's ``-enzyme-max-cache`` allocates such a loop's caches once, for the largest trip count LLVM can bound
(the count of the loop's counted exit). That is what the loop uses when its early exits are exceptional, but
far more than it uses when one of them is how it normally stops: a convergence test under a cap (``for it in
range(maxiter): ... if change < tol: break``) or a search. There the caches are sized for the cap times
everything the body keeps (a fixed-point iteration capped at 10^6 rounds of 10^5 elements asked for 800 GB
and ran out of memory, where the grown caches needed a few MB).

:func:`bounded_caches_fit` therefore allows it only for a module in which every loop has at most one exit
that is neither a ``raise`` nor a NaN test, and at least one loop has such an exit (otherwise the option
changes nothing). An exit is a ``raise`` when the block it leads to (or a chain of unconditional branches from
it) stores Numba's exception information (a ``@.const.picklebuf`` constant, or anything into an ``%excinfo``
slot), reports an exception in a parallel loop's body (pyjlad's rewrite of the raise in Numba's gufunc wrapper:
a non-zero store into :data:`pyjlad.openmp_loops.FAILED_FLAG`), or ends in ``unreachable`` (Numba's
``Py_FatalError``); a NaN test is a branch on ``fcmp uno``. Anything else counts as a normal exit, so a loop this reading
does not understand keeps Enzyme's default.

>>> body = '''define void @f(ptr %excinfo, ptr %x, i64 %n) {
... entry:
...   br label %loop
... loop:
...   %i = phi i64 [ 0, %entry ], [ %j, %next ]
...   %v = load double, ptr %x
...   %nan = fcmp uno double %v, 0.0
...   br i1 %nan, label %out, label %next
... next:
...   %j = add i64 %i, 1
...   %done = icmp eq i64 %j, %n
...   br i1 %done, label %out, label %loop
... out:
...   ret void
... }
... '''
>>> bounded_caches_fit(body)
True
>>> bounded_caches_fit(body.replace("fcmp uno", "fcmp olt"))   # a search: stops early as a rule
False
"""

from __future__ import annotations

from .ir import Function, parse
from .ir.cfg import ControlFlow, Loop
from .ir.instructions import Instruction, parse_instruction
from .ir.lexer import split_top_level, words
from .openmp_loops import FAILED_FLAG

__all__ = ["MAX_CACHE", "bounded_caches_fit"]

#: Enzyme's option: a loop it cannot count gets caches for the largest trip count LLVM can bound, allocated once.
MAX_CACHE = "-enzyme-max-cache=1"
#: How far an exit is followed through blocks that only branch on, looking for the raise.
_CHAIN = 4


def _raises(graph: ControlFlow, block: str, chain: int = _CHAIN) -> bool:
    """Whether ``block``, or the blocks it reaches by branches alone (an unconditional ``br``, or a ``switch`` in a
    block of nothing else, each of whose targets raises: :mod:`pyjlad.loop_exit_latches`' choice of a loop's way
    out), stores Numba's exception info or ends the program (``unreachable``, after ``Py_FatalError``)."""
    for line in graph.lines[block]:
        instruction = parse_instruction(line)
        if instruction is not None and instruction.opcode == "unreachable":
            return True
        if instruction is None or instruction.opcode != "store":
            continue
        values = [t.text for t in instruction.tokens if t.kind in ("global", "local", "word")]
        if any(v.startswith("@.const.picklebuf") for v in values):
            return True
        pointer = [t.text for t in instruction.tokens if t.kind == "local"][-1:]
        if pointer and pointer[0].startswith("%excinfo") and "null" not in values:
            return True
        if FAILED_FLAG in values and _stored_value(instruction) != "0":
            return True
    onward = graph.succ[block]
    if chain <= 1 or not onward:
        return False
    if len(onward) == 1:
        return _raises(graph, onward[0], chain - 1)
    instructions = [i for i in map(parse_instruction, graph.lines[block]) if i is not None]
    return len(instructions) == 1 and instructions[0].opcode == "switch" and \
        all(_raises(graph, target, chain - 1) for target in onward)


def _stored_value(store: Instruction) -> str:
    """The value a ``store`` writes (its first operand's last word)."""
    parts = split_top_level(store.after_opcode())
    return (words(parts[0]) or [""])[-1]


def _nan_test(graph: ControlFlow, block: str, definitions: dict[str, str]) -> bool:
    """Whether ``block`` ends in a branch on a NaN test (``fcmp uno``, Numba's ``np.isnan``)."""
    parsed = (parse_instruction(line) for line in reversed(graph.lines[block]))
    terminator = next((instruction for instruction in parsed if instruction is not None), None)
    if terminator is None or terminator.opcode != "br" or not terminator.operands():
        return False
    return definitions.get(terminator.operands()[0], "") == "fcmp uno"


def _normal_exits(graph: ControlFlow, loop: Loop, definitions: dict[str, str]) -> int:
    return sum(1 for inside, outside in loop.exits
               if not (_raises(graph, outside) or _nan_test(graph, inside, definitions)))


def _loops_fit(function: Function) -> tuple[bool, bool]:
    """``(every loop has at most one normal exit, some loop has another exit)`` for one function."""
    graph = ControlFlow.of(function.body or [])
    definitions = {}
    for instruction in function.instructions():
        if instruction.result is not None and instruction.opcode == "fcmp":
            words = [t.text for t in instruction.tokens if t.kind == "word"]
            definitions[instruction.result] = "fcmp " + next((w for w in words[1:] if w not in ("fast", "nnan",
                                                              "ninf", "nsz", "arcp", "contract", "afn", "reassoc")), "")
    fits, special = True, False
    for loop in graph.loops():
        normal = _normal_exits(graph, loop, definitions)
        fits &= normal <= 1
        special |= len(loop.exits) > normal
    return fits, special


def bounded_caches_fit(text: str) -> bool:
    """Whether Enzyme should size the caches of the loops of module ``text`` for their whole trip count.

    True when some loop has an exit that is a ``raise`` or a NaN test and no loop has more than one exit that is
    neither (see the module's description).
    """
    special = False
    for function in parse(text, strict=False).definitions:
        fits, has = _loops_fit(function)
        if not fits:
            return False
        special |= has
    return special
