"""A loop's failed allocations made exits Enzyme need not search: a jump to the driver's out-of-memory exit.

Numba tests every array it allocates for null and, on failure, leaves the function with a ``MemoryError``: in a
loop, each temporary of a step is a way out of the loop. Enzyme v0.0.289, for each block that leaves a loop
and does not end in ``unreachable``, looks for the way back to the loop's header by trying every path breadth
first without remembering the blocks it has seen (``CacheUtility::getContext``): from an allocation near the
top of a step, every path through the rest of the step, around each of its inner loops (an array expression,
a reduction) as many times as fits: the work grows faster than the number of temporaries, and a step with
eight ran Enzyme out of 2 GiB (``tests/test_allocation_exits.py``).

In a derivative whose driver armed the out-of-memory exit (:func:`pyjlad.engines.driver._guard_out_of_memory`:
serial CPU code, called from Python), :func:`failed_allocations_exit` makes Numba's runtime never return null:
the pool's ``malloc`` already jumps to that exit when a request fails, and each ``NRT_MemInfo_alloc_*``
(:mod:`pyjlad.runtime`'s ``nrt.ll``, which does not even ask ``malloc`` for 2^47 bytes or more) now first calls
``@pyjlad_oom_check`` (``pool.ll``: the same jump for such a request). So the failure branch of each null test
inside a loop can go to a block of its own that ends in ``unreachable``, which Enzyme neither searches from nor
keeps (it takes such a branch as never taken, and so would every branch whose paths all end there: the jump
must come before any branch, hence a call on every allocation's way). The caller sees pyjlad's
``OutOfMemoryError`` (a ``MemoryError``) instead of Numba's; nothing else changes. The block Numba's test branched
to loses that edge (its ``phi`` entries from it dropped); a block left with no way in is deleted, and so on.
"""

from __future__ import annotations

from .ir.cfg import (
    ControlFlow,
    block_label,
    phi_without,
    remove_edge,
    retargeted,
    successors,
    terminator_index,
)
from .ir.edit import declare
from .ir.instructions import parse_instruction
from .ir.module import Module

__all__ = ["OOM_CHECK", "failed_allocations_exit", "phi_without"]

#: The pool's jump to the driver's out-of-memory exit for a request too large to ask for (``pool.ll``): inactive
#: for Enzyme, and touching none of the function's memory (so that Enzyme caches nothing across it).
OOM_CHECK = "pyjlad_oom_check"
_DECLARATION = f'declare void @{OOM_CHECK}(i64) inaccessiblememonly nofree nounwind "enzyme_inactive"'
#: Numba's runtime allocators (:mod:`pyjlad.runtime`'s ``nrt.ll``), whose result Numba tests for null.
_ALLOCATORS = frozenset({"@NRT_MemInfo_alloc", "@NRT_MemInfo_alloc_aligned", "@NRT_MemInfo_alloc_safe_aligned",
                         "@NRT_MemInfo_alloc_zeroed", "@NRT_MemInfo_new_varsize", "@NRT_MemInfo_new_varsize_dtor"})
_PREFIX = "pyjlad.oom."


def _allocators_exit(module: Module) -> set[str]:
    """Each of Numba's allocators ``module`` defines (their first parameter the size, ``i64 %size``) made to call
    ``@pyjlad_oom_check`` first: their symbols."""
    changed = set()
    for function in module.definitions:
        body = function.body or []
        size = function.parameters[0] if function.parameters else None
        if (function.symbol not in _ALLOCATORS or not body or block_label(body[0]) is None or size is None
                or size.type != "i64" or size.name is None):
            continue
        function.body = [body[0], f"  call void @{OOM_CHECK}(i64 {size.name})", *body[1:]]
        changed.add(function.symbol)
    return changed


def _allocations(body: list[str], allocators: set[str]) -> set[str]:
    """The results of the calls of ``allocators`` in ``body`` (``%mi``)."""
    found = set()
    for line in body:
        instruction = parse_instruction(line) if "@NRT_MemInfo_" in line else None
        call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
        if call is not None and call.callee in allocators and instruction.result:
            found.add(instruction.result)
    return found


