"""A float ``select`` whose discarded side was computed anyway (speculated) becomes a branch again.

LLVM turns a cheap conditional computation into straight-line code and a ``select`` (SimplifyCFG's
speculation; Numba's O3 does it before pyjlad sees the function)::

    if not isnan(v):                   %d = fsub double %v, %m
        ssd += (v - m) * (v - m)       %dd = fmul double %d, %d
                                       %s.new = fadd double %ssd, %dd
                                       %ssd.next = select i1 %ok, double %s.new, double %ssd

Enzyme v0.0.289 differentiates the ``select`` by sending its adjoint to the chosen operand and 0 to the
other, then differentiates the discarded computation like any other: the adjoint of ``%d`` is ``2 * %d * 0``,
which is NaN where ``v`` is NaN (``0 * NaN``), and the NaN reaches the mean's adjoint and every element's:
``np.nanvar``/``np.nanstd`` of data holding a NaN had an all-NaN gradient (found by a user-style probe,
2026-12-04), as has any guard whose discarded side is infinite or NaN where the guard fails.

:func:`branch_guarded_selects` moves the computation only a ``select`` side uses (its *chain*: the
instructions of the select's block defined before it whose every use is in the chain or the select) into a
block of its own that runs only when that side is chosen, and writes the ``select`` as a ``phi``: Enzyme's
reverse sweep then visits that block only where it ran. Only chains whose derivative depends on their
values (``fmul``, ``fdiv``, ``frem``, a call of an LLVM math intrinsic) are moved: an ``fadd``'s is a
constant, and a chain of loads and address arithmetic (``u[i - 1] if i > 0 else 0.0``) has none, so the
selects LLVM vectorizes best are left as they are. Scalar ``double``/``float`` selects only.
"""

from __future__ import annotations

from collections import Counter

from .carried_selects import float_select
from .ir.cfg import blocks
from .ir.instructions import Instruction, parse_instruction

__all__ = ["branch_guarded_selects"]

_FLOATS = ("double", "float")
#: Opcodes a chain may hold: no side effects, so running them only when their side is chosen changes nothing.
_MOVABLE = {"fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "load", "getelementptr", "sitofp", "uitofp", "fpext",
            "fptrunc", "bitcast", "call"}
#: The opcodes whose derivative depends on their operands' values (``0 * NaN`` where they are NaN or infinite).
_VALUED = {"fmul", "fdiv", "frem", "call"}
#: LLVM math intrinsics a chain may call (pure functions of their arguments).
_PURE_INTRINSICS = ("@llvm.sqrt.", "@llvm.log.", "@llvm.log2.", "@llvm.log10.", "@llvm.exp.", "@llvm.exp2.",
                    "@llvm.pow.", "@llvm.powi.", "@llvm.sin.", "@llvm.cos.", "@llvm.fabs.", "@llvm.fma.",
                    "@llvm.fmuladd.", "@llvm.minnum.", "@llvm.maxnum.", "@llvm.copysign.", "@llvm.floor.",
                    "@llvm.ceil.", "@llvm.trunc.", "@llvm.round.")


def _movable(instruction: Instruction) -> bool:
    if instruction.opcode not in _MOVABLE:
        return False
    if instruction.opcode == "load":
        return " volatile " not in instruction.text and " atomic " not in instruction.text
    if instruction.opcode == "call":
        call = instruction.call()
        return call is not None and call.callee.startswith(_PURE_INTRINSICS)
    return True


def _scalar_float_select(instruction: Instruction) -> tuple[str, str, str, str] | None:
    """``(condition, type, true value, false value)`` of a scalar ``double``/``float`` select; ``None`` otherwise."""
    found = float_select(instruction)
    return found if found is not None and found[0].startswith("%") and found[1] in _FLOATS else None


def _chain(value: str, defined: dict[str, int], lines: list[Instruction | None], uses: Counter,
           before: int) -> set[int]:
    """Indices (in the block) of the instructions only ``value``'s side of a select uses."""
    chain: set[int] = set()
    pending = [value]
    while pending:
        name = pending.pop()
        index = defined.get(name)
        if index is None or index >= before or index in chain:
            continue
        instruction = lines[index]
        if instruction is None or not _movable(instruction):
            continue
        reads = sum(lines[k].operands().count(name) for k in chain | {before} if lines[k] is not None)
        if uses[name] != reads:  # read elsewhere too
            continue
        chain.add(index)
        pending += lines[index].operands()
    return chain


