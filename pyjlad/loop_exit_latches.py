"""A loop's early ways out taken at its latch: where Enzyme would search too long for the way back to its header,
and where the way out leaves a loop nested in it too.

Enzyme v0.0.289, for each block that leaves a loop (other than towards ``unreachable``), looks for the way back to
the loop's header by trying every path breadth first without remembering the blocks it has seen
(``CacheUtility::getContext``): the work is the number of paths from that block to the header, which doubles at
every branch and grows around every inner loop on the way. A ``raise`` of the user's near the top of a loop's step
(``if not np.isfinite(s): raise ...``), or one of Numba's checks there (an array expression's shapes, a negative
size), followed by a step with a few inner loops (array expressions, reductions) ran Enzyme out of memory.
(:mod:`pyjlad.allocation_exits` takes the allocations' null tests out of that search; these ways out it cannot:
they are taken.)

:func:`exits_through_latch` finds, per loop, each block from which that search would try more than
:data:`SEARCH_LIMIT` paths (counted as Enzyme counts them) and sends its way out to the loop's latch instead: the
branch out goes to a new block inside the loop, and every path to the latch passes a new block ``L`` first, which
knows by a ``phi`` which way it was entered (``0``: the step ran to its end) and either goes on to the old latch or
leaves for the old way out (a ``switch`` over the ways, one block each, whose ``phi`` entries are the old ones
moved). Nothing runs differently: the way out skips nothing that ran before (the rest of the step never ran on
it), and the values defined after the branch out are read past ``L`` only on the normal path
(:func:`pyjlad.ir.ssa.restore_dominance` writes the ``phi``s, ``poison`` from the way out). From ``L`` the search is
a few blocks long. The latch keeps its own exit test, so where that is a count (a ``for`` loop), Enzyme still knows
the most times the loop can run.

The same rewrite is needed by every way out of a loop from a block of a loop nested in it (``return`` from inside
two loops: the first element above a threshold, a grid cell's search, ``break`` out of both through a flag, which
LLVM makes one branch): Enzyme v0.0.289 read a value of the inner loop that the reverse sweep needs at such a way
out (``np.sin(x[i, j])``'s ``x[i, j]``, recomputed from the loop counters) with the inner loop's count taken from its
cache at the index of the outer reverse loop's counter, which was not set yet: ``x[i + 1, 0]``, or memory past the
array (a segfault), and so a **silently wrong** gradient, until 2026-12-06 (found by a user-style probe;
``tests/test_nested_loop_exits.py``). Taken at the outer loop's latch, the way out leaves the inner loop into the
outer one, and the outer loop at its latch, each by one level, and Enzyme keeps what the way out decided. A value of
the inner loop read after both (a found index ``j``: a second array read at ``y[i, j]``, a store into ``out[j]``)
Enzyme recomputed there as the inner loop's last count, cached per outer step and read at the outer reverse loop's
counter before that loop set it: still wrong until 2026-12-06. Each such value (an entry, for the way out, of a
``phi`` of the block outside) is now carried by a ``phi`` of the new block (:func:`_kept_from_nested`), which
Enzyme keeps rather than recomputes. (Every such read seen in Numba's code goes through a ``phi`` of the block
outside, as LLVM's loop passes leave it; a read of the inner loop's value without one would not be carried.)

A loop is left alone where its shape is not the one read here (several latches, a latch branching to the same block
twice, a way out that is not a two-way ``br``) or a value to carry has a type
:func:`pyjlad.ir.value_types.result_type` does not read.
"""

from __future__ import annotations

from collections import defaultdict

from .ir.cfg import ControlFlow, Loop, phi_retargeted, retargeted, terminator_index
from .ir.instructions import parse_instruction
from .ir.module import Module
from .ir.ssa import phi_with, restore_dominance
from .ir.value_types import result_type

__all__ = ["SEARCH_LIMIT", "ends_unreachable", "exits_through_latch", "search_work", "way_out_of"]

#: Paths Enzyme may try from one way out of a loop before the way out is sent to the latch. Seen on this host
#: (2026-12-05): a million cost Enzyme no time worth measuring, a hundred million seconds; a step of twelve array
#: statements (``tests/test_loop_exit_latches.py``) ran it out of 2 GiB. Ways out below the limit stay as they are.
SEARCH_LIMIT = 1_000_000
_PREFIX = "pyjlad.latch."


