"""Arrays the caller passed that the differentiated function reads and writes: kept for the reverse sweep.

Enzyme v0.0.289 keeps a loaded value for the reverse sweep only where a later write may overwrite it, and asks
that of LLVM's alias analysis one iteration at a time (and, across loops, of a range check that misses some
cases). For the caller's arrays in a combined reverse sweep (``__enzyme_autodiff``) nothing else stands in for
it: a function that updates its argument in place reading ahead (``V[i] = r * V[i] + (1 - r) * V[i + 1]``,
backward induction into the caller's array; two sweeps of it; a fill of a caller's buffer then a sweep over it)
had its reverse sweep read the array again after the function had overwritten it, and until 2026-12-06 such
gradients were **silently wrong** (an option tree's d/dr -2.54 where it is -3.12), with or without pyjlad's scoped
alias metadata (:mod:`pyjlad.memory_scopes`); ``jvp`` was right. Found by a user-style probe.

:func:`keep_written_arguments` adds, before each ``ret`` of the function Enzyme differentiates (and its copies),
a call of ``@pyjlad.written_argument(ptr %p)`` for each pointer parameter the function both loads from and
writes to (through ``getelementptr``, casts, ``phi`` and ``select``): a function that may write its argument's
memory (``argmemonly``, an empty ``asm`` with a memory clobber, so LLVM keeps the call) and that Enzyme neither
differentiates nor analyzes. Every load of such an argument is then followed by a possible write, and Enzyme
keeps what the reverse sweep needs of it, as a split sweep does for arguments it is told are overwritten. It
costs a call per call of the derivative, and the tape of those loads; arguments only read are untouched.
"""

from __future__ import annotations

from .ir import Function, Module, parse
from .ir.instructions import parse_instruction
from .memory_scopes import MEMORY_WRITERS, pointer_roots, pointer_sources

__all__ = ["BARRIER", "keep_written_arguments", "read_and_written_parameters"]

#: The function whose call stands for a possible write of an argument's memory.
BARRIER = "@pyjlad.written_argument"
_DEFINITION = (f'define internal void {BARRIER}(ptr %p) noinline nounwind argmemonly "enzyme_inactive" '
               '"enzyme_ta_norecur" {\nentry:\n  call void asm sideeffect "", "r,~{memory}"(ptr %p)\n  ret void\n}\n')


def read_and_written_parameters(function: Function) -> list[str]:
    """The pointer parameters of ``function`` it both loads from and writes to, in parameter order.

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> f = parse('''define void @f(ptr %v, ptr %w, ptr %out, i64 %i) {
    ...   %a = getelementptr double, ptr %v, i64 %i
    ...   %b = getelementptr i8, ptr %a, i64 8
    ...   %x = load double, ptr %b, align 8
    ...   %y = load double, ptr %w, align 8
    ...   store double %x, ptr %a, align 8
    ...   store double %y, ptr %out, align 8
    ...   ret void
    ... }''').function("f")
    >>> read_and_written_parameters(f)  # %w is only read, %out only written
    ['%v']
    """
    parameters = [p.name for p in function.parameters if p.type == "ptr" and p.name]
    if not parameters:
        return []
    sources = pointer_sources(function)
    read: set[str] = set()
    written: set[str] = set()
    for instruction in function.instructions():
        call = instruction.call()
        if call is not None and call.callee.startswith(MEMORY_WRITERS) and call.values:
            written |= pointer_roots(call.values[0], sources)
            if not call.callee.startswith("@llvm.memset.") and len(call.values) > 1:
                read |= pointer_roots(call.values[1], sources)
        elif instruction.opcode in ("load", "store"):
            address = instruction.address()
            if address is not None:
                (read if instruction.opcode == "load" else written).update(pointer_roots(address, sources))
    return [p for p in parameters if p in read and p in written]


def keep_written_arguments(module: Module | str, entry: str) -> str:
    """``module``'s text with the calls of :data:`BARRIER` of the module's docstring in ``entry`` (no ``@``) and
    its copies (``<entry>.<suffix>``); unchanged where no such function reads and writes a parameter.

    Examples
    --------
    >>> text = '''define double @f(ptr %v, i64 %i) {
    ...   %a = getelementptr double, ptr %v, i64 %i
    ...   %x = load double, ptr %a, align 8
    ...   store double 0.0, ptr %v, align 8
    ...   ret double %x
    ... }
    ... '''
    >>> print(keep_written_arguments(text, "f").split("define internal")[0], end="")
    define double @f(ptr %v, i64 %i) {
      %a = getelementptr double, ptr %v, i64 %i
      %x = load double, ptr %a, align 8
      store double 0.0, ptr %v, align 8
      call void @pyjlad.written_argument(ptr %v)
      ret double %x
    }
    """
    parsed = parse(module) if isinstance(module, str) else module
    changed = False
    for function in parsed.definitions:
        if function.name != entry and not function.name.startswith(entry + "."):
            continue
        kept = read_and_written_parameters(function)
        if not kept:
            continue
        body = []
        for line in function.body or []:
            instruction = parse_instruction(line) if line.lstrip().startswith("ret ") else None
            if instruction is not None and instruction.opcode == "ret":
                indent = line[:len(line) - len(line.lstrip())]
                body += [f"{indent}call void {BARRIER}(ptr {p})" for p in kept]
            body.append(line)
        function.body = body
        changed = True
    if changed:
        parsed.items += parse(_DEFINITION).items
    return parsed.render()