def _split_once(body: list[str], counter: list[int]) -> list[str] | None:
    """``body`` with the first eligible select rewritten as a branch and a ``phi``; ``None`` if there is none."""
    parsed_body = [parse_instruction(line) for line in body]
    uses: Counter = Counter(op for ins in parsed_body if ins is not None for op in ins.operands())
    offset = 0
    for name, lines in blocks(body):
        parsed = parsed_body[offset:offset + len(lines)]
        defined = {ins.result: k for k, ins in enumerate(parsed) if ins is not None and ins.result}
        for index, instruction in enumerate(parsed):
            found = _scalar_float_select(instruction) if instruction is not None else None
            if found is None or not name:
                continue
            condition, kind, if_true, if_false = found
            sides = [_chain(v, defined, parsed, uses, index) for v in (if_true, if_false)]
            if not any(parsed[k].opcode in _VALUED for side in sides for k in side):
                continue
            counter[0] += 1
            stem = f"{name}.pyjlad.guard{counter[0]}"
            moved = sides[0] | sides[1]
            head = [line for k, line in enumerate(lines[:index]) if k not in moved]
            then_label = f"{stem}.then" if sides[0] else None
            else_label = f"{stem}.else" if sides[1] else None
            join = f"{stem}.join"
            head = _retarget_phis(head, name, join)  # (a loop of one block: its phis' back edge leaves the join)
            out = [*head, f"  br i1 {condition}, label %{then_label or join}, label %{else_label or join}"]
            for label, side in ((then_label, sides[0]), (else_label, sides[1])):
                if label:
                    out += [f"{label}:", *(lines[k] for k in sorted(side)), f"  br label %{join}"]
            out += [f"{join}:",
                    f"  {instruction.result} = phi {kind} [ {if_true}, %{then_label or name} ], "
                    f"[ {if_false}, %{else_label or name} ]",
                    *lines[index + 1:]]
            rest = _retarget_phis(body[offset + len(lines):], name, join)
            head_of_body = _retarget_phis(body[:offset], name, join)
            return [*head_of_body, *out, *rest]
        offset += len(lines)
    return None


def _retarget_phis(lines: list[str], old: str, new: str) -> list[str]:
    """``lines`` with each ``phi``'s incoming block ``%old`` written ``%new`` (the split block's tail moved)."""
    out = []
    for line in lines:
        instruction = parse_instruction(line) if " phi " in line else None
        if instruction is not None and instruction.opcode == "phi" and f"%{old} ]" in line:
            line = line.replace(f", %{old} ]", f", %{new} ]")
        out.append(line)
    return out


def branch_guarded_selects(define: str, limit: int = 256) -> str:
    """``define`` (one definition's text) with each speculated float ``select`` whose discarded side's derivative
    depends on its values written as a branch and a ``phi`` (see the module's docstring).

    >>> body = '''define double @f(double %v, double %m, double %s) {
    ... entry:
    ...   %ok = fcmp ord double %v, 0.000000e+00
    ...   %d = fsub double %v, %m
    ...   %dd = fmul double %d, %d
    ...   %t = fadd double %s, %dd
    ...   %r = select i1 %ok, double %t, double %s
    ...   ret double %r
    ... }'''
    >>> print(branch_guarded_selects(body))
    define double @f(double %v, double %m, double %s) {
    entry:
      %ok = fcmp ord double %v, 0.000000e+00
      br i1 %ok, label %entry.pyjlad.guard1.then, label %entry.pyjlad.guard1.join
    entry.pyjlad.guard1.then:
      %d = fsub double %v, %m
      %dd = fmul double %d, %d
      %t = fadd double %s, %dd
      br label %entry.pyjlad.guard1.join
    entry.pyjlad.guard1.join:
      %r = phi double [ %t, %entry.pyjlad.guard1.then ], [ %s, %entry ]
      ret double %r
    }
    """
    if " select " not in define:
        return define
    lines = define.split("\n")
    header, body, footer = lines[0], lines[1:-1], lines[-1]
    counter = [0]
    for _ in range(limit):
        split = _split_once(body, counter)
        if split is None:
            break
        body = split
    return "\n".join([header, *body, footer])