def way_out_of(block: str) -> str | None:
    """The block that leaves the loop for the way out that ``block`` (``pyjlad.latch.N.out.K``, the new block a way
    out goes to inside its loop) takes at the latch (``pyjlad.latch.N.leave.K``); ``None`` for other blocks.

    >>> way_out_of("pyjlad.latch.0.out.2"), way_out_of("B12")
    ('pyjlad.latch.0.leave.2', None)
    """
    head, _, way = block.rpartition(".out.")
    return f"{head}.leave.{way}" if head.startswith(_PREFIX) and way.isdigit() else None
#: How many times a loop is rewritten at most: a way out may cross the limit only once others were sent to the
#: latch (its paths now pass one more block).
_ROUNDS = 4


def search_work(graph: ControlFlow, loop: Loop, exiting: str, limit: int = SEARCH_LIMIT) -> int:
    """How many blocks Enzyme's search from ``exiting`` to ``loop``'s header visits (stopping past ``limit``).

    Breadth first, each path its own entry, blocks outside the loop dropped, stopping at the header.

    >>> body = ["entry:", "  br label %h", "h:", "  br i1 %c, label %out, label %a", "a:",
    ...         "  br i1 %d, label %b, label %c", "b:", "  br label %t", "c:", "  br label %t", "t:",
    ...         "  br i1 %e, label %h, label %out", "out:", "  ret void"]
    >>> graph = ControlFlow.of(body)
    >>> [search_work(graph, graph.loops()[0], block) for block in ("h", "a", "t")]
    [1, 7, 2]
    """
    level: dict[str, int] = {exiting: 1}
    work = 0
    while level:
        following: dict[str, int] = defaultdict(int)
        for block, paths in level.items():
            work += paths
            if block == loop.header or work > limit:
                return work
            if block not in loop.blocks:
                continue
            for successor in graph.succ[block]:
                following[successor] += paths
        level = following
    return work


def ends_unreachable(graph: ControlFlow, block: str, chain: int = 4) -> bool:
    """Whether ``block`` ends in ``unreachable``, or only branches on to a block that does (LLVM's dedicated exit
    blocks, ``<name>.loopexit``, in front of one; Enzyme takes such a chain as never run too)."""
    lines = graph.lines[block]
    instructions = [i for i in map(parse_instruction, lines[1:]) if i is not None and i.opcode != "phi"]
    if len(instructions) != 1:
        return False
    if instructions[0].opcode == "unreachable":
        return True
    onward = graph.succ[block]
    return (instructions[0].opcode == "br" and len(onward) == 1 and chain > 1
            and ends_unreachable(graph, onward[0], chain - 1))


def _costly_exits(graph: ControlFlow, loop: Loop, latch: str, nested: frozenset[str]) -> list[tuple[str, str]]:
    """The ways out ``(inside, outside)`` of ``loop`` to send to its ``latch``: those Enzyme would search too long
    from, and those from a block of a loop ``nested`` in it (leaving both at once); ``[]`` when one such way out
    has a shape this does not rewrite (then none is sent)."""
    found = []
    for inside in dict.fromkeys(block for block, _ in loop.exits):
        outside = [s for s in graph.succ[inside] if s not in loop.blocks and not ends_unreachable(graph, s)]
        if inside == latch or not outside or (inside not in nested and search_work(graph, loop, inside) <= SEARCH_LIMIT):
            continue
        terminator = parse_instruction(graph.lines[inside][terminator_index(graph.lines[inside])])
        targets = graph.succ[inside]
        if terminator is None or terminator.opcode != "br" or len(targets) != 2 or len(outside) != 1 \
                or targets[0] == targets[1]:
            return []
        found.append((inside, outside[0]))
    return found


