"""The control-flow graph of a function body: its blocks, their successors, dominators and natural loops.

Read from the body's lines (:attr:`pyjlad.ir.Function.body`): a block starts at a label line (the entry
block may have none) and its successors are the ``label %name`` operands of its lines (``br``, ``switch``,
``invoke``). Loops are LLVM's natural loops: a back edge goes to a block that dominates its source, and
the loop of a header is the header and every block that reaches one of its back edges without passing
through the header.

>>> body = ["entry:", "  br label %head", "head:", "  %c = icmp eq i64 0, 0",
...         "  br i1 %c, label %out, label %body", "body:", "  br label %head", "out:", "  ret void"]
>>> graph = ControlFlow.of(body)
>>> [(loop.header, sorted(loop.blocks), loop.exits) for loop in graph.loops()]
[('head', ['body', 'head'], [('head', 'out')])]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .instructions import parse_instruction
from .lexer import Token, tokenize

__all__ = ["TERMINATORS", "ControlFlow", "Loop", "block_label", "blocks", "phi_retargeted", "phi_without",
           "remove_edge", "retargeted", "split_blocks", "successors", "terminator_index"]

#: The opcodes that end a block.
TERMINATORS = frozenset({"br", "switch", "ret", "unreachable", "indirectbr", "invoke", "resume", "callbr",
                         "catchswitch", "catchret", "cleanupret"})


def block_label(line: str) -> str | None:
    """The block name a label line defines (``B0.endif``, ``7``, ``"a b"``); ``None`` for other lines."""
    if not line or line[0].isspace() or ":" not in line:
        return None  # cheap: instructions are indented
    tokens = tokenize(line)
    if (len(tokens) < 2 or tokens[0].kind not in ("word", "string") or tokens[1].text != ":"
            or any(t.kind not in ("ws", "comment") for t in tokens[2:])):
        return None
    return tokens[0].text


def blocks(body: list[str]) -> list[tuple[str, list[str]]]:
    """``(name, lines)`` of each block of a function body, in order (the entry block may be unnamed: ``""``)."""
    found: list[tuple[str, list[str]]] = [("", [])]
    for line in body:
        label = block_label(line)
        if label is not None:
            found.append((label, [line]))
        else:
            found[-1][1].append(line)
    if len(found) > 1 and not any(line.strip() and not line.lstrip().startswith(";") for line in found[0][1]):
        found[:2] = [(found[1][0], found[0][1] + found[1][1])]  # the entry block has a label
    return found


def phi_retargeted(line: str, ends: dict[str, str]) -> str:
    """``line`` with each incoming block of a ``phi`` that is a key of ``ends`` renamed to its value: after a block
    was split, the block its terminator is in now (other lines unchanged).

    >>> phi_retargeted("  %p = phi ptr [ %a, %fill ], [ null, %entry ]", {"fill": "fill.done"})
    '  %p = phi ptr [ %a, %fill.done ], [ null, %entry ]'
    """
    instruction = parse_instruction(line) if " phi " in line else None
    if instruction is None or instruction.opcode != "phi":
        return line
    return "".join(f"%{ends[t.text[1:]]}" if t.kind == "local" and t.text[1:] in ends else t.text
                   for t in instruction.tokens)


def phi_without(line: str, block: str) -> str:
    """``line`` without a ``phi``'s entries from ``%block`` (other lines unchanged).

    >>> phi_without("  %p = phi ptr [ %a, %fail ], [ getelementptr ([2 x i8], ptr @s, i64 0, i64 1), %entry ]", "fail")
    '  %p = phi ptr [ getelementptr ([2 x i8], ptr @s, i64 0, i64 1), %entry ]'
    """
    instruction = parse_instruction(line) if " phi " in line else None
    if instruction is None or instruction.opcode != "phi":
        return line
    tokens = [t for t in instruction.tokens if t.kind != "comment"]
    head: list[str] = []
    entries: list[list[str]] = []
    depth = 0
    for token in tokens:
        opens = token.kind == "punct" and token.text in "([{<"
        closes = token.kind == "punct" and token.text in ")]}>"
        if depth == 0 and token.text == "[" and opens:
            entries.append([])
        if entries and (depth > 0 or opens):
            entries[-1].append(token.text)
        elif not entries:
            head.append(token.text)
        depth += 1 if opens else -1 if closes else 0
    kept = ["".join(entry) for entry in entries if not "".join(entry).rstrip("] ").endswith(f"%{block}")]
    return "".join(head) + ", ".join(kept)


def terminator_index(lines: list[str]) -> int:
    """The index in a block's ``lines`` of its terminator's first line (a ``switch`` goes on over several lines);
    ``-1`` if it has none.

    >>> terminator_index(["b:", "  switch i32 %x, label %d [", "    i32 1, label %e", "  ]"])
    1
    """
    for k in range(len(lines) - 1, -1, -1):
        instruction = parse_instruction(lines[k]) if lines[k].strip() else None
        if instruction is not None and instruction.opcode in TERMINATORS:
            return k
    return -1


def retargeted(lines: list[str], old: str, new: str) -> list[str]:
    """A block's ``lines`` with each ``label %old`` written ``label %new``: a branch's or a ``switch``'s targets, on
    whichever line they are; a ``phi``'s ``%old`` is no label and stays.

    >>> retargeted(["  %p = phi i1 [ 0, %a ]", "  br i1 %c, label %a, label %b"], "a", "z")
    ['  %p = phi i1 [ 0, %a ]', '  br i1 %c, label %z, label %b']
    """
    out = []
    for line in lines:
        if f"label %{old}" not in line:
            out.append(line)
            continue
        tokens = tokenize(line)
        out.append("".join(f"%{new}" if t.kind == "local" and t.text == f"%{old}" and k >= 2
                           and tokens[k - 2].text == "label" else t.text for k, t in enumerate(tokens)))
    return out


def split_blocks(body: list[str], expand: Callable[[str, int], list[str] | None]) -> tuple[list[str], int]:
    """``body`` with instruction lines replaced by the lines ``expand`` gives, which may open blocks of their own.

    ``expand(line, count)`` (``count``: how many lines were expanded before) returns ``None`` to keep ``line``,
    or the lines that replace it; the last of those, if a label, opens the block the rest of the split block
    goes on in, and each ``phi`` that named the split block as an incoming block names that one instead. Only
    lines in a block with a plain name are offered (an entry block without a label, or a quoted name, has no
    name to branch back to).

    Returns
    -------
    (list of str, int)
        The new body (``body`` itself when nothing was expanded) and how many lines were.

    >>> body = ["b:", "  call void @g()", "  br label %c", "c:", "  %p = phi i1 [ 0, %b ]"]
    >>> new, n = split_blocks(body, lambda line, k: [line, f"  br label %b.{k}", f"b.{k}:"] if "@g" in line else None)
    >>> new
    ['b:', '  call void @g()', '  br label %b.0', 'b.0:', '  br label %c', 'c:', '  %p = phi i1 [ 0, %b.0 ]']
    """
    out: list[str] = []
    ends: dict[str, str] = {}  # a split block's name -> the name of the block its terminator is in now
    block, count = "", 0
    for line in body:
        label = block_label(line)
        if label is not None:
            block = label if not label.startswith('"') else ""
            out.append(line)
            continue
        lines = expand(line, count) if block else None
        if lines is None:
            out.append(line)
            continue
        count += 1
        out += lines
        opened = block_label(lines[-1]) if lines else None
        if opened is not None:
            ends[block] = opened
    if not count:
        return body, 0
    return [phi_retargeted(line, ends) for line in out], count


def successors(lines: list[str]) -> list[str]:
    """The block names written ``label %name`` in ``lines`` (branch, switch and invoke targets), in order."""
    found = []
    for line in lines:
        if "label %" not in line:
            continue  # cheap: most lines branch nowhere
        tokens = [t for t in tokenize(line) if t.kind != "comment"]
        found += [tokens[k + 2].text[1:] for k in range(len(tokens) - 2)
                  if tokens[k] == Token("word", "label") and tokens[k + 1].text == " " and tokens[k + 2].kind == "local"]
    return found


@dataclass(frozen=True)
class Loop:
    """A natural loop: its header, its blocks, and its exiting edges ``(inside, outside)`` in block order."""

    header: str
    blocks: frozenset[str]
    exits: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ControlFlow:
    """The blocks of one body (:func:`blocks`), the successors of each, and the analyses built on them."""

    names: list[str]
    lines: dict[str, list[str]]
    succ: dict[str, list[str]]

    @classmethod
    def of(cls, body: list[str]) -> ControlFlow:
        found = blocks(body)
        names = [name for name, _ in found]
        known = set(names)
        return cls(names, dict(found), {name: [s for s in successors(lines) if s in known] for name, lines in found})

    def reverse_post_order(self) -> list[str]:
        """The blocks reachable from the entry, in reverse post-order (iterative depth-first search)."""
        order: list[str] = []
        seen = {self.names[0]}
        stack = [(self.names[0], iter(self.succ[self.names[0]]))]
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c not in seen), None)
            if child is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(child)
                stack.append((child, iter(self.succ[child])))
        return order[::-1]

    def predecessors(self) -> dict[str, list[str]]:
        """The predecessors of each block reachable from the entry, among those blocks, in reverse post-order."""
        order = self.reverse_post_order()
        preds: dict[str, list[str]] = {name: [] for name in order}
        for name in order:
            for successor in self.succ[name]:
                preds[successor].append(name)
        return preds

    @staticmethod
    def dominated(idom: dict[str, str], head: str) -> set[str]:
        """The reachable blocks ``head`` dominates (``head`` included), given :meth:`dominators`' ``idom``."""
        def dominates(block: str) -> bool:
            while block != head and idom[block] != block:
                block = idom[block]
            return block == head

        return {block for block in idom if dominates(block)}

    def dominators(self) -> dict[str, str]:
        """The immediate dominator of each reachable block (the entry's is itself): Cooper, Harvey and
        Kennedy's iterative algorithm."""
        order = self.reverse_post_order()
        rank = {name: k for k, name in enumerate(order)}
        preds: dict[str, list[str]] = {name: [] for name in order}
        for name in order:
            for s in self.succ[name]:
                preds[s].append(name)
        idom = {order[0]: order[0]}

        def meet(a: str, b: str) -> str:
            while a != b:
                while rank[a] > rank[b]:
                    a = idom[a]
                while rank[b] > rank[a]:
                    b = idom[b]
            return a

        changed = True
        while changed:
            changed = False
            for name in order[1:]:
                done = [p for p in preds[name] if p in idom]
                new = done[0]
                for p in done[1:]:
                    new = meet(p, new)
                if idom.get(name) != new:
                    idom[name], changed = new, True
        return idom

    def blocks_on_cycles(self) -> set[str]:
        """The blocks from which a path leads back to themselves (in a loop, natural or not)."""
        on_cycles = set()
        for start in self.names:
            seen, todo = set(), list(self.succ[start])
            while todo:
                block = todo.pop()
                if block == start:
                    on_cycles.add(start)
                    break
                if block not in seen:
                    seen.add(block)
                    todo += self.succ[block]
        return on_cycles

    def loops(self) -> list[Loop]:
        """The natural loops (one per header, its back edges merged), outermost headers first."""
        idom = self.dominators()

        def dominates(a: str, b: str) -> bool:
            while b != a and idom[b] != b:
                b = idom[b]
            return a == b

        preds: dict[str, list[str]] = {name: [] for name in idom}
        for name in idom:
            for s in self.succ[name]:
                preds[s].append(name)
        found = []
        for header in self.reverse_post_order():
            latches = [p for p in preds[header] if dominates(header, p)]
            if not latches:
                continue
            body, todo = {header}, list(latches)
            while todo:
                node = todo.pop()
                if node not in body:
                    body.add(node)
                    todo += preds[node]
            exits = [(b, s) for b in self.names if b in body for s in self.succ[b] if s not in body]
            found.append(Loop(header, frozenset(body), exits))
        return found


def remove_edge(graph: ControlFlow, source: str, target: str) -> None:
    """Forget the edge ``source -> target`` (``source``'s terminator no longer names ``target``) in ``target``'s
    ``phi``s; delete ``target`` if nothing else leads to it, and so on for its successors. Edits ``graph.lines``
    and ``graph.names`` (not ``graph.succ``); the body is ``[line for name in graph.names for line in
    graph.lines[name]]``."""
    graph.lines[target] = [phi_without(line, source) for line in graph.lines[target]]
    if any(target in successors(lines) for name, lines in graph.lines.items() if name != target) or \
            target == graph.names[0]:
        return
    lines = graph.lines.pop(target)
    graph.names.remove(target)
    for onward in dict.fromkeys(successors(lines)):
        if onward in graph.lines and onward != target:
            remove_edge(graph, target, onward)
