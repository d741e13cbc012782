"""Tell Enzyme that a function's own temporaries and its caller's arrays are different memory.

Enzyme's reverse sweep reads again the values the forward sweep loaded, unless something may have
overwritten them in between; then it caches them, one per iteration of every loop around the load.
Whether a store may overwrite a load is LLVM's alias analysis, and in Numba's code it cannot tell:

* a temporary (``z = np.empty(k)``) is written through its data pointer, loaded from the header
  (the ``MemInfo``) that ``NRT_MemInfo_alloc_aligned`` filled in, and a pointer loaded from memory may
  point anywhere, the caller's arrays included;
* ``NRT_decref`` of a temporary may free it, and of an argument, as far as LLVM knows, may run any
  destructor (through ``pyjlad_NRT_MemInfo_call_dtor``).

So a temporary allocated inside a loop made Enzyme cache every element of the caller's arrays the loop
read: 51 MB per gradient of a 20,000-sample classifier whose function touches 5 MB, and a gradient 14x
the function instead of 4x (``benchmarks/fresh_temporaries.py``).

:func:`scope_temporaries` states what pyjlad knows, as LLVM's scoped alias metadata
(``!alias.scope``/``!noalias``), on the function Enzyme differentiates:

* memory the function allocates itself (pyjlad's ``NRT_MemInfo_alloc*``, :mod:`pyjlad.runtime`: header and
  data in one new block) is never memory its caller passed in: a ``load``/``store`` through a pointer
  that comes from a parameter gets ``!noalias`` for the *temporaries* scope; one through a temporary's
  data pointer (or its header), the allocation itself and ``NRT_incref``/``NRT_decref`` of a temporary get
  ``!alias.scope`` *temporaries*;
* ``NRT_incref``/``NRT_decref`` of an argument's ``MemInfo`` touch that header's reference count and
  nothing else: the caller holds a reference for the whole call, and the function's own increments and
  decrements of its arguments balance, so the count never reaches zero inside it. Such a call gets
  ``!alias.scope`` *reference counts*, and the loads and stores through parameters ``!noalias`` for it
  (the function never reads or writes an argument's header itself: only these calls do);
* a temporary's data is no reference count either (those are the first word of a header): its loads and
  stores get ``!noalias`` *reference counts* too, and a temporary's ``NRT_decref`` is written out as a
  decrement in that scope and a ``free`` (:mod:`pyjlad.temporary_decrefs`), so that a temporary read after
  its last write is read again, not copied into the tape, when the decrement that frees it follows.

One exception, for Enzyme's sake: a load of a temporary inside a loop that also writes that temporary (a root
in common, :func:`read_in_written_loops`) keeps its ``!alias.scope`` but not its ``!noalias`` *reference counts*.
Enzyme v0.0.289 decides whether a load's value must be kept for the reverse sweep by asking LLVM's alias analysis
whether a later write may overwrite it (``overwritesToMemoryReadBy``), and that analysis answers for one
iteration: ``V[i] = p * V[i + 1]`` reads ``V[i + 1]`` and writes ``V[i]``, "no alias", although the next
iteration writes ``V[i + 1]``. Enzyme then read ``V[i + 1]`` again in the reverse sweep, after the loop had
overwritten it, and the gradient was **silently wrong** (backward induction in a binomial option tree: 8x off;
``tests/test_read_ahead.py``). Before this module, and with it for such loads, the temporary's decrement
that follows (which may free it, as far as Enzyme knows) is the write that keeps the value.

"Comes from" is exact: a pointer is classed by following ``getelementptr`` (its base), casts,
``freeze``, ``phi`` and ``select`` back to a parameter, or to the data field (offset 24) of a
``MemInfo`` that an allocation in this function returned; a pointer that meets both, or anything else
(a pointer loaded from memory, a global, a call's result), is not classed and its accesses are left as
they were. Calls other than those named above, atomic and volatile accesses, and instructions that have
scoped metadata already are never touched (a temporary's ``NRT_decref`` is replaced whatever it carries).

Only the function Enzyme differentiates and its copies get the metadata, and only when none of them
calls another: LLVM's inliner keeps a callee's scopes as they are, so two inlined calls of one tagged
function (a recursion) would share them, and one call's temporary, passed to the other as an argument,
would be taken for different memory than itself.

Enzyme copies the metadata onto the instructions it derives from these (the reverse sweep's loads, the
shadows' accesses): what it states stays true there, since a shadow of an argument is the caller's
(the driver's) memory and a shadow of a temporary is another block allocated in the function.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from .ir import Function, Metadata, Module, parse
from .ir.cfg import ControlFlow, block_label
from .ir.edit import declare
from .ir.instructions import Instruction, parse_instruction
from .ir.lexer import split_top_level, words
from .temporary_decrefs import DECREF, inline_temporary_decrefs

__all__ = ["ALLOCATIONS", "DATA_FIELD", "MEMORY_WRITERS", "REFERENCE_COUNTS", "Origin", "pointer_origins", "read_in_written_loops",
           "pointer_roots", "pointer_sources", "scope_temporaries"]

#: pyjlad's allocators (:mod:`pyjlad.runtime`, ``nrt.ll``): a new block, header and data, no destructor.
ALLOCATIONS = frozenset({"@NRT_MemInfo_alloc_aligned", "@NRT_MemInfo_alloc_safe_aligned", "@NRT_MemInfo_alloc",
                         "@NRT_MemInfo_new_varsize", "@NRT_MemInfo_alloc_zeroed"})
#: pyjlad's reference counting (:mod:`pyjlad.runtime`): an atomic add to the header; a decrement to zero frees.
REFERENCE_COUNTS = frozenset({"@NRT_incref", "@NRT_decref"})
#: The offset of a MemInfo's ``data`` field (``refct, dtor, dtor_info, data, size, external_allocator``).
DATA_FIELD = "24"
_MOVES = frozenset({"getelementptr", "bitcast", "addrspacecast", "freeze", "phi", "select"})
_NOT_MEMORY = frozenset({"null", "undef", "poison", "zeroinitializer"})
_SCOPED = ("!alias.scope", "!noalias")
#: The intrinsics whose first argument is memory they write.
MEMORY_WRITERS = ("@llvm.memset.", "@llvm.memcpy.", "@llvm.memmove.")


class Origin(enum.Enum):
    """Where a pointer points: into the caller's memory, or into a block the function allocated."""

    ARGUMENT = "argument"
    TEMPORARY = "temporary"
    #: A ``MemInfo`` an allocation in the function returned (a temporary's header; its data field is known).
    HEADER = "header"


