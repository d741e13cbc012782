"""Give every loop a trip count of its own, so that Enzyme never takes one loop's cache for another's.

Enzyme v0.0.289's reverse sweep, looking up a value a loop loaded (``GradientUtils::lookupM``), first looks for
a load it has already cached that reads "the same" memory, and reads that cache instead. Two loads count as the
same when their pointers have the same base object, the same start and step as LLVM's scalar evolution sees them,
and their loops the same trip count, with nothing written in between. It never compares the *loops*: two sibling
loops that both read ``x[i, j]`` for ``j in range(d)`` qualify, and the second loop's reverse then reads the first
loop's cache at the first loop's iteration counter, which at that moment holds a stale value. No option turns this
off, and it gives wrong derivatives with no error:

* two reductions over the same column inside a loop that then updates the column (a sweep: ``u = sum b[:, 0]**2``,
  ``v = sum sin(b[:, 0])`` in two loops, then ``b[:, 0] = ...``): the gradient was wrong by 20;
* a two-layer network whose hidden width is a constant (``tests/corpus``, ``ml/mlp-two-hidden-flat``): the loop
  over hidden units, fully unrolled before Enzyme, leaves three copies of the loop over inputs that each read
  ``x[i, j]``; the derivative with respect to one weight was wrong.

With Enzyme's loop-invariant cache on (its default) the shared cache is often one copied before the loop and
indexed correctly, which hid the second case; but that cache is wrong itself for a loop that reads what an earlier
iteration wrote (``y[i] = x[i] + a * y[i - 1]``), so pyjlad turns it off
(:data:`pyjlad.engines.differentiate.NO_HOISTED_CACHES`), and this rewrite is what keeps the loads apart.

:func:`distinct_trip_counts` makes the trip counts differ as scalar evolution sees them without changing what is
computed: in each loop, an ``icmp`` of integers that decides an exit (the condition of a conditional branch that
leaves the loop) and compares with a value from outside the loop (a constant, an argument, a value computed
before the loop) compares with a ``freeze`` of that value instead, one ``freeze`` per loop, placed right after the
value's definition (for a constant or an argument: at the end of the entry block) so that it stays invariant in
every loop the value was invariant in. A ``freeze`` of a value that is not poison is the value; scalar evolution
takes it for an unknown of its own, so no two loops share a trip count. Enzyme keeps the ``freeze``; LLVM's code
generation emits nothing for it.

Run it after constant-trip loops are unrolled (a frozen constant hides the count from the unroller). Not kept
apart: loops whose exits are not an integer ``icmp`` (a ``switch``), a bound computed inside the loop itself, and,
in the one retry that first prunes branches on constants (``ipsccp``, for a dead LAPACK call), loops with the same
constant trip count, whose ``freeze`` that pass folds.

>>> body = '''define void @f(ptr %x, i64 %n) {
... entry:
...   br label %one
... one:
...   %i = phi i64 [ 0, %entry ], [ %i.next, %one ]
...   %i.next = add i64 %i, 1
...   %c = icmp eq i64 %i.next, %n
...   br i1 %c, label %between, label %one
... between:
...   br label %two
... two:
...   %j = phi i64 [ 0, %between ], [ %j.next, %two ]
...   %j.next = add i64 %j, 1
...   %d = icmp eq i64 %j.next, %n
...   br i1 %d, label %out, label %two
... out:
...   ret void
... }
... '''
>>> print(distinct_trip_counts(body), end="")
define void @f(ptr %x, i64 %n) {
entry:
  %pj.trip.0 = freeze i64 %n
  %pj.trip.1 = freeze i64 %n
  br label %one
one:
  %i = phi i64 [ 0, %entry ], [ %i.next, %one ]
  %i.next = add i64 %i, 1
  %c = icmp eq i64 %i.next, %pj.trip.0
  br i1 %c, label %between, label %one
between:
  br label %two
two:
  %j = phi i64 [ 0, %between ], [ %j.next, %two ]
  %j.next = add i64 %j, 1
  %d = icmp eq i64 %j.next, %pj.trip.1
  br i1 %d, label %out, label %two
out:
  ret void
}
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .errors import IRError
from .ir import Function, parse
from .ir.cfg import ControlFlow, Loop, terminator_index
from .ir.instructions import Instruction, parse_instruction, significant
from .ir.lexer import Token, texts_of, tokenize

__all__ = ["distinct_trip_counts"]



@dataclass(frozen=True)
class _Bound:
    """An operand of an exit's ``icmp`` that the loop does not compute: its line, its token, its value and type."""

    line: int
    operand: int  # index into the line's significant tokens
    value: str
    type_: str


