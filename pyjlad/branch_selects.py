"""A pointer ``select`` on the condition its block branches on: each side of the branch reads its own operand.

Numba's call of another function returns a status, and the caller reads either the callee's result (the
call succeeded) or the exception it left in its ``excinfo`` slot (it failed). Where the callee stays out of
line (Numba's debug information marks every function ``noinline``: ``debug=True``, ``NUMBA_DEBUGINFO=1``,
``NUMBA_ENABLE_PROFILING=1``), LLVM merges the two loads into one value before the branch::

    %ok = icmp eq i32 %status, 0
    %value = select i1 %ok, ptr %meminfo, ptr %exception
    br i1 %ok, label %success, label %failure

and the success path uses ``%value`` as the array's meminfo. Enzyme's type analysis gives a ``select`` and
its two operands one type, and an array's meminfo and Numba's exception description are not the same
structure: it aborted ("Illegal updateAnalysis") on ``np.zeros``, ``np.sum`` or a mask, with debug
information on. The ``select`` is redundant wherever the branch has decided the condition: in the blocks
that only the branch's true edge reaches (its target has no other predecessor; the blocks it dominates)
``%value`` is ``%meminfo``, and in those of the false edge it is ``%exception``. :func:`resolve_branch_selects`
writes that operand there, and drops the ``select`` when nothing reads it any more.

Only ``ptr`` selects are rewritten (the conflict is between pointees; a float ``select`` is differentiated
as written). Instructions are read through :mod:`pyjlad.ir` (tokens, the control-flow graph).
"""

from __future__ import annotations

from .ir.cfg import ControlFlow
from .ir.lexer import Token, closing, split_top_level, words
from .ir.module import parse_instruction

__all__ = ["resolve_branch_selects"]


def _branch(lines: list[str]) -> tuple[str, str, str] | None:
    """``(condition, true target, false target)`` of a block ending in ``br i1 %c, label %t, label %f``."""
    for line in reversed(lines):
        instruction = parse_instruction(line)
        if instruction is None:
            continue
        if instruction.opcode != "br":
            return None
        parts = [words(part) for part in split_top_level(instruction.after_opcode())]
        parts = [p for p in parts if not p[0].startswith("!")]  # metadata attachments (``!prof !12``)
        if [p[:1] for p in parts] != [["i1"], ["label"], ["label"]] or any(len(p) != 2 for p in parts):
            return None
        condition, true, false = parts[0][1], parts[1][1], parts[2][1]
        return (condition, true[1:], false[1:]) if condition.startswith("%") else None
    return None


def _pointer_selects(lines: list[str], condition: str) -> dict[str, tuple[str, str]]:
    """``{result: (true operand, false operand)}`` of the ``select i1 <condition>, ptr .., ptr ..`` in ``lines``."""
    found = {}
    for line in lines:
        if "select" not in line:
            continue
        instruction = parse_instruction(line)
        if instruction is None or instruction.opcode != "select" or instruction.result is None:
            continue
        parts = [p for p in (words(part) for part in split_top_level(instruction.after_opcode()))
                 if not p[0].startswith("!")]
        if (len(parts) == 3 and parts[0] == ["i1", condition] and parts[1][:1] == ["ptr"] and len(parts[1]) == 2
                and parts[2][:1] == ["ptr"] and len(parts[2]) == 2):
            found[instruction.result] = (parts[1][1], parts[2][1])
    return found


def _replaced(line: str, block: str, value: str, by: str, region: set[str], edge: tuple[str, str]) -> str:
    """``line`` (of ``block``) with its reads of ``value`` that ``region`` holds replaced by ``by``: every read if
    ``block`` is in ``region``; for a ``phi``, the incoming values from a block of ``region`` or along ``edge``."""
    instruction = parse_instruction(line)
    if instruction is None or value not in instruction.operands():
        return line
    tokens = list(instruction.tokens)
    if instruction.opcode != "phi":
        if block not in region:
            return line
        start = next(k for k, t in enumerate(tokens) if t.text == "=") + 1 if instruction.result else 0
        return "".join(t.text for t in tokens[:start]) + "".join(
            by if t.kind == "local" and t.text == value else t.text for t in tokens[start:])
    k = 0
    while k < len(tokens):
        if tokens[k].text == "[":
            end = closing(tokens, k)
            pair = [i for i in range(k + 1, end) if tokens[i].kind == "local"]
            if len(pair) == 2 and tokens[pair[0]].text == value:
                incoming = tokens[pair[1]].text[1:]
                if incoming in region or (incoming, block) == edge:
                    tokens[pair[0]] = Token("local", by)
            k = end
        k += 1
    return "".join(t.text for t in tokens)


def resolve_branch_selects(define: str) -> str:
    """``define`` (one definition's text) with each pointer ``select`` on its block's branch condition read as
    its operand on each side of the branch (see the module's docstring).

    A read is replaced where the branch's edge to one side dominates it: in a block that side's target
    dominates, the target having the branch's block as its only predecessor, or a ``phi``'s value coming
    from such a block or along that edge. Then the last run of the branch's block before the read took that
    edge, and no operand was computed again after it: a path from an operand's definition (which dominates
    the ``select``) to the read that skipped the branch's block would, from the function's entry, reach the
    read without passing the target.

    >>> body = '''define i32 @f(i1 %ok, ptr %meminfo, ptr %exception, ptr %out) {
    ... entry:
    ...   %value = select i1 %ok, ptr %meminfo, ptr %exception
    ...   br i1 %ok, label %success, label %failure
    ... success:
    ...   call void @NRT_decref(ptr %value)
    ...   ret i32 0
    ... failure:
    ...   store ptr %value, ptr %out, align 8
    ...   ret i32 1
    ... }'''
    >>> print(resolve_branch_selects(body))
    define i32 @f(i1 %ok, ptr %meminfo, ptr %exception, ptr %out) {
    entry:
      br i1 %ok, label %success, label %failure
    success:
      call void @NRT_decref(ptr %meminfo)
      ret i32 0
    failure:
      store ptr %exception, ptr %out, align 8
      ret i32 1
    }
    """
    if "select i1" not in define:
        return define
    lines = define.split("\n")
    header, body = lines[0], lines[1:-1]
    graph = ControlFlow.of(body)
    idom = graph.dominators()
    preds = graph.predecessors()
    spans, offset = {}, 0
    for name in graph.names:  # the indices in ``body`` of each block's lines
        spans[name] = range(offset, offset + len(graph.lines[name]))
        offset += len(graph.lines[name])
    resolved: set[str] = set()
    for name in idom:
        branch = _branch(graph.lines[name])
        if branch is None or branch[1] == branch[2]:
            continue
        condition, *targets = branch
        selects = _pointer_selects(graph.lines[name], condition)
        for side, target in enumerate(targets):
            if target == name or preds.get(target) != [name]:
                continue
            region = graph.dominated(idom, target)
            for block in graph.names:
                for index in spans[block]:
                    for result, operands in selects.items():
                        new = _replaced(body[index], block, result, operands[side], region, (name, target))
                        if new != body[index]:
                            body[index] = new
                            resolved.add(result)
    if not resolved:
        return define
    read = {value for line in body if (i := parse_instruction(line)) is not None for value in i.operands()}
    kept = [line for line in body
            if not ((i := parse_instruction(line)) is not None and i.result in resolved and i.result not in read)]
    return "\n".join([header, *kept, lines[-1]])