_MIXED = object()  # the lattice's bottom: not classed
#: A header's data field (its address): an access through it is to the temporary's header.
_DATA_FIELD_MARK = object()


def _moved_pointers(instruction: Instruction) -> list[str]:
    """The values a pointer-moving instruction's result comes from (a ``getelementptr``'s base only)."""
    opcode = instruction.opcode
    if opcode == "phi":
        return [value for value, _ in instruction.phi_incoming()]
    parts = [words(part) for part in split_top_level(instruction.after_opcode())]
    if opcode == "select":
        return [part[-1] for part in parts[1:3] if part]
    if opcode == "getelementptr":
        return [parts[1][-1]] if len(parts) > 1 and parts[1] else []
    # a cast or a freeze: ``ptr %x to ptr addrspace(1)``, ``ptr %x``
    return [parts[0][1]] if parts and len(parts[0]) >= 2 else []


def _is_data_field(instruction: Instruction, header: str) -> bool:
    """Whether ``instruction`` is ``getelementptr [inbounds] i8, ptr <header>, i64 24``."""
    parts = [words(part) for part in split_top_level(instruction.after_opcode())]
    return (len(parts) == 3 and parts[0][-1] == "i8" and parts[1] == ["ptr", header]
            and parts[2] == ["i64", DATA_FIELD])


