"""Reads of arrays the function never writes, marked invariant where a parallel loop's body reads them.

Enzyme's reverse sweep reads a value again where it can prove nothing overwrote it since the forward sweep,
and caches it otherwise (one copy per read, per iteration of every loop around it). A parallel loop's
derivative is split: the forward sweep of each task, then its reverse, with the function's code between
them. Enzyme proves "not overwritten" for a read in a task or in the loop's body only through the pointers'
origins, and every pointer there comes from memory: Numba hands a parallel loop its arrays as an array of
pointers (the gufunc's ``args``), and Enzyme's analysis of origins trusts no pointer loaded from memory
(``is_value_mustcache_from_origin``: "unknown origin may need caching"), nor, at the fork, the ``args``
array itself (Numba's ``set_parallel_chunksize`` call after the fork may write anything). So every element
a loop body reads of the caller's arrays was cached: a softmax classifier of 20,000 samples (10x32 weights)
wrote and read back 51 MB of copies of ``x`` per gradient (``x[i, c]``, once for each of the 10 rows of
weights), which the serial derivative, where Enzyme sees the whole function, reads again in place.

:func:`invariant_reads` tells Enzyme what pyjlad knows: an array argument whose data pointer LLVM proved
``readonly`` for the whole function (:mod:`pyjlad.inferred_readonly`, the ABI's ``writes``), of a function
that writes none of its array arguments (so no argument the caller passes, overlapping it, can change it
either), holds the same values from the start of the derivative's call to its end. A ``load`` that reads
such an array gets ``!invariant.load``, which Enzyme takes as "never needs caching" and LLVM as "the same
value wherever it is read" (true for the call's duration; nothing of the call outlives it).

Which loads read such an array is traced exactly, not guessed:

* in the entry, each ``__kmpc_fork_call`` passes arrays of pointers it allocated (``alloca``), itself or, in the
  module of a ``jvp`` or Hessian-vector product, through a pack its fork function and that function's registered
  forward derivative unpack (:func:`pyjlad.forked_arrays.forked_arrays`); a slot of one holds such an array when
  its only store (every access to the array at a constant offset) stores a pointer derived only from the array's
  data pointer parameter (:func:`pyjlad.private_callees.only_derived`), and the array is used by nothing but
  ``getelementptr``, ``load``, those stores, the fork and its store into the pack;
* in the task the fork runs (called by the fork alone), the pointers it loads from such a slot, its own
  parameter for that array used only to load (never written, never passed on);
* the task's private copies of such an array (:mod:`pyjlad.private_adjoints`: a ``malloc`` of the task's own that
  one ``llvm.memcpy`` fills from it before any row runs, the copy's only write): their reads in the body and
  its callees, which run after the copy is made and before it is freed (the copy of ``w`` per thread; before,
  Enzyme kept a copy of all of ``w``, 2.5 KB, per sample, in the reverse of ``w @ x[i]``);
* from there, through direct calls of internal functions and requests for their forward derivative (the
  forward task's ``__enzyme_fwddiff`` of the loop's body: its primal arguments), the parameters that only ever
  receive pointers derived from those (:func:`pyjlad.private_callees.owned_parameters`: the loop body's copy and
  what it calls,
  such as pyjlad's loop form of ``w @ x[i]``; a function that other code calls too gets a copy of its own for
  these calls, if it is Numba's compiled code or a BLAS loop form, only ever called directly; such a copy,
  internal and called once, is then inlined where :mod:`pyjlad.inline_callees` allows, as the serial
  derivative's callees are).

A function on that path that stores through such a pointer contradicts ``readonly``: then nothing is marked.
Only the parallel module of a ``parallel=True`` function gets the mark (:func:`pyjlad.parallel_derivatives.parallel_module`).

In a Hessian-vector product (Enzyme's reverse sweep over the forward derivative it builds of the function) the
mark covers the loads of the values, not the loads of their tangents that Enzyme's forward derivative adds
(it does not carry ``!invariant.load`` over): the reverse sweep still caches those, one copy per read. The
softmax classifier's parallel product kept four copies of ``w`` (with ``x[i]``) per sample before, two now.
A loop's body is differentiated with runtime activity over the row's array of pointers (any of them may be
active), so the reverse sweep needs the tangent of every factor of a product, even of an array the function
holds constant (read as zero); it reads them from the thread's private copies of the tangents (parameters of
the body, ``-enzyme-print-perf``: "due to origin ptr %"pyjlad.private.1'""), which Enzyme cannot prove
unchanged until then, so it keeps them: the loop form of the classifier keeps four tangents per sample, row
and column (256 MiB at 20,000 samples), where the serial product keeps none of its reads.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Iterable

from .errors import IRLookupError, IRParseError
from .forked_arrays import FORK, HARMLESS_CALLS, constant_offsets, forked_arrays, stored_value
from .ir import Function, Metadata, Module, parse
from .ir.edit import renamed_line
from .ir.instructions import Instruction, parse_instruction
from .ir.lexer import decode_name, symbol_for, texts_of
from .private_callees import only_derived, owned_parameters

__all__ = ["COPY_SUFFIX", "invariant_reads"]

_MARK = "!invariant.load"
#: Linkage, visibility and DLL words a function's internal copy drops.
_VISIBILITY = frozenset({"private", "internal", "available_externally", "linkonce", "weak", "common", "appending",
                         "extern_weak", "linkonce_odr", "weak_odr", "external", "dso_local", "dso_preemptable",
                         "hidden", "protected", "default", "dllimport", "dllexport", "unnamed_addr",
                         "local_unnamed_addr"})
#: The suffix of the name of a function's internal copy (made for the calls passing never-written pointers).
COPY_SUFFIX = ".pyjlad.reads"
#: The functions :func:`_owned_with_copies` may copy: Numba's compiled functions and pyjlad's BLAS loop forms.
_COPIED = ("@_ZN", "@numba_xx")
#: At most this many functions copied (each copy is Enzyme's to differentiate too).
_MOST_COPIES = 16


def invariant_reads(text: str, entry: str, never_written: Collection[int]) -> str:
    """``text`` with ``!invariant.load`` on the loads of parallel tasks and their callees that read an array
    the function never writes (see the module docstring).

    Parameters
    ----------
    text : str
        The parallel module (LLVM IR text), its loops OpenMP forks.
    entry : str
        The function Enzyme differentiates (no ``@``).
    never_written : collection of int
        Positions in ``entry``'s parameter list (``retptr`` and ``excinfo`` included) of the data pointers of
        arrays the function never writes; empty unless the function writes none of its array arguments.

    Returns
    -------
    str
        The module's text; unchanged if no load was marked.

    Examples
    --------
    >>> text = '''define i32 @f(ptr %x, ptr %out) {
    ... entry:
    ...   %args = alloca [2 x ptr], align 8
    ...   store ptr %x, ptr %args, align 8
    ...   %slot = getelementptr inbounds ptr, ptr %args, i64 1
    ...   store ptr %out, ptr %slot, align 8
    ...   call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @loc, i32 1, ptr @task, ptr %args)
    ...   ret i32 0
    ... }
    ... define internal void @task(ptr %gtid, ptr %btid, ptr %args) {
    ... entry:
    ...   %xp = load ptr, ptr %args, align 8
    ...   %at = getelementptr inbounds ptr, ptr %args, i64 1
    ...   %op = load ptr, ptr %at, align 8
    ...   call void @body(ptr %xp, ptr %op)
    ...   ret void
    ... }
    ... define internal void @body(ptr %a, ptr %b) {
    ... entry:
    ...   %v = load double, ptr %a, align 8
    ...   %w = load double, ptr %b, align 8
    ...   ret void
    ... }'''
    >>> marked = invariant_reads(text, "f", {0})
    >>> [line.strip() for line in marked.splitlines() if "invariant" in line or line.startswith("!")]
    ['%v = load double, ptr %a, align 8, !invariant.load !0', '!0 = !{}']
    """
    if not never_written or FORK not in text:
        return text
    try:
        module = parse(text, strict=False)
        function = module.function(entry)
    except (IRParseError, IRLookupError):
        return text
    functions = {f.symbol: f for f in module.definitions}
    params = [p.name for k, p in enumerate(function.parameters) if k in never_written and p.name]
    roots, fills = _task_roots(module, function, functions, params)
    if not roots:
        return text
    owned = _owned_with_copies(module, {t: names | fills[t].keys() for t, names in roots.items()})
    functions = {f.symbol: f for f in module.definitions}
    reads: dict[str, set[str]] = {}
    for symbol, names in owned.items():
        instructions = list(functions[symbol].instructions())
        filling = set(fills[symbol].values()) if symbol in fills else set()
        if _writes_through(instructions, only_derived(names, instructions), filling):
            return text  # contradicts "never written": mark nothing
        derived = only_derived(roots[symbol], instructions) if symbol in roots else only_derived(names, instructions)
        reads[symbol] = {i.result for i in instructions
                         if i.opcode == "load" and i.result and i.address() in derived and _MARK not in i.text}
    if not any(reads.values()):
        return text
    node = _empty_node(module)
    for symbol, results in reads.items():
        _mark(functions[symbol], results, node)
    module.items.append(Metadata(node, "!{}"))
    return module.render()


def _owned_with_copies(module: Module, roots: dict[str, set[str]]) -> dict[str, set[str]]:
    """:func:`~pyjlad.private_callees.owned_parameters` from ``roots``, after giving each function called with
    such a pointer from an owning function, and from elsewhere too, a copy of its own for those calls (an
    internal function ``<name>.pyjlad.reads``, edited into ``module``): Numba's compiled loop body is called by
    the body's copy with its rows in place and by the gufunc wrapper with pointers it loads, and that body calls
    pyjlad's loop form of ``w @ x[i]``, also defined once for every caller."""
    copies: dict[str, str] = {}
    while True:
        text = module.render()
        functions = {f.symbol: f for f in module.definitions}
        owned = owned_parameters(text, functions, roots, through_derivatives=True)
        wanted: dict[str, set[str]] = {}  # owning function -> callees to copy for its calls
        for symbol, names in owned.items():
            instructions = list(functions[symbol].instructions())
            derived = only_derived(names, instructions)
            for ins in instructions:
                call = ins.call()
                if (call is None or call.callee not in functions or call.callee in owned
                        or call.callee in copies.values() or not any(v in derived for v in call.values)):
                    continue  # (a copy not owned: its callers pass such pointers in different places)
                wanted.setdefault(symbol, set()).add(call.callee)
        uses = Counter(texts_of(text, "global"))
        calls = Counter(c.callee for f in functions.values() for c in f.calls())
        new = sorted(c for c in set().union(*wanted.values()) - set(copies)
                     if _copyable(functions[c], module, uses[c] - calls[c])) if wanted else []
        if len(copies) + len(new) > _MOST_COPIES:
            return owned
        for callee in new:
            copies[callee] = _copy_function(module, functions[callee])
        redirect = {symbol: {decode_name(c): decode_name(copies[c]) for c in callees if c in copies}
                    for symbol, callees in wanted.items()}
        if not any(redirect.values()):
            return owned  # (each round copies a function or calls a copy from one more place: it ends)
        for symbol, rename in redirect.items():
            functions[symbol].body = [renamed_line(line, rename.get) for line in functions[symbol].body or []]


