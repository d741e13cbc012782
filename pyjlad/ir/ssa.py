"""Dominance restored after a pass changed a body's control flow: each use its definition no longer dominates
reads a ``phi`` instead (:func:`restore_dominance`).

A pass that sends some paths through a new join (:mod:`pyjlad.loop_exit_latches` sends a loop's early exits
through its latch) leaves values defined on one side used after the join. As LLVM's ``SSAUpdater`` does, each
such use reads the value reaching it: the value itself from a block its definition dominates, ``poison`` from a
path that never defined it, and a ``phi`` at each join in between. ``poison`` is only ever read on paths the
program never takes with that value (the pass's promise: on the new paths, the value is not used).

>>> body = ["entry:", "  br i1 %c, label %a, label %join", "a:", "  %v = add i64 %n, 1", "  br label %join",
...         "join:", "  %w = mul i64 %v, 2", "  ret void"]
>>> print("\\n".join(restore_dominance(body)))
entry:
  br i1 %c, label %a, label %join
a:
  %v = add i64 %n, 1
  br label %join
join:
  %pyjlad.ssa.0 = phi i64 [ poison, %entry ], [ %v, %a ]
  %w = mul i64 %pyjlad.ssa.0, 2
  ret void
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cfg import ControlFlow
from .instructions import Instruction, parse_instruction
from .lexer import tokenize
from .value_types import result_type

__all__ = ["phi_with", "restore_dominance"]

_PREFIX = "pyjlad.ssa."


@dataclass
class _Tree:
    """The dominator tree of a body's reachable blocks, their predecessors and dominance frontiers."""

    idom: dict[str, str]
    preds: dict[str, list[str]]
    depth: dict[str, int] = field(default_factory=dict)
    frontier: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: ControlFlow) -> _Tree:
        idom = graph.dominators()
        tree = cls(idom, graph.predecessors())
        for block in graph.reverse_post_order():
            tree.depth[block] = 0 if idom[block] == block else tree.depth[idom[block]] + 1
            tree.frontier[block] = set()
        for block, preds in tree.preds.items():  # Cooper, Harvey and Kennedy's walk up from each join's preds
            for runner in preds if len(preds) > 1 else ():
                while runner != idom[block]:
                    tree.frontier[runner].add(block)
                    runner = idom[runner]
        return tree

    def dominates(self, a: str, b: str) -> bool:
        """Whether block ``a`` dominates block ``b`` (each dominates itself)."""
        if a not in self.depth or b not in self.depth:
            return False
        while self.depth[b] > self.depth[a]:
            b = self.idom[b]
        return a == b

    def iterated_frontier(self, block: str) -> set[str]:
        """The blocks where a value defined in ``block`` may meet another (a ``phi``'s only possible places)."""
        found: set[str] = set()
        todo = [block]
        while todo:
            for joined in self.frontier[todo.pop()]:
                if joined not in found:
                    found.add(joined)
                    todo.append(joined)
        return found


@dataclass
class _Updater:
    """The value of one definition reaching each block, with the ``phi``s that takes: at the blocks of the
    definition's iterated dominance frontier only, each made when a use asks for it (pruned SSA)."""

    value: str
    home: str
    type: str
    tree: _Tree
    fresh: list[int]
    joins: set[str] = field(default_factory=set)
    phis: dict[str, str] = field(default_factory=dict)  # block -> the phi's name
    pending: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.joins = self.tree.iterated_frontier(self.home)

    def at_end(self, block: str) -> str:
        """The value at the end of ``block``: up the dominator tree to the definition, a join or the entry."""
        while True:
            if self.tree.dominates(self.home, block):
                return self.value
            if block in self.joins:
                return self._phi(block)
            if self.tree.idom[block] == block:
                return "poison"
            block = self.tree.idom[block]

    def at_start(self, block: str) -> str:
        """The value reaching the start of ``block``, which the definition does not dominate."""
        if block in self.joins:
            return self._phi(block)
        if self.tree.idom[block] == block:
            return "poison"
        return self.at_end(self.tree.idom[block])

    def _phi(self, block: str) -> str:
        if block not in self.phis:
            self.phis[block] = f"%{_PREFIX}{self.fresh[0]}"
            self.fresh[0] += 1
            self.pending.append(block)
        return self.phis[block]

    def phi_lines(self) -> tuple[dict[str, str], dict[str, str]]:
        """Each ``phi`` this needs (block -> its line), after every ``at_start`` asked for (filling an entry may ask
        for more); and the ``phi``s left out as trivial (each entry one value, or the ``phi`` itself): name -> that
        value, for the lines that read them."""
        entries: dict[str, list[tuple[str, str]]] = {}
        while self.pending:
            block = self.pending.pop()
            entries[block] = [(self.at_end(p), p) for p in self.tree.preds[block]]
        trivial: dict[str, str] = {}
        changed = True
        while changed:
            changed = False
            for block, pairs in entries.items():
                name = self.phis[block]
                values = {trivial.get(v, v) for v, _ in pairs} - {name}
                if name not in trivial and len(values) == 1:
                    trivial[name] = values.pop()
                    changed = True
        for name in list(trivial):  # a chain of trivial phis reads its end
            while trivial[name] in trivial:
                trivial[name] = trivial[trivial[name]]
        lines = {block: f"  {self.phis[block]} = phi {self.type} "
                 + ", ".join(f"[ {trivial.get(v, v)}, %{p} ]" for v, p in pairs)
                 for block, pairs in entries.items() if self.phis[block] not in trivial}
        return lines, trivial