@dataclass
class _Body:
    """A body's lines with what the rewrite asks of them: the block of each line, where each block starts, and
    the line and instruction defining each value."""

    lines: list[str]
    graph: ControlFlow
    block_of: list[str]
    start: dict[str, int]
    definitions: dict[str, tuple[int, Instruction]]

    @classmethod
    def of(cls, lines: list[str]) -> _Body:
        graph = ControlFlow.of(lines)
        block_of = [name for name in graph.names for _ in graph.lines[name]]
        start = dict(zip(graph.names, itertools.accumulate((len(graph.lines[n]) for n in graph.names), initial=0)))
        definitions = {}
        for index, line in enumerate(lines):
            instruction = parse_instruction(line)
            if instruction is not None and instruction.result is not None:
                definitions[instruction.result] = (index, instruction)
        return cls(lines, graph, block_of, start, definitions)

    def defined_in(self, value: str, loop: Loop) -> bool:
        return value in self.definitions and self.block_of[self.definitions[value][0]] in loop.blocks

    def first_non_phi(self, block: str) -> int:
        """The body index of the first instruction of ``block`` that is not a ``phi``."""
        for k, line in enumerate(self.graph.lines[block]):
            instruction = parse_instruction(line)
            if instruction is not None and instruction.opcode != "phi":
                return self.start[block] + k
        raise IRError(f"block {block} has no terminator")

    def terminator(self, block: str) -> int:
        """The body index of ``block``'s terminator (its first line: a ``switch`` goes on over several lines)."""
        k = terminator_index(self.graph.lines[block])
        if k < 0:
            raise IRError(f"block {block} has no terminator")
        return self.start[block] + k

    def insertion_point(self, value: str) -> int:
        """Where a ``freeze`` of ``value`` goes: after its definition (after its block's phis, for a phi); before
        the entry block's terminator for a constant or an argument."""
        if value not in self.definitions:
            return self.terminator(self.graph.names[0])
        index, instruction = self.definitions[value]
        return self.first_non_phi(self.block_of[index]) if instruction.opcode == "phi" else index + 1


def _is_integer_type(word: str) -> bool:
    return word[:1] == "i" and word[1:].isdigit()


def _exit_bounds(body: _Body, loop: Loop) -> list[_Bound]:
    """The operands from outside ``loop`` of the integer ``icmp`` each of its exits branches on."""
    found = []
    for inside, _ in loop.exits:
        terminator = parse_instruction(body.lines[body.terminator(inside)])
        if terminator is None or terminator.opcode != "br" or len(terminator.operands()) != 3:
            continue
        condition = terminator.operands()[0]
        if not body.defined_in(condition, loop) or body.definitions[condition][1].opcode != "icmp":
            continue
        line, compare = body.definitions[condition]
        tokens = significant(list(compare.tokens))
        at = [t.text for t in tokens].index("icmp")
        # %c = icmp <predicate> <type> <a>, <b>
        if len(tokens) < at + 6 or not _is_integer_type(tokens[at + 2].text) or tokens[at + 4].text != ",":
            continue
        for operand in (at + 3, at + 5):
            token = tokens[operand]
            if ((token.kind == "local" and not body.defined_in(token.text, loop))
                    or (token.kind == "word" and token.text.lstrip("-").isdigit())):
                found.append(_Bound(line, operand, token.text, tokens[at + 2].text))
    return found


def _rewritten(function: Function) -> bool:
    """Rewrite ``function``'s exit compares (its body edited in place); whether anything changed."""
    if not any(" icmp " in line for line in function.body or ()):
        return False
    body = _Body.of(function.body or [])
    used = set(texts_of("\n".join(body.lines), "local"))
    fresh = (name for name in (f"%pj.trip.{k}" for k in itertools.count()) if name not in used)
    edits: dict[int, dict[int, str]] = {}  # line -> {operand: the freeze it reads}
    inserts: dict[int, list[str]] = {}  # body index -> the freezes that go before it
    for loop in body.graph.loops():
        frozen: dict[tuple[str, str], str] = {}  # (type, value) -> its freeze (a literal may be of two types)
        for bound in _exit_bounds(body, loop):
            if bound.operand in edits.get(bound.line, {}):
                continue  # an exit of an inner loop and of this one: frozen for the inner loop
            key = (bound.type_, bound.value)
            if key not in frozen:
                frozen[key] = next(fresh)
                inserts.setdefault(body.insertion_point(bound.value), []).append(
                    f"  {frozen[key]} = freeze {bound.type_} {bound.value}")
            edits.setdefault(bound.line, {})[bound.operand] = frozen[key]
    if not edits:
        return False
    lines = body.lines
    for line, operands in edits.items():
        tokens = list(tokenize(lines[line]))
        kept = [k for k, t in enumerate(tokens) if t.kind not in ("ws", "comment")]
        for operand, name in operands.items():
            tokens[kept[operand]] = Token("local", name)
        lines[line] = "".join(t.text for t in tokens)
    for at in sorted(inserts, reverse=True):
        lines[at:at] = inserts[at]
    function.body = lines
    return True


def distinct_trip_counts(text: str) -> str:
    """Module ``text`` with each loop's exit compares reading a ``freeze`` of their own of the loop's bounds
    (see the module's description); the text unchanged when no loop has such a compare.

    Parameters
    ----------
    text : str
        LLVM IR of a module.

    Returns
    -------
    str
        The module, each function's loops with trip counts of their own.
    """
    if " icmp " not in text:
        return text
    module = parse(text, strict=False)
    changed = False
    for function in module.definitions:
        changed |= _rewritten(function)
    return module.render() if changed else text