def pointer_origins(function: Function, allocations: Iterable[str] = ALLOCATIONS) -> dict[str, Origin]:
    """Where each pointer value of ``function`` that can be classed points (see the module's docstring).

    Parameters
    ----------
    function : Function
        A definition.
    allocations : iterable of str
        The callees (``@name``) whose result is a new ``MemInfo`` with its data in the same block.

    Returns
    -------
    dict of str to Origin
        ``%value`` to its origin; values that are not classed are absent.

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> f = parse('''define void @f(ptr %x, i64 %n) {
    ... entry:
    ...   %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
    ...   %field = getelementptr i8, ptr %mi, i64 24
    ...   %data = load ptr, ptr %field, align 8
    ...   %zi = getelementptr double, ptr %data, i64 1
    ...   %xi = getelementptr double, ptr %x, i64 1
    ...   %either = select i1 true, ptr %xi, ptr %zi
    ...   ret void
    ... }
    ... ''').function("f")
    >>> {k: v.value for k, v in sorted(pointer_origins(f).items())}
    {'%data': 'temporary', '%field': 'header', '%mi': 'header', '%x': 'argument', '%xi': 'argument', \
'%zi': 'temporary'}
    """
    allocations = frozenset(allocations)
    state: dict[str, object] = {p.name: Origin.ARGUMENT for p in function.parameters if p.type == "ptr" and p.name}
    instructions = [i for i in function.instructions() if i.result is not None]
    changed = True
    while changed:  # a fixed point: phis in loops see their back edges' values on a later round
        changed = False
        for instruction in instructions:
            new = _origin_of(instruction, state, allocations)
            if new is not None and state.get(instruction.result) is not new:
                state[instruction.result] = new  # (only ever down: unknown, one origin, mixed)
                changed = True
    return {value: _class_of(origin) for value, origin in state.items() if isinstance(_class_of(origin), Origin)}


def _origin_of(instruction: Instruction, state: dict[str, object], allocations: frozenset[str]) -> object | None:
    """The origin of ``instruction``'s result from what is known of its operands; ``None`` while nothing is."""
    opcode = instruction.opcode
    if opcode == "call":
        call = instruction.call()
        return Origin.HEADER if call is not None and call.callee in allocations else _MIXED
    if opcode == "load":
        address = instruction.address()
        if address is None or not _is_pointer_load(instruction):
            return _MIXED
        return Origin.TEMPORARY if state.get(address) is _DATA_FIELD_MARK else _MIXED
    if opcode not in _MOVES:
        return _MIXED
    sources = [v for v in _moved_pointers(instruction) if v not in _NOT_MEMORY]
    if not sources or any(not v.startswith("%") for v in sources):
        return _MIXED  # a global, a constant expression
    if opcode == "getelementptr" and state.get(sources[0]) is Origin.HEADER and _is_data_field(instruction, sources[0]):
        return _DATA_FIELD_MARK
    known = [state[v] for v in sources if v in state]
    if not known:
        return None
    first = _class_of(known[0])
    return first if all(_class_of(k) is first for k in known) else _MIXED


def _class_of(origin: object) -> object:
    """What a value derived from one of ``origin`` points into (a data field is in a header)."""
    return Origin.HEADER if origin is _DATA_FIELD_MARK else origin


def _is_pointer_load(instruction: Instruction) -> bool:
    """Whether ``instruction`` is ``load ptr, ...``."""
    parts = [words(part) for part in split_top_level(instruction.after_opcode())]
    return bool(parts) and parts[0] == ["ptr"]


class _Scopes:
    """The metadata nodes of the two scopes, numbered after the module's own."""

    def __init__(self, module: Module) -> None:
        numbers = [int(symbol[1:]) for symbol in module.metadata if symbol[1:].isdigit()]
        base = max(numbers, default=-1) + 1
        self.domain, self.temporaries, self.counts = (f"!{base + k}" for k in range(3))
        #: ``!alias.scope`` lists: the temporaries; the arguments' reference counts.
        self.in_temporaries, self.in_counts = f"!{base + 3}", f"!{base + 4}"
        #: ``!noalias`` of an access to the caller's memory: neither of the two.
        self.neither = f"!{base + 5}"

    def nodes(self) -> list[Metadata]:
        return [Metadata(self.domain, f'distinct !{{{self.domain}, !"pyjlad: memory of the function"}}'),
                Metadata(self.temporaries,
                         f'distinct !{{{self.temporaries}, {self.domain}, !"pyjlad: its temporaries"}}'),
                Metadata(self.counts,
                         f'distinct !{{{self.counts}, {self.domain}, !"pyjlad: its arguments\' reference counts"}}'),
                Metadata(self.in_temporaries, f"!{{{self.temporaries}}}"),
                Metadata(self.in_counts, f"!{{{self.counts}}}"),
                Metadata(self.neither, f"!{{{self.temporaries}, {self.counts}}}")]


