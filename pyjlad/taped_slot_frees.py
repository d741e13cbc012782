"""Stack slots Enzyme moved to the heap and taped, freed by the reverse pass that never reads them.

Enzyme's augmented pass turns a stack slot (``alloca``) whose memory the reverse pass might need into a
``malloc`` (marked ``!enzyme_fromstack``) and stores its address in a field of the tape it returns; the reverse
pass reads that field and frees the block at its end. Where the reverse pass reaches the block only through
other memory (the OpenMP argument pack of a ``parallel=True`` function holds the addresses of the gufunc's
``dims`` and ``steps`` slots, and the reverse task reads them from the pack), Enzyme v0.0.289 neither reads the
field nor frees the block: every Hessian-vector product of a ``parallel=True`` function lost 80 bytes, the two
slots, per call (``tests/test_repeated_calls_memory.py``).

:func:`taped_slots_freed` edits Enzyme's output (between Enzyme and the optimization after it:
:func:`pyjlad.engines.differentiate.run_enzyme`, after :func:`pyjlad.unread_tape_slots.unread_slots_on_the_stack`,
which puts back on the stack the slots whose address stays in their function). Such a block is freed by the
reverse pass, before each of its ``ret``, when:

* it is allocated in the entry block of its function, and its address stored there, and nowhere else, into a
  field of a struct (the tape) through a ``getelementptr`` of that field; no call frees it;
* one function of the module takes a parameter of the tape's type (the reverse pass: Enzyme makes a type for
  each tape), reads it only by ``extractvalue`` and frees, with Enzyme's mark, a block it takes from it (the
  slots Enzyme does free); any other function taking one (the reverse pass of a wrapper) only passes it on, in
  one call, to a function taking one;
* no instruction of the module may read that field (an ``extractvalue`` or ``getelementptr`` selecting it; one
  that reaches into a type holding the tape by more than one index, or a ``getelementptr`` of the tape's type
  whose pointer is used other than to store, is taken to read every field).

A stack slot's memory lives no longer than the call of its function, and the reverse pass of that call is the
last to use it: the slots Enzyme does free (the pack itself among them), it frees there.

Examples
--------
>>> text = "\\n".join([
...     "define internal { ptr, ptr } @augmented_f(ptr %t, ptr %pack) {", "entry:",
...     "  %dims = tail call noalias nonnull ptr @malloc(i64 32), !enzyme_fromstack !2",
...     "  %s = getelementptr inbounds { ptr, ptr }, ptr %t, i32 0, i32 1",
...     "  store ptr %dims, ptr %s, align 8",
...     "  store ptr %dims, ptr %pack, align 8", "  ret { ptr, ptr } zeroinitializer", "}",
...     "define internal void @diffef({ ptr, ptr } %tapeArg) {", "entry:",
...     "  %p = extractvalue { ptr, ptr } %tapeArg, 0", "  call void @free(ptr %p), !enzyme_cache_free !3",
...     "  ret void", "}", "declare void @free(ptr)", ""])
>>> print("\\n".join(taped_slots_freed(text).splitlines()[12:15]))
  %pyjlad.taped.slot.0 = extractvalue { ptr, ptr } %tapeArg, 1
  call void @free(ptr %pyjlad.taped.slot.0)
  ret void

Read by the reverse pass (field 1 extracted), the block is Enzyme's to free:

>>> read = text.replace("extractvalue { ptr, ptr } %tapeArg, 0", "extractvalue { ptr, ptr } %tapeArg, 1")
>>> taped_slots_freed(read) == read
True
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import IRParseError
from .ir import Function, Instruction, Module, parse
from .ir.module import parse_instruction
from .unread_tape_slots import (
    derived_pointers,
    entry_block,
    extracted_frees,
    frees_before_returns,
    gep_selection,
    read_fields,
)

__all__ = ["taped_slots_freed"]

_FROM_STACK = "!enzyme_fromstack"
_PREFIX = "%pyjlad.taped.slot."  # the names of the fields extracted


@dataclass(frozen=True)
class _TapedSlot:
    """A block allocated for a stack slot whose address goes to field ``field`` of a tape of type ``tape``,
    stored through ``pointer`` (a ``getelementptr`` of ``function``)."""

    function: str
    tape: str
    field: int
    pointer: str


def taped_slots_freed(text: str) -> str:
    """``text`` (Enzyme's output, as IR text) with a ``free`` in the reverse pass for each taped stack slot no
    instruction reads (see the module docstring); ``text`` itself where there is none."""
    if _FROM_STACK not in text or _PREFIX in text:
        return text
    try:
        module = parse(text, strict=False)
    except IRParseError:
        return text
    if "@free" not in module.functions:
        return text
    slots = [slot for function in module.definitions if any(_FROM_STACK in line for line in function.body or ())
             for slot in _taped_slots(function)]
    if not slots:
        return text
    read = read_fields(module, {slot.tape for slot in slots}, {(s.function, s.pointer) for s in slots})
    frees: dict[str, list[tuple[str, int]]] = {}  # reverse function -> (tape parameter, field) to free
    for slot in slots:
        if slot.field in read.get(slot.tape, ()) or None in read.get(slot.tape, ()):
            continue
        reverse = _reverse_pass(module, slot.tape)
        if reverse is None:
            continue
        freed, listed = (f"{slot.tape} {reverse[1]}", slot.field), frees.setdefault(reverse[0].symbol, [])
        if freed not in listed:  # one free per field
            listed.append(freed)
    if not any(frees.values()):
        return text
    serial = [0]
    for function in module.definitions:
        if frees.get(function.symbol):
            frees_before_returns(function, [f"{tape}, {field}" for tape, field in frees[function.symbol]], _PREFIX,
                                 serial)
    return module.render()


def _taped_slots(function: Function) -> list[_TapedSlot]:
    """The ``!enzyme_fromstack`` blocks of ``function``'s entry block that no call frees and whose address the
    entry block stores into a struct's field through a ``getelementptr`` of it (each such store's field)."""
    body = function.body or []
    entry = entry_block(body)
    instructions = [ins for ins in map(parse_instruction, body) if ins is not None]
    by_result = {ins.result: ins for ins in instructions if ins.result is not None}
    found = []
    for k in entry:
        if _FROM_STACK not in body[k] or "@malloc(" not in body[k]:
            continue
        ins = parse_instruction(body[k])
        call = ins.call() if ins is not None else None
        if ins is None or ins.result is None or call is None or call.callee != "@malloc":
            continue
        derived = derived_pointers(ins.result, instructions)
        if any(_frees(other, derived) for other in instructions):
            continue
        stored = [(j, store) for j, store in enumerate(map(parse_instruction, body)) if store is not None
                  and store.opcode == "store" and store.operands()[:1] == [ins.result]
                  and _field_of(store.address(), by_result) is not None]
        if len(stored) != 1 or stored[0][0] not in entry:  # taped once, where it is allocated
            continue
        pointer = stored[0][1].address() or ""
        field = _field_of(pointer, by_result)
        if field is not None and _only_stored_to(pointer, instructions):
            found.append(_TapedSlot(function.symbol, field[0], field[1], pointer))
    return found


def _frees(ins: Instruction, derived: set[str]) -> bool:
    """Whether ``ins`` may free (or reallocate) a pointer of ``derived``: a call of ``free`` or ``realloc``, or an
    indirect call, given one."""
    call = ins.call()
    return call is not None and (call.callee in ("@free", "@realloc") or call.callee.startswith("%")) and bool(
        set(call.values) & derived)


def _only_stored_to(pointer: str, instructions: list[Instruction]) -> bool:
    """Whether every instruction using ``pointer`` stores a value other than it to it."""
    return all(ins.opcode == "store" and ins.address() == pointer and ins.operands()[:1] != [pointer]
               for ins in instructions if pointer in ins.operands())


def _field_of(pointer: str | None, by_result: dict[str, Instruction]) -> tuple[str, int] | None:
    """(struct type, field) that ``pointer`` selects, where a ``getelementptr`` with indices ``0, field`` made it."""
    gep = by_result.get(pointer or "")
    if gep is None or gep.opcode != "getelementptr":
        return None
    selected = gep_selection(gep)
    if selected is None or len(selected[1]) != 2 or selected[1][0] != 0 or not selected[0].startswith("{"):
        return None
    return selected[0], selected[1][1]


def _reverse_pass(module: Module, tape: str) -> tuple[Function, str] | None:
    """The definition of ``module`` taking a parameter of type ``tape`` that reads it only by ``extractvalue``,
    with that parameter's name, where each other definition taking one (a wrapper's reverse pass) only passes it,
    in one call, to one such definition; None otherwise."""
    takers = {f.symbol: (f, p.name) for f in module.definitions for p in f.parameters if p.type == tape and p.name}
    readers = []
    for function, name in takers.values():
        uses = [ins for ins in map(parse_instruction, function.body or []) if ins is not None
                and name in ins.operands()]
        if all(ins.opcode == "extractvalue" and ins.operands() == [name] for ins in uses):
            readers.append((function, name or ""))
            continue
        call = uses[0].call() if len(uses) == 1 else None
        if call is None or call.callee not in takers or call.values.count(name or "") != 1:
            return None
    if len(readers) != 1 or not _frees_a_field(*readers[0]):
        return None
    return readers[0]


def _frees_a_field(function: Function, name: str) -> bool:
    """Whether ``function`` frees, with Enzyme's mark, a block it takes from its tape parameter ``name``: it is the
    reverse pass that frees that tape's blocks."""
    return any(marked for _, marked in extracted_frees(function, {name}))