def _copyable(function: Function, module: Module, other_uses: int) -> bool:
    """Whether ``function`` is Numba's compiled code or a BLAS product's loop form (``@_ZN...``, ``@numba_xx...``:
    nothing finds those by name after this pass), is only ever called directly (``other_uses``: the mentions of
    its symbol other than as a callee; its definition is one), and names no Enzyme attribute (a custom
    derivative is registered by address)."""
    groups = module.attribute_groups
    attributes = [*function.attributes,
                  *(a for ref in function.attribute_group_refs if ref in groups for a in groups[ref].attributes)]
    return (function.symbol.startswith(_COPIED) and other_uses == 1
            and not any(a.startswith('"enzyme_') for a in attributes))


def _copy_function(module: Module, function: Function) -> str:
    """Add an internal copy of ``function`` after it; its symbol."""
    copy = dataclasses.replace(function, symbol=symbol_for(function.name + COPY_SUFFIX),
                               linkage=["internal", *(w for w in function.linkage if w not in _VISIBILITY)],
                               attributes=[a for a in function.attributes if not a.startswith("comdat")],
                               parameters=[dataclasses.replace(p, attributes=list(p.attributes))
                                           for p in function.parameters],
                               body=list(function.body or []))
    module.items.insert(module.items.index(function) + 1, copy)
    return copy.symbol