def _null_tests(body: list[str], allocations: set[str]) -> dict[str, bool]:
    """Each test of an allocation for null: its result -> whether true means null."""
    tests = {}
    for line in body:
        instruction = parse_instruction(line) if " icmp " in line and " null" in line else None
        if instruction is None or instruction.opcode != "icmp" or instruction.result is None:
            continue
        words = [t.text for t in instruction.tokens if t.kind not in ("ws", "comment")]
        operands = instruction.operands()
        if len(operands) == 1 and operands[0] in allocations and words[-1] == "null" and words[3] in ("eq", "ne"):
            tests[instruction.result] = words[3] == "eq"
    return tests


def failed_allocations_exit(module: Module, *, armed: bool = False) -> Module:
    r"""``module`` with each failure branch of an allocation's null test inside a loop sent to
    ``unreachable`` (see the module's docstring); ``module`` itself, changed in place.

    Examples
    --------
    >>> from pyjlad.ir.module import parse
    >>> m = parse("define i32 @f(i64 %n) {\nentry:\n  br label %loop\nloop:\n"
    ...           "  %i = phi i64 [ 0, %entry ], [ %j, %loop.next ]\n"
    ...           "  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)\n"
    ...           "  %null = icmp eq ptr %mi, null\n  br i1 %null, label %raise, label %loop.next\n"
    ...           "loop.next:\n  %j = add i64 %i, 1\n  %c = icmp ult i64 %j, 10\n"
    ...           "  br i1 %c, label %loop, label %done\ndone:\n  ret i32 0\nraise:\n  ret i32 1\n}\n"
    ...           "define ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align) {\nentry:\n"
    ...           "  %mi = call ptr @malloc(i64 %size)\n  %failed = icmp eq ptr %mi, null\n"
    ...           "  br i1 %failed, label %fail, label %init\nfail:\n  ret ptr null\ninit:\n  ret ptr %mi\n}\n")
    >>> print(failed_allocations_exit(m, armed=True).render())  # doctest: +NORMALIZE_WHITESPACE
    define i32 @f(i64 %n) {
    entry:
      br label %loop
    loop:
      %i = phi i64 [ 0, %entry ], [ %j, %loop.next ]
      %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
      %null = icmp eq ptr %mi, null
      br i1 %null, label %pyjlad.oom.0, label %loop.next
    loop.next:
      %j = add i64 %i, 1
      %c = icmp ult i64 %j, 10
      br i1 %c, label %loop, label %done
    done:
      ret i32 0
    pyjlad.oom.0:
      unreachable
    }
    define ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align) {
    entry:
      call void @pyjlad_oom_check(i64 %size)
      %mi = call ptr @malloc(i64 %size)
      %failed = icmp eq ptr %mi, null
      br i1 %failed, label %fail, label %init
    fail:
      ret ptr null
    init:
      ret ptr %mi
    }
    declare void @pyjlad_oom_check(i64) inaccessiblememonly nofree nounwind "enzyme_inactive"

    ``armed`` must be true (the caller's promise that the driver arms its exit): without it, nothing changes.
    """
    allocators = _allocators_exit(module) if armed else set()
    if not allocators:
        return module  # an allocator that may return null: its null tests must stay
    for function in module.definitions:
        body = function.body or []
        allocations = _allocations(body, allocators) if function.symbol not in _ALLOCATORS else set()
        tests = _null_tests(body, allocations) if allocations else {}
        if not tests:
            continue
        graph = ControlFlow.of(body)
        if not graph.names or graph.names[0] == "":
            continue  # an entry block without a label: no loops to leave anyway
        exits = []  # (block, failure target)
        for loop in graph.loops():
            for inside, outside in loop.exits:
                at = terminator_index(graph.lines[inside])
                instruction = parse_instruction(graph.lines[inside][at])
                operands = instruction.operands() if instruction is not None and instruction.opcode == "br" else []
                targets = successors([graph.lines[inside][at]])
                if len(operands) < 1 or operands[0] not in tests or len(targets) != 2:
                    continue
                if targets[0 if tests[operands[0]] else 1] == outside:
                    exits.append((inside, outside))
        for k, (inside, outside) in enumerate(dict.fromkeys(exits)):
            if outside not in graph.lines or inside not in graph.lines:
                continue  # deleted as unreachable by an earlier one
            name = f"{_PREFIX}{k}"
            graph.lines[inside] = retargeted(graph.lines[inside], outside, name)
            graph.names.append(name)
            graph.lines[name] = [f"{name}:", "  unreachable"]
            remove_edge(graph, inside, outside)
        function.body = [line for name in graph.names for line in graph.lines[name]]
    declare(module, _DECLARATION)
    return module

