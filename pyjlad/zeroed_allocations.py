"""Arrays allocated and then zeroed (``np.zeros``) allocated zeroed, so that Enzyme has no fill to type.

Numba's ``np.zeros(n)`` allocates a block (``NRT_MemInfo_alloc_aligned``) and then fills its data with a
``memset`` of zero bytes. Enzyme must know what a fill writes (floats, integers, pointers) to differentiate
it, and learns it from how the code uses the memory; where that use is out of its sight (the array stored
into a structure and read back, passed to a BLAS call), it cannot type the fill. A first derivative then
goes on with loose types (checked, but built twice); a Hessian-vector product cannot: Enzyme's forward
derivative fills the tangent with a ``memset`` of its own, which the reverse sweep over it meets untyped.
The Hessian of Newton steps with ``A @ v`` (whose NumPy implementation zeroes a fresh output) was built
only with loose types, after a failed first attempt, twice the time.

:func:`zeroed_allocations` makes each such pair one call of ``@NRT_MemInfo_alloc_zeroed`` (``calloc``, of
which Enzyme knows that the block and its shadow start at zero) and drops the fill. It does so only where
nothing can happen in between: the fill is the first thing done with the block's data (only the null test of
the block, the branch on it, and the load of its ``data`` field come before it), on every path (the fill's
block has the allocation's block as its only predecessor), and its length is the allocated size. What the
function computes is unchanged: the data starts at zero either way.

Only for serial code that runs on this machine's CPU (:func:`pyjlad.engines.differentiate._fills_typed`): a GPU has
no ``calloc``, and a parallel derivative has all its threads do its large fills (:mod:`pyjlad.openmp_fills`).
"""

from __future__ import annotations

from . import runtime
from .ir.cfg import ControlFlow, block_label, successors
from .ir.edit import declare
from .ir.instructions import Instruction, parse_instruction
from .ir.module import Module, parse
from .memory_scopes import DATA_FIELD

__all__ = ["ZEROED_ALLOCATOR", "zeroed_allocations"]

#: The allocators (:mod:`pyjlad.runtime`'s ``nrt.ll``) whose block and fill can become one zeroed allocation.
_ALLOCATORS = frozenset({"@NRT_MemInfo_alloc_aligned", "@NRT_MemInfo_alloc_safe_aligned"})
#: Their zeroing counterpart, defined in ``nrt.ll`` (``calloc``).
ZEROED_ALLOCATOR = "@NRT_MemInfo_alloc_zeroed"


def _allocation(line: str) -> tuple[Instruction, str] | None:
    """``(instruction, size)`` of ``%mi = call ptr @NRT_MemInfo_alloc_aligned(i64 size, i32 align)``."""
    if "@NRT_MemInfo_alloc" not in line:
        return None
    instruction = parse_instruction(line)
    call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
    if call is None or call.callee not in _ALLOCATORS or instruction.result is None or len(call.values) != 2:
        return None
    return instruction, call.values[0]


def _fill_of(line: str, data: str | None, size: str) -> bool:
    """Whether ``line`` is ``call void @llvm.memset.p0.i64(ptr <data>, i8 0, i64 <size>, i1 false)``."""
    if data is None or "@llvm.memset" not in line:
        return False
    instruction = parse_instruction(line)
    call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
    return (call is not None and call.callee.startswith("@llvm.memset.") and len(call.values) == 4
            and call.values[:3] == [data, "0", size])


def _zeroed_fill(graph: ControlFlow, predecessors: dict[str, list[str]], block: str, at: int) -> tuple[str, int] | None:
    """``(block, index)`` of the fill that zeroes the block allocated at line ``at`` of ``block`` before anything
    else touches its data (in that block, or in the one its null test branches to, if that block has no
    other predecessor), or ``None``."""
    lines = graph.lines[block]
    found = _allocation(lines[at])
    if found is None:
        return None
    allocation, size = found
    tested, not_null, field, data = None, 1, None, None
    where, index = block, at + 1
    while index < len(lines):
        line = lines[index]
        instruction = parse_instruction(line) if block_label(line) is None else None
        index += 1
        if instruction is None:
            continue  # a label, a blank line or a comment
        operands = instruction.operands()
        if instruction.opcode == "icmp" and operands == [allocation.result] and " null" in line:
            tested, not_null = instruction.result, 1 if " icmp eq " in line else 0
        elif instruction.opcode == "br" and where == block and (tested is None or operands[:1] == [tested]):
            # On to the successor taken when the allocation succeeded, if only this block leads there.
            targets = successors([line])
            onward = targets[not_null if len(targets) == 2 else 0]
            if predecessors.get(onward) != [block]:
                return None
            where, lines, index = onward, graph.lines[onward], 0
        elif (instruction.opcode == "getelementptr" and operands == [allocation.result]
              and line.rstrip().endswith(f"i64 {DATA_FIELD}") and " i8, " in line):
            field = instruction.result
        elif instruction.opcode == "load" and field is not None and operands == [field] and " load ptr, " in line:
            data = instruction.result
        else:
            return (where, index - 1) if _fill_of(line, data, size) else None
    return None


def zeroed_allocations(module: Module) -> Module:
    r"""``module`` with each block allocated and then zeroed allocated zeroed (see the module's docstring);
    ``module`` itself, changed in place.

    Examples
    --------
    >>> from pyjlad.ir.module import parse
    >>> m = parse("define void @f(i64 %n) {\nentry:\n"
    ...           "  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)\n"
    ...           "  %null = icmp eq ptr %mi, null\n"
    ...           "  br i1 %null, label %fail, label %ok\n"
    ...           "ok:\n"
    ...           "  %field = getelementptr i8, ptr %mi, i64 24\n"
    ...           "  %data = load ptr, ptr %field, align 8\n"
    ...           "  call void @llvm.memset.p0.i64(ptr align 1 %data, i8 0, i64 %n, i1 false)\n"
    ...           "  ret void\n"
    ...           "fail:\n"
    ...           "  ret void\n}\n")
    >>> print("\n".join(zeroed_allocations(m).render().splitlines()[2:9]))
      %mi = call ptr @NRT_MemInfo_alloc_zeroed(i64 %n, i32 32)
      %null = icmp eq ptr %mi, null
      br i1 %null, label %fail, label %ok
    ok:
      %field = getelementptr i8, ptr %mi, i64 24
      %data = load ptr, ptr %field, align 8
      ret void
    """
    rewritten = False
    for function in module.definitions:
        body = function.body or []
        if not any("@NRT_MemInfo_alloc" in line for line in body):
            continue
        graph = ControlFlow.of(body)
        predecessors = graph.predecessors()
        fills: list[tuple[str, int]] = []
        for name in graph.names:
            for index, line in enumerate(graph.lines[name]):
                fill = _zeroed_fill(graph, predecessors, name, index) if "@NRT_MemInfo_alloc" in line else None
                if fill is not None:
                    fills.append(fill)
                    call = parse_instruction(line).call()
                    graph.lines[name][index] = line.replace(f"{call.callee}(", f"{ZEROED_ALLOCATOR}(", 1)
        if not fills:
            continue
        for name, index in sorted(fills, reverse=True):
            del graph.lines[name][index]
        function.body = [line for name in graph.names for line in graph.lines[name]]
        rewritten = True
    if rewritten and not any(f.symbol == ZEROED_ALLOCATOR for f in module.definitions):
        module.items.extend(parse(runtime.definitions("nrt.ll")[ZEROED_ALLOCATOR]).items)
        declare(module, runtime.declarations("nrt.ll")["@calloc"])
    return module