def _task_roots(module: Module, entry: Function, functions: dict[str, Function],
                params: list[str]) -> tuple[dict[str, set[str]], dict[str, dict[str, str]]]:
    """For each task the entry forks (directly or through a pack: :func:`pyjlad.forked_arrays.forked_arrays`), the
    pointers it loads that point into a never-written array; and its private copies of such arrays, each with the
    one instruction that fills it (:func:`_private_copies`)."""
    instructions = list(entry.instructions())
    arrays = only_derived(params, instructions)
    forked = forked_arrays(module, entry)
    roots: dict[str, set[str]] = {}
    for task, passed in forked.tasks.items():
        target = functions[task]
        found: set[str] = set()
        for position, array in passed:
            if position >= len(target.parameters):
                continue
            slots = _readonly_slots(instructions, array, arrays, forked.packed)
            if slots:
                found |= _slot_loads(list(target.instructions()), target.parameters[position].name, slots)
        if found:
            roots[task] = found
    return roots, {task: _private_copies(list(functions[task].instructions()), found) for task, found in roots.items()}


def _private_copies(instructions: list[Instruction], pointers: set[str]) -> dict[str, str]:
    """The task's ``malloc``s that one ``llvm.memcpy`` fills from a pointer derived from ``pointers`` (a thread's
    private copy of a never-written array, :func:`pyjlad.private_adjoints.private_copy`), each with that
    instruction's text: the only write to it that :func:`invariant_reads` allows (made before any row runs)."""
    derived = only_derived(pointers, instructions)
    allocated = {i.result for i in instructions if (c := i.call()) is not None and c.callee == "@malloc" and i.result}
    fills: dict[str, list[str]] = {}
    for ins in instructions:
        call = ins.call()
        if (call is not None and call.callee.startswith("@llvm.memcpy") and len(call.values) > 1
                and call.values[0] in allocated and call.values[1] in derived):
            fills.setdefault(call.values[0], []).append(ins.text)
    return {copy: lines[0] for copy, lines in fills.items() if len(lines) == 1}