def _tag(instruction: Instruction, origins: dict[str, Origin], scopes: _Scopes,
         runtime: frozenset[str], read_ahead: bool = False) -> str | None:
    """``instruction``'s line with its metadata; ``None`` where it stays as it is. ``read_ahead``: a load of a
    temporary that its loop writes (see the module's docstring), which gets its scope only."""
    if instruction.opcode in ("load", "store"):
        origin = origins.get(instruction.address() or "")
        if origin is Origin.ARGUMENT:
            return instruction.with_metadata("!noalias", scopes.neither)
        if origin is Origin.TEMPORARY and read_ahead:
            return instruction.with_metadata("!alias.scope", scopes.in_temporaries)
        if origin is Origin.TEMPORARY:
            # A temporary's data is never a reference count (a header's first word), its own or an argument's.
            return parse_instruction(instruction.with_metadata("!alias.scope", scopes.in_temporaries)
                                     ).with_metadata("!noalias", scopes.in_counts)
        if origin is Origin.HEADER:
            return instruction.with_metadata("!alias.scope", scopes.in_temporaries)
        return None
    call = instruction.call()
    if call is None or call.callee not in runtime:
        return None
    if call.callee in ALLOCATIONS:
        return instruction.with_metadata("!alias.scope", scopes.in_temporaries)
    if call.callee in REFERENCE_COUNTS and len(call.values) == 1:
        origin = origins.get(call.values[0])
        if origin is Origin.HEADER:
            return instruction.with_metadata("!alias.scope", scopes.in_temporaries)
        if origin is Origin.ARGUMENT:
            return instruction.with_metadata("!alias.scope", scopes.in_counts)
    return None


def read_in_written_loops(function: Function, origins: dict[str, Origin] | None = None) -> set[int]:
    """The body lines of ``function`` that load a temporary inside a loop that also writes that temporary:
    a ``store`` (or ``llvm.memset``/``llvm.memcpy``/``llvm.memmove`` destination) in the loop whose address has a
    root in common with the load's (:func:`pointer_roots`: followed back through ``getelementptr``, casts, ``freeze``,
    ``phi`` and ``select``).

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> f = parse('''define void @f(i64 %n) {
    ... entry:
    ...   %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
    ...   %field = getelementptr i8, ptr %mi, i64 24
    ...   %v = load ptr, ptr %field, align 8
    ...   br label %loop
    ... loop:
    ...   %i = phi i64 [ 0, %entry ], [ %next, %loop ]
    ...   %here = getelementptr double, ptr %v, i64 %i
    ...   %ahead = getelementptr i8, ptr %here, i64 8
    ...   %x = load double, ptr %ahead, align 8
    ...   store double %x, ptr %here, align 8
    ...   %next = add i64 %i, 1
    ...   %more = icmp ult i64 %next, %n
    ...   br i1 %more, label %loop, label %done
    ... done:
    ...   %first = load double, ptr %v, align 8
    ...   ret void
    ... }
    ... ''').function("f")
    >>> [f.body[k].split(",")[0].strip() for k in sorted(read_in_written_loops(f))]  # not the load after the loop
    ['%x = load double']
    """
    origins = pointer_origins(function) if origins is None else origins
    body = function.body or []
    sources = pointer_sources(function)
    block_of: dict[int, str | None] = {}  # each line's block (None: the entry's lines before any label)
    block = None
    for index, line in enumerate(body):
        block = block_label(line) or block
        block_of[index] = block
    loads: list[tuple[int, frozenset[str]]] = []
    writes: list[tuple[int, frozenset[str]]] = []
    for index, line in enumerate(body):
        if not any(word in line for word in ("load", "store", "@llvm.mem")):
            continue
        instruction = parse_instruction(line)
        if instruction is None:
            continue
        call = instruction.call()
        if call is not None and call.callee.startswith(MEMORY_WRITERS):
            address = call.values[0] if call.values else None
        elif instruction.opcode in ("load", "store"):
            address = instruction.address()
        else:
            continue
        if address is None or origins.get(address) is not Origin.TEMPORARY:
            continue
        found = (loads if instruction.opcode == "load" else writes)
        found.append((index, pointer_roots(address, sources)))
    if not loads or not writes:
        return set()
    graph = ControlFlow.of(body)
    entry = graph.names[0] if graph.names else None
    chosen: set[int] = set()
    for loop in graph.loops():
        inside = loop.blocks
        written = set().union(*(roots for k, roots in writes if (block_of.get(k) or entry) in inside))
        chosen |= {k for k, roots in loads if (block_of.get(k) or entry) in inside and roots & written}
    return chosen