def _latched(graph: ControlFlow, loop: Loop, number: int) -> list[str] | None:
    """The body with ``loop``'s costly ways out sent to its latch; ``None`` when there are none or the loop's shape
    is not one this rewrites."""
    preds = graph.predecessors()
    latches = [p for p in preds.get(loop.header, []) if p in loop.blocks]
    if len(latches) != 1 or latches[0] == loop.header:
        return None
    latch = latches[0]
    nested = frozenset().union(*(inner.blocks for inner in graph.loops() if inner.blocks < loop.blocks))
    exits = _costly_exits(graph, loop, latch, nested)
    into_latch = preds[latch]
    if not exits or any(graph.succ[p].count(latch) != 1 for p in into_latch):
        return None
    join, lines = f"{_PREFIX}{number}", {name: list(block) for name, block in graph.lines.items()}
    ways = [f"{join}.out.{k}" for k in range(len(exits))]
    leaves = [f"{join}.leave.{k}" for k in range(len(exits))]
    for (inside, outside), way, leave in zip(exits, ways, leaves):
        lines[inside] = retargeted(lines[inside], outside, way)
        lines[outside] = [phi_retargeted(line, {inside: leave}) for line in lines[outside]]
    kept = _kept_from_nested(graph, lines, exits, nested, join, ways, leaves)
    if kept is None:
        return None
    for pred in into_latch:
        lines[pred] = retargeted(lines[pred], latch, join)
    phis = [k for k, line in enumerate(lines[latch][1:], 1) if (i := parse_instruction(line)) is not None
            and i.opcode == "phi"]
    if any(not lines[latch][k].rstrip().endswith("]") for k in phis):
        return None  # a phi with metadata after its entries
    poison = "".join(f", [ poison, %{way} ]" for way in ways)
    moved = [lines[latch][k].rstrip() + poison for k in phis]
    lines[latch] = [line for k, line in enumerate(lines[latch]) if k not in phis]
    which = ", ".join([*(f"[ 0, %{p} ]" for p in into_latch), *(f"[ {k}, %{way} ]" for k, way in enumerate(ways, 1))])
    dispatch = leaves[0] if len(leaves) == 1 else f"{join}.leave"
    kept = ["  " + line.replace("@@", ", ".join(f"[ zeroinitializer, %{p} ]" for p in into_latch)) for line in kept]
    lines[join] = [f"{join}:", *moved, *kept, f"  %{join}.way = phi i32 {which}",
                   f"  %{join}.out = icmp ne i32 %{join}.way, 0",
                   f"  br i1 %{join}.out, label %{dispatch}, label %{latch}"]
    for way in ways:
        lines[way] = [f"{way}:", f"  br label %{join}"]
    for (_, outside), leave in zip(exits, leaves):
        lines[leave] = [f"{leave}:", f"  br label %{outside}"]
    if len(leaves) > 1:
        cases = " ".join(f"i32 {k}, label %{leave}" for k, leave in enumerate(leaves[1:], 2))
        lines[dispatch] = [f"{dispatch}:", f"  switch i32 %{join}.way, label %{leaves[0]} [ {cases} ]"]
    order = _block_order(graph.names, latch, join, [(inside, way) for (inside, _), way in zip(exits, ways)],
                         ([dispatch] if len(leaves) > 1 else []) + leaves)
    return restore_dominance([line for name in order for line in lines[name]])


def _kept_from_nested(graph: ControlFlow, lines: dict[str, list[str]], exits: list[tuple[str, str]],
                      nested: frozenset[str], join: str, ways: list[str], leaves: list[str]) -> list[str] | None:
    """The ``phi``s of ``join`` that carry each value of a nested loop read past a way out (an entry of a ``phi``
    of the block outside, for the edge from ``leave``), its other entries zero, ``@@`` standing for those from the
    latch's predecessors; the ``phi`` entries outside now read them (``lines`` changed in place). ``None`` where a
    type cannot be read.

    Enzyme v0.0.289 recomputes such a value after both loops (a found index ``j``, the inner loop's counter) from
    the inner loop's count, cached per outer step and read at the outer reverse loop's counter before that loop
    sets it; a ``phi`` of ``join`` (not a loop counter, not the last value of one) is cached instead.
    """
    defined = {i.result: name for name in graph.names for line in graph.lines[name]
               if (i := parse_instruction(line)) is not None and i.result is not None}
    kept: list[str] = []
    for (inside, outside), way, leave in zip(exits, ways, leaves):
        if inside not in nested:
            continue
        for k, line in enumerate(lines[outside]):
            instruction = parse_instruction(line)
            if instruction is None or instruction.opcode != "phi":
                continue
            carried = {}
            for value, block in instruction.phi_incoming():
                if block == f"%{leave}" and defined.get(value) in nested:
                    type_text = result_type(instruction)
                    if type_text is None:
                        return None
                    name = f"%{join}.keep.{len(kept)}"
                    entries = ", ".join(f"[ {value if other == way else 'zeroinitializer'}, %{other} ]"
                                        for other in ways)
                    kept.append(f"{name} = phi {type_text} @@, {entries}")
                    carried[leave] = name
            if carried:
                rewritten = phi_with(instruction, carried)
                if rewritten is None:
                    return None
                lines[outside][k] = rewritten
    return kept