def _readonly_slots(instructions: list[Instruction], array: str, pointers: set[str], packed: set[str]) -> set[int]:
    """The byte offsets of the slots of the entry's pointer array ``array`` whose one store stores one of
    ``pointers``; none if the array is used other than by constant offsets, loads, stores into it, forks and
    the ``packed`` stores (its address put into a fork's pack)."""
    offsets = constant_offsets(instructions, array)
    if offsets is None:
        return set()
    stored: dict[int, list[str]] = {}
    for ins in instructions:
        if ins.result in offsets or not any(v in offsets for v in ins.operands()) or ins.text in packed:
            continue  # (an offset into it, unrelated, or its address put into a pack)
        if ins.opcode == "store":
            value = stored_value(ins)
            if ins.address() not in offsets or value in offsets:
                return set()  # (the array's own address stored somewhere: it escapes)
            stored.setdefault(offsets[ins.address() or ""], []).append(value or "")
        elif ins.opcode == "call":
            call = ins.call()
            if call is None or not (call.callee == FORK or call.callee.startswith(HARMLESS_CALLS)):
                return set()
    return {offset for offset, values in stored.items() if len(values) == 1 and values[0] in pointers}


def _slot_loads(instructions: list[Instruction], args: str | None, slots: set[int]) -> set[str]:
    """The pointers a task loads from ``slots`` of its parameter ``args``; none if ``args`` is used for
    anything but constant offsets and loads."""
    offsets = constant_offsets(instructions, args or "")
    if not args or offsets is None:
        return set()
    found = set()
    for ins in instructions:
        if ins.result in offsets or not any(v in offsets for v in ins.operands()):
            continue  # (an offset into it, or unrelated)
        if ins.opcode != "load" or ins.address() not in offsets:
            return set()
        if offsets[ins.address() or ""] in slots and ins.result:
            found.add(ins.result)
    return found


def _writes_through(instructions: Iterable[Instruction], pointers: set[str], allowed: Collection[str] = ()) -> bool:
    """Whether a store, atomic update or memory intrinsic writes through one of ``pointers`` (but the instructions
    whose text is in ``allowed``)."""
    for ins in instructions:
        if ins.text in allowed:
            continue
        if ins.opcode in ("atomicrmw", "cmpxchg") and any(v in pointers for v in ins.operands()[:1]):
            return True
        if ins.opcode == "store":
            address = ins.address()
            if address is None and any(v in pointers for v in ins.operands()):
                return True  # (an atomic or volatile store: its address is not read back; be safe)
            if address in pointers:
                return True
        call = ins.call()
        if call is not None and call.callee.startswith(("@llvm.memcpy", "@llvm.memmove", "@llvm.memset")) and (
                call.values[:1] and call.values[0] in pointers):
            return True
    return False


def _empty_node(module: Module) -> str:
    """A metadata number after the module's own."""
    numbers = [int(symbol[1:]) for symbol in module.metadata if symbol[1:].isdigit()]
    return f"!{max(numbers, default=-1) + 1}"


def _mark(function: Function, results: set[str], node: str) -> None:
    """Add ``!invariant.load node`` to the loads of ``function`` whose result is in ``results``."""
    body = function.body or []
    for index, line in enumerate(body):
        if "load" not in line:
            continue
        ins = parse_instruction(line)
        if ins is not None and ins.opcode == "load" and ins.result in results:
            body[index] = ins.with_metadata(_MARK, node)