def _replaced(line: str, old: str, new: str) -> str:
    """``line`` with each ``old`` local value token written ``new``."""
    return "".join(new if t.kind == "local" and t.text == old else t.text for t in tokenize(line))


def phi_with(instruction: Instruction, values: dict[str, str]) -> str | None:
    """A ``phi`` line with the value of each entry from a block in ``values`` replaced; ``None`` where the line has
    more than its entries (metadata), which this does not rewrite."""
    text = instruction.text
    head = text[:text.index("[")]
    if not text.rstrip().endswith("]"):
        return None
    entries = [f"[ {values.get(block[1:], value)}, {block} ]" for value, block in instruction.phi_incoming()]
    return head + ", ".join(entries)


def restore_dominance(body: list[str]) -> list[str] | None:
    """``body`` with every use that its definition does not dominate reading the value that reaches it (see the
    module's docstring); ``body`` itself when every use is dominated, ``None`` when a value's type cannot be read
    (:func:`pyjlad.ir.value_types.result_type`) or a ``phi`` needing a new entry value carries metadata.

    Blocks no path from the entry reaches are left as they are."""
    graph = ControlFlow.of(body)
    tree = _Tree.of(graph)
    parsed = {name: [parse_instruction(line) if "%" in line else None for line in graph.lines[name]]
              for name in tree.depth}
    defined: dict[str, tuple[str, int, Instruction]] = {}
    for name, instructions in parsed.items():
        for index, instruction in enumerate(instructions):
            if instruction is not None and instruction.result is not None:
                defined[instruction.result] = (name, index, instruction)
    broken: list[tuple[str, int, str]] = []  # (block, line index, value)
    for name, instructions in parsed.items():
        for index, instruction in enumerate(instructions):
            if instruction is None:
                continue
            if instruction.opcode == "phi":
                for value, block in instruction.phi_incoming():
                    if value in defined and block[1:] in tree.depth and not tree.dominates(defined[value][0], block[1:]):
                        broken.append((name, index, value))
                continue
            for value in dict.fromkeys(instruction.operands()):
                home = defined.get(value)
                if home is None:
                    continue
                if not (tree.dominates(home[0], name) if home[0] != name else home[1] < index):
                    broken.append((name, index, value))
    if not broken:
        return body
    types = {value: result_type(defined[value][2]) for _, _, value in broken}
    if any(t is None for t in types.values()):
        return None
    fresh = [max((int(v[len(_PREFIX) + 1:]) + 1 for v in defined
                  if v.startswith(f"%{_PREFIX}") and v[len(_PREFIX) + 1:].isdigit()), default=0)]
    updaters = {value: _Updater(value, defined[value][0], types[value] or "", tree, fresh) for value in types}
    lines = {name: list(block_lines) for name, block_lines in graph.lines.items()}
    for name, index, value in dict.fromkeys(broken):
        updater = updaters[value]
        instruction = parse_instruction(lines[name][index])
        assert instruction is not None
        if instruction.opcode == "phi":
            values = {block[1:]: updater.at_end(block[1:]) for v, block in instruction.phi_incoming()
                      if v == value and block[1:] in tree.depth and not tree.dominates(updater.home, block[1:])}
            rewritten = phi_with(instruction, values)
            if rewritten is None:
                return None
            lines[name][index] = rewritten
        else:
            lines[name][index] = _replaced(lines[name][index], value, updater.at_start(name))
    trivial: dict[str, str] = {}
    for updater in updaters.values():
        phis, left_out = updater.phi_lines()
        trivial.update(left_out)
        for block, phi in phis.items():
            at = 1
            while at < len(lines[block]) and _is_phi(lines[block][at]):
                at += 1
            lines[block].insert(at, phi)
    body = [line for name in graph.names for line in lines[name]]
    if trivial:
        body = ["".join(trivial.get(t.text, t.text) if t.kind == "local" else t.text for t in tokenize(line))
                if _PREFIX in line else line for line in body]
    return body


def _is_phi(line: str) -> bool:
    """Whether ``line`` is a ``phi``, blank or a comment (what a new ``phi`` goes after in its block)."""
    text = line.strip()
    return not text or text.startswith(";") or (text.startswith("%") and " = phi " in text)