def _block_order(names: list[str], latch: str, join: str, ways: list[tuple[str, str]], leaves: list[str]) -> list[str]:
    """The blocks in their old order with the new ones placed: the join before the latch, each way out after the
    block it leaves from, the blocks that leave the loop after the latch."""
    order: list[str] = []
    for name in names:
        if name == latch:
            order.append(join)
        order.append(name)
        order += [way for inside, way in ways if inside == name]
        if name == latch:
            order += leaves
    return order


def exits_through_latch(module: Module) -> Module:
    r"""``module`` with each costly early way out of a loop taken at the loop's latch (see the module's
    docstring); ``module`` itself, changed in place.

    Examples
    --------
    A loop whose ``raise`` comes before twenty branches (a million paths to the header):

    >>> from pyjlad.ir.module import parse
    >>> steps = [line for k in range(20) for line in (f"s{k}:", f"  br i1 %c{k}, label %l{k}, label %r{k}",
    ...          f"l{k}:", f"  br label %s{k + 1}", f"r{k}:", f"  br label %s{k + 1}")]
    >>> m = parse("\n".join(["define i32 @f(i64 %n) {", "entry:", "  br label %head", "head:",
    ...     "  %i = phi i64 [ 0, %entry ], [ %j, %s20 ]", "  br label %top", "top:", "  %bad = icmp eq i64 %i, 7",
    ...     "  br i1 %bad, label %raise, label %s0", *steps, "s20:", "  %j = add i64 %i, 1",
    ...     "  %more = icmp ult i64 %j, %n", "  br i1 %more, label %head, label %done", "done:", "  ret i32 0",
    ...     "raise:", "  %code = phi i32 [ 1, %top ]", "  ret i32 %code", "}", ""]))
    >>> text = exits_through_latch(m).render()
    >>> print("\n".join(line for line in text.splitlines() if "pyjlad.latch" in line or line.startswith("raise")))
      br i1 %bad, label %pyjlad.latch.0.out.0, label %s0
    pyjlad.latch.0.out.0:
      br label %pyjlad.latch.0
      br label %pyjlad.latch.0
      br label %pyjlad.latch.0
    pyjlad.latch.0:
      %pyjlad.latch.0.way = phi i32 [ 0, %r19 ], [ 0, %l19 ], [ 1, %pyjlad.latch.0.out.0 ]
      %pyjlad.latch.0.out = icmp ne i32 %pyjlad.latch.0.way, 0
      br i1 %pyjlad.latch.0.out, label %pyjlad.latch.0.leave.0, label %s20
    pyjlad.latch.0.leave.0:
    raise:
      %code = phi i32 [ 1, %pyjlad.latch.0.leave.0 ]
    """
    number = 0
    for function in module.definitions:
        body = function.body or []
        if not body or parse_instruction(body[0]) is not None:
            continue  # an entry block without a label: nothing to branch back to
        rounds: dict[str, int] = defaultdict(int)  # a header -> how many times its loop was rewritten
        graph = ControlFlow.of(body)
        todo = graph.loops()
        while todo:
            loop = todo.pop(0)
            while any(name.startswith(f"{_PREFIX}{number}") for name in graph.names):
                number += 1  # a body rewritten before (a nested derivative's): its names stay its own
            rewritten = _latched(graph, loop, number) if rounds[loop.header] < _ROUNDS else None
            if rewritten is not None:  # look at the loops again, this one first
                body, number = rewritten, number + 1
                rounds[loop.header] += 1
                graph = ControlFlow.of(body)
                loops = graph.loops()
                todo = [new for new in loops if new.header == loop.header] + \
                    [new for new in loops if new.header in {old.header for old in todo}]
        function.body = body
    return module