def pointer_sources(function: Function) -> dict[str, list[str]]:
    """For each pointer move of ``function`` (``getelementptr``, casts, ``freeze``, ``phi``, ``select``), the values
    its result comes from (:func:`pointer_roots` follows them)."""
    return {i.result: _moved_pointers(i) for i in function.instructions() if i.result is not None and i.opcode in _MOVES}


def pointer_roots(value: str, sources: dict[str, list[str]]) -> frozenset[str]:
    """The values ``value`` is computed from through pointer moves (``sources``: :func:`pointer_sources`), itself
    where it is not one."""
    roots, seen, todo = set(), set(), [value]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in sources:
            todo += sources[current]
        else:
            roots.add(current)
    return frozenset(roots)


def _scope_function(function: Function, scopes: _Scopes, runtime: frozenset[str]) -> bool:
    """Tag ``function``'s accesses in place (``runtime``: the allocations and reference counts the module
    defines); whether any was."""
    origins = pointer_origins(function, runtime & ALLOCATIONS)
    body = function.body or []
    read_ahead = read_in_written_loops(function, origins)
    tagged = False
    for index, line in enumerate(body):
        if not any(word in line for word in ("load", "store", "call")) or any(kind in line for kind in _SCOPED):
            continue
        instruction = parse_instruction(line)
        tagged_line = (_tag(instruction, origins, scopes, runtime, index in read_ahead)
                       if instruction is not None else None)
        if tagged_line is not None:
            body[index] = tagged_line
            tagged = True
    if DECREF in runtime:
        inlined = inline_temporary_decrefs(body, lambda value: origins.get(value) is Origin.HEADER, scopes.in_counts)
        tagged |= inlined is not body
        body[:] = inlined
    return tagged


def scope_temporaries(module: Module | str, entry: str) -> str:
    """``module``'s text with the scoped alias metadata of the module's docstring on ``functions``.

    Parameters
    ----------
    module : Module or str
        The module Enzyme gets (parsed, or its text). Only allocations and reference counts it defines
        (pyjlad's runtime) count as such.
    entry : str
        The name (no ``@``) of the function Enzyme differentiates: it and its copies (``<entry>.<suffix>``,
        such as :mod:`pyjlad.engines.entry_status`'s) are tagged, unless one of them calls one of them (see
        the module's docstring).

    Returns
    -------
    str
        The module's text; unchanged if nothing was tagged.

    Examples
    --------
    >>> text = '''define void @f(ptr %x, i64 %n) {
    ... entry:
    ...   %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
    ...   %field = getelementptr i8, ptr %mi, i64 24
    ...   %data = load ptr, ptr %field, align 8
    ...   %v = load double, ptr %x, align 8
    ...   store double %v, ptr %data, align 8
    ...   call void @NRT_decref(ptr %mi)
    ...   ret void
    ... }
    ... define ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align) {
    ...   ret ptr null
    ... }
    ... define void @NRT_decref(ptr %mi) {
    ...   ret void
    ... }
    ... '''
    >>> print(scope_temporaries(text, "f").split("  %pyjlad.decref.0.null")[0], end="")
    define void @f(ptr %x, i64 %n) {
    entry:
      %pyjlad.decref.sink = alloca i64, align 8
      store i64 0, ptr %pyjlad.decref.sink, align 8
      %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32), !alias.scope !3
      %field = getelementptr i8, ptr %mi, i64 24
      %data = load ptr, ptr %field, align 8, !alias.scope !3
      %v = load double, ptr %x, align 8, !noalias !5
      store double %v, ptr %data, align 8, !alias.scope !3, !noalias !4

    (the ``NRT_decref`` follows, written out: :func:`pyjlad.temporary_decrefs.inline_temporary_decrefs`).
    """
    parsed = parse(module) if isinstance(module, str) else module
    defined = {f.symbol for f in parsed.definitions}
    chosen = [f for f in parsed.definitions if f.name == entry or f.name.startswith(entry + ".")]
    symbols = {f.symbol for f in chosen}
    if any(call.callee in symbols for f in chosen for call in f.calls()):
        return parsed.render()
    scopes = _Scopes(parsed)
    tagged = False
    for function in chosen:
        tagged |= _scope_function(function, scopes, (ALLOCATIONS | REFERENCE_COUNTS) & defined)
    if tagged:
        if DECREF in defined:  # a written-out decref frees (a no-op where the runtime declares it already)
            declare(parsed, "declare void @free(ptr)")
        parsed.items += scopes.nodes()
    return parsed.render()
