"""Stack slots Enzyme moved to the heap for a tape no reverse pass reads, put back on the stack.

Enzyme's augmented pass turns a stack slot (``alloca``) whose memory the reverse pass might need into a
``malloc`` (marked ``!enzyme_fromstack``) and stores its address in the tape, for the reverse pass to read and
free. Enzyme v0.0.289 does that to slots the reverse pass then never reads: the 72-byte result of
``numba_attempt_nocopy_reshape`` and two 8-byte slots of Numba's ``np.linalg.solve``. No reverse function
loads those tape fields, so nothing frees the blocks, and every gradient of a function calling ``solve`` lost
about 220 bytes (``tests/test_repeated_calls_memory.py``).

:func:`unread_slots_on_the_stack` edits Enzyme's output (between Enzyme and the optimization after it:
:func:`pyjlad.engines.differentiate.run_enzyme`): such a ``malloc`` in the entry block of its function becomes
the ``alloca`` it was when its address stays in the function but for one store into a tape field (no pointer
computed from it is stored, returned or put in an aggregate; no call frees it; none of the module's own
functions, whose augmented passes could tape it, is given it) and no instruction of the module may read that
field (an ``extractvalue`` or ``getelementptr`` of the tape's type selecting it, or one that reaches into a type
holding the tape by more than one index, which is not followed). The tape keeps an address nothing reads.

Examples
--------
>>> text = "\\n".join([
...     "define internal { ptr, i64 } @augmented_f(ptr %t) {", "entry:",
...     "  %malloccall = tail call noalias nonnull ptr @malloc(i64 72), !enzyme_cache_alloc !1, !enzyme_fromstack !2",
...     "  %s = getelementptr inbounds { ptr, i64 }, ptr %t, i32 0, i32 0",
...     "  store ptr %malloccall, ptr %s, align 8",
...     "  store i64 3, ptr %malloccall, align 8", "  ret { ptr, i64 } zeroinitializer", "}",
...     "define internal void @diffef({ ptr, i64 } %tapeArg) {", "entry:",
...     "  %n = extractvalue { ptr, i64 } %tapeArg, 1", "  ret void", "}", ""])
>>> print(unread_slots_on_the_stack(text).splitlines()[2])
  %malloccall = alloca i8, i64 72, align 16

Read by the reverse pass (field 0 extracted), the slot stays on the heap:

>>> read = text.replace("extractvalue { ptr, i64 } %tapeArg, 1", "extractvalue { ptr, i64 } %tapeArg, 0")
>>> unread_slots_on_the_stack(read) == read
True
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import IRParseError
from .ir import Function, Instruction, Module, parse
from .ir.cfg import block_label
from .ir.lexer import split_top_level, words
from .ir.module import parse_instruction

__all__ = ["unread_slots_on_the_stack"]

_FROM_STACK = "!enzyme_fromstack"


@dataclass(frozen=True)
class _Slot:
    """A ``malloc`` of Enzyme's from a stack slot: its line in ``function``, size, and the tape field it is
    stored into (the tape's type as written, the field's index, the ``getelementptr`` selecting it)."""

    function: Function
    line: int
    result: str
    size: int
    tape_type: str
    field: int
    field_pointer: str


def unread_slots_on_the_stack(text: str) -> str:
    """``text`` (Enzyme's output, as IR text) with each ``!enzyme_fromstack`` allocation whose tape field nothing
    reads made an ``alloca`` again (see the module docstring); ``text`` itself where there is none."""
    if _FROM_STACK not in text:
        return text
    try:
        module = parse(text, strict=False)
    except IRParseError:
        return text
    defined = {f.symbol for f in module.definitions}
    slots = [slot for f in module.definitions if any(_FROM_STACK in line for line in f.body or ())
             for slot in _slots(f, defined)]
    if not slots:
        return text
    read = _read_fields(module, {slot.tape_type for slot in slots},
                        {(slot.function.symbol, slot.field_pointer) for slot in slots})
    changed = False
    for slot in slots:
        if slot.field in read.get(slot.tape_type, ()) or None in read.get(slot.tape_type, ()):
            continue
        assert slot.function.body is not None
        slot.function.body[slot.line] = f"  {slot.result} = alloca i8, i64 {slot.size}, align 16"
        changed = True
    return module.render() if changed else text


def _entry_block(body: list[str]) -> range:
    """Indices of the entry block's lines in a definition's ``body`` (up to the second label)."""
    labels = [k for k, line in enumerate(body) if block_label(line) is not None]
    first = labels[0] + 1 if labels and labels[0] == 0 else 0
    following = [k for k in labels if k >= first]
    return range(first, following[0] if following else len(body))


def _parts(instruction: Instruction) -> list[str]:
    """The comma-separated parts after the opcode (metadata attachments included), each stripped."""
    return ["".join(t.text for t in part).strip() for part in split_top_level(instruction.after_opcode())]


def _slots(function: Function, defined: set[str]) -> list[_Slot]:
    """The from-stack allocations of ``function``'s entry block that go to a tape field and are never freed
    (``defined``: the symbols of the module's definitions)."""
    body = function.body or []
    instructions = [ins for ins in map(parse_instruction, body) if ins is not None]
    found = []
    for k in _entry_block(body):
        if _FROM_STACK not in body[k]:
            continue
        ins = parse_instruction(body[k])
        if ins is None or ins.result is None or ins.opcode != "call":
            continue
        call = ins.call()
        if call is None or call.callee != "@malloc" or len(call.arguments) != 1:
            continue
        size_words = call.arguments[0].split()
        if len(size_words) != 2 or size_words[0] != "i64" or not size_words[1].isdigit():
            continue
        tape = _tape_field(ins.result, instructions, defined)
        if tape is not None:
            found.append(_Slot(function, k, ins.result, int(size_words[1]), *tape))
    return found


_DERIVING = frozenset({"getelementptr", "bitcast", "addrspacecast", "select", "phi"})
_ESCAPING = frozenset({"insertvalue", "ret", "ptrtoint", "atomicrmw", "cmpxchg", "invoke", "callbr"})


def _derived(value: str, instructions: list[Instruction]) -> set[str]:
    """``value`` and every pointer computed from it (``getelementptr``, casts, ``select``, ``phi``), to a fixpoint
    (a ``phi`` may read a value defined further down)."""
    derived = {value}
    while True:
        grown = {ins.result for ins in instructions if ins.opcode in _DERIVING and ins.result is not None
                 and ins.result not in derived and set(ins.operands()) & derived}
        if not grown:
            return derived
        derived |= grown


def _tape_field(value: str, instructions: list[Instruction], defined: set[str]) -> tuple[str, int, str] | None:
    """The tape field ``value`` (a ``malloc``'s result) is stored into, as (type, index, field pointer), when its
    address stays in its function but for that field: exactly one store writes ``value`` to memory, through a
    ``getelementptr`` of a struct's field; no other store, ``insertvalue`` or ``ret`` lets it or a pointer derived
    from it out, no call frees it, and it is passed to no function ``defined`` in the module (whose own augmented
    pass could tape it) nor to one called through a pointer."""
    derived = _derived(value, instructions)
    stores = []
    for ins in instructions:
        if not set(ins.operands()) & derived:
            continue
        call = ins.call()
        if call is not None:
            if call.callee in ("@free", "@realloc") or call.callee in defined or call.callee.startswith("%"):
                return None
        elif ins.opcode == "store":
            if words(split_top_level(ins.after_opcode())[0])[-1:] in ([d] for d in derived):
                stores.append(ins)
        elif ins.opcode in _ESCAPING:
            return None
    pointer = stores[0].address() if len(stores) == 1 else None
    if pointer is None or words(split_top_level(stores[0].after_opcode())[0]) != ["ptr", value]:
        return None
    gep = next((ins for ins in instructions if ins.result == pointer), None)
    if gep is None or gep.opcode != "getelementptr":
        return None
    selected = _gep_selection(gep)
    if selected is None or len(selected[1]) != 2 or selected[1][0] != 0:
        return None
    return selected[0], selected[1][1], pointer


def _gep_selection(ins: Instruction) -> tuple[str, list[int]] | None:
    """A ``getelementptr``'s source type and constant indices; ``None`` if an index is not a constant."""
    parts = _parts(ins)
    if len(parts) < 2:
        return None
    source = parts[0].removeprefix("inbounds ").strip()
    indices = []
    for part in parts[2:]:
        if part.startswith("!"):
            break
        index = part.split()
        if len(index) != 2 or not index[1].lstrip("-").isdigit():
            return None
        indices.append(int(index[1]))
    return source, indices


def _extract_selection(ins: Instruction) -> tuple[str, list[int]] | None:
    """An ``extractvalue``'s aggregate type and indices."""
    parts = _parts(ins)
    if not parts:
        return None
    aggregate = parts[0].rsplit(" ", 1)[0].strip()
    indices = [int(p) for p in parts[1:] if p.isdigit()]
    return aggregate, indices


def _read_fields(module: Module, tapes: set[str], slot_pointers: set[tuple[str, str]]) -> dict[str, set[int | None]]:
    """For each tape type of ``tapes``: the fields some instruction of ``module`` may read (``None``: any field).

    A selection of the tape's own type reads the field its first struct index names (a ``getelementptr`` of
    one of the slots' own field pointers excepted); one that reaches into a type holding the tape by more than
    one index may read any of its fields."""
    read: dict[str, set[int | None]] = {}
    for function in module.definitions:
        for line in function.body or []:
            if ("extractvalue" not in line and "getelementptr" not in line) or not any(t in line for t in tapes):
                continue
            ins = parse_instruction(line)
            if ins is None or ins.opcode not in ("extractvalue", "getelementptr"):
                continue
            if ins.opcode == "getelementptr":
                if (function.symbol, ins.result) in slot_pointers:
                    continue
                selected = _gep_selection(ins)
                first_field = 1  # a getelementptr's first index steps over the pointer
            else:
                selected = _extract_selection(ins)
                first_field = 0
            for tape in tapes:
                if tape not in line:
                    continue
                if selected is None:
                    read.setdefault(tape, set()).add(None)
                    continue
                kind, indices = selected
                fields = indices[first_field:]
                if kind == tape:
                    read.setdefault(tape, set()).add(fields[0] if fields else None)
                elif len(fields) > 1:
                    read.setdefault(tape, set()).add(None)
    return read
