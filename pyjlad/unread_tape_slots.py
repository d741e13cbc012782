"""Stack slots Enzyme moved to the heap for a tape no reverse pass reads, put back on the stack.

Enzyme's augmented pass turns a stack slot (``alloca``) whose memory the reverse pass might need into a
``malloc`` (marked ``!enzyme_fromstack``) and stores its address in the tape, for the reverse pass to read and
free. Enzyme v0.0.289 does that to slots the reverse pass then never reads: the 72-byte result of
``numba_attempt_nocopy_reshape`` and two 8-byte slots of Numba's ``np.linalg.solve``. No reverse function
loads those tape fields, so nothing frees the blocks, and every gradient of a function calling ``solve`` lost
about 220 bytes (``tests/test_repeated_calls_memory.py``). A tape returned by value loses the same way: Enzyme
makes the result slot of a callee a zeroed block (``calloc``, no mark) and puts it in the tape with
``insertvalue``; nothing reads that field, and every gradient through ``np.percentile`` or ``np.quantile`` (the
slot of Numba's ``_collect_percentiles_inner``) lost 80 bytes.

:func:`unread_slots_on_the_stack` edits Enzyme's output (between Enzyme and the optimization after it:
:func:`pyjlad.engines.differentiate.run_enzyme`). Such a block becomes the ``alloca`` it was (zeroed again where it
was a ``calloc``) when:

* it has a constant size (at most :data:`_LARGEST_SLOT` bytes) and is allocated at most once per call (in the
  entry block, or in a block on no cycle, whose ``alloca`` goes to the entry block);
* its address stays in the function but for at most one tape field, stored through a ``getelementptr`` or
  inserted into an aggregate: no pointer computed from it is stored, returned or put in an aggregate otherwise;
  no call frees it; a function of the module given it (whose augmented pass could tape it) keeps it to itself,
  as far as its own body shows;
* no instruction of the module may read that field: an ``extractvalue`` or ``getelementptr`` of the tape's type
  selecting it, or one that reaches into a type holding the tape by more than one index, which is not followed.

The same rule returns to the stack an unfreed cache of Enzyme's (``!enzyme_cache_alloc``) allocated once per
call and kept in the function. The tape keeps an address nothing reads.

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
from .ir.cfg import ControlFlow, block_label
from .ir.lexer import split_top_level, tokenize, words
from .ir.module import parse_instruction
from .ir.value_types import element_at

__all__ = ["derived_pointers", "entry_block", "extract_selection", "extracted_frees", "frees_before_returns",
           "gep_selection", "operand_parts", "pointer_tapings", "read_fields", "unread_slots_on_the_stack"]

_FROM_STACK = "!enzyme_fromstack"
#: Enzyme's mark of a cache allocation (an unfreed one allocated once per call goes on the stack too).
_CACHE = "!enzyme_cache_alloc"
#: The largest slot put back on the stack (Enzyme's slots seen are 8 to 72 bytes).
_LARGEST_SLOT = 4096


@dataclass(frozen=True)
class _Slot:
    """An allocation of Enzyme's from a stack slot: its line in ``function``, size, whether it is zeroed
    (``calloc``), and the tape field it goes to (the tape's type as written, the field's index, and the
    ``getelementptr`` selecting it where it is stored to memory; None where ``insertvalue`` puts it into a tape
    returned by value)."""

    function: Function
    line: int
    result: str
    size: int
    zeroed: bool
    hoisted: bool
    tape_type: str | None
    field: int | None
    field_pointer: str | None


def unread_slots_on_the_stack(text: str) -> str:
    """``text`` (Enzyme's output, as IR text) with each ``!enzyme_fromstack`` allocation whose tape field nothing
    reads made an ``alloca`` again (see the module docstring); ``text`` itself where there is none."""
    if not any(_candidate(line) for line in text.splitlines()):
        return text
    try:
        module = parse(text, strict=False)
    except IRParseError:
        return text
    defined = {f.symbol: f for f in module.definitions}
    declared = {f.symbol: f for f in module.functions.values() if f.is_declaration}
    slots = [slot for f in module.definitions if any(_candidate(line) for line in f.body or ())
             for slot in _slots(f, defined, declared)]
    taped = [slot for slot in slots if slot.tape_type]
    read = read_fields(module, {slot.tape_type for slot in taped},
                        {(slot.function.symbol, slot.field_pointer) for slot in taped if slot.field_pointer})
    hoisted: dict[str, list[str]] = {}
    changed = False
    for slot in slots:
        fields = read.get(slot.tape_type, set()) if slot.tape_type is not None else set()
        if slot.field in fields or None in fields:
            continue
        assert slot.function.body is not None
        alloca = f"  {slot.result} = alloca i8, i64 {slot.size}, align 16"
        zeros = [f"  store [{slot.size} x i8] zeroinitializer, ptr {slot.result}, align 16"] if slot.zeroed else []
        if slot.hoisted:  # the alloca to the entry block, the zeros where the block was allocated
            hoisted.setdefault(slot.function.symbol, []).append(alloca)
            slot.function.body[slot.line] = "\n".join(zeros)
        else:
            slot.function.body[slot.line] = "\n".join([alloca, *zeros])
        changed = True
    for function in module.definitions:
        if function.symbol in hoisted and function.body is not None:
            at = entry_block(function.body).start
            function.body[at:at] = hoisted[function.symbol]
    return module.render() if changed else text


def entry_block(body: list[str]) -> range:
    """Indices of the entry block's lines in a definition's ``body`` (up to the second label)."""
    labels = [k for k, line in enumerate(body) if block_label(line) is not None]
    first = labels[0] + 1 if labels and labels[0] == 0 else 0
    following = [k for k in labels if k >= first]
    return range(first, following[0] if following else len(body))


def operand_parts(instruction: Instruction) -> list[str]:
    """The comma-separated parts after the opcode (metadata attachments included), each stripped."""
    return ["".join(t.text for t in part).strip() for part in split_top_level(instruction.after_opcode())]


def _slots(function: Function, defined: dict[str, Function], declared: dict[str, Function]) -> list[_Slot]:
    """The allocations of ``function`` (:func:`_heap_slot_size`) that no call frees and whose address stays in
    the function but for at most one tape field (:func:`_tape_field`), each in the entry block or in a block on
    no cycle of the control flow (allocated at most once per call); ``defined`` and ``declared``: the module's
    definitions and declarations by symbol."""
    body = function.body or []
    instructions = [ins for ins in map(parse_instruction, body) if ins is not None]
    entry = entry_block(body)
    cyclic: set[str] | None = None
    block = None
    found = []
    for k, line in enumerate(body):
        label = block_label(line)
        if label is not None:
            block = label
            continue
        if not _candidate(line):
            continue
        ins = parse_instruction(line)
        if ins is None or ins.result is None or ins.opcode != "call":
            continue
        size = _heap_slot_size(ins, line)
        if size is None:
            continue
        if k not in entry:
            cyclic = ControlFlow.of(body).blocks_on_cycles() if cyclic is None else cyclic
            if block is None or block in cyclic:
                continue
        # Enzyme's own slots of a stack's (the shape seen) may be given to any declared function, as before
        tape = _tape_field(ins.result, instructions, defined, None if _FROM_STACK in line else declared)
        if tape is not None:
            found.append(_Slot(function, k, ins.result, size, "@calloc" in line, k not in entry, *tape))
    return found


def _candidate(line: str) -> bool:
    """Whether ``line`` may allocate a slot :func:`_heap_slot_size` takes (a cheap test before parsing)."""
    return ("@malloc(i64 " in line and (_FROM_STACK in line or _CACHE in line)) or "@calloc(i64 " in line


def _heap_slot_size(ins: Instruction, line: str) -> int | None:
    """The bytes of a stack slot Enzyme moved to the heap: a ``malloc`` of a constant size marked
    ``!enzyme_fromstack``, or a ``calloc`` of one constant-sized block (Enzyme's zeroed copy of a slot whose
    address a callee writes its result through), at most :data:`_LARGEST_SLOT` bytes."""
    call = ins.call()
    if call is None:
        return None
    sizes = [words(tokenize(a)) for a in call.arguments]
    if not all(len(w) == 2 and w[0] == "i64" and w[1].isdigit() for w in sizes):
        return None
    counts = [int(w[1]) for w in sizes]
    if call.callee == "@malloc" and len(counts) == 1 and (_FROM_STACK in line or _CACHE in line):
        size = counts[0]
    elif call.callee == "@calloc" and len(counts) == 2 and 1 in counts:
        size = counts[0] * counts[1]
    else:
        return None
    return size if 0 < size <= _LARGEST_SLOT else None


_DERIVING = frozenset({"getelementptr", "bitcast", "addrspacecast", "select", "phi"})
_ESCAPING = frozenset({"ret", "ptrtoint", "atomicrmw", "cmpxchg", "invoke", "callbr"})


def derived_pointers(value: str, instructions: list[Instruction]) -> set[str]:
    """``value`` and every pointer computed from it (``getelementptr``, casts, ``select``, ``phi``), to a fixpoint
    (a ``phi`` may read a value defined further down)."""
    derived = {value}
    while True:
        grown = {ins.result for ins in instructions if ins.opcode in _DERIVING and ins.result is not None
                 and ins.result not in derived and set(ins.operands()) & derived}
        if not grown:
            return derived
        derived |= grown


def _tape_field(value: str, instructions: list[Instruction], defined: dict[str, Function],
                declared: dict[str, Function] | None) -> tuple[str | None, int | None, str | None] | None:
    """The tape field ``value`` (an allocation's result) goes to, as (type, index, field pointer or None), when its
    address stays in its function but for that field ((None, None, None) where it stays in the function
    altogether): at most one instruction lets it out, a store of ``value`` through a ``getelementptr`` of a
    struct's field or an ``insertvalue`` of ``value`` into an aggregate (a tape returned by value); no other store, ``insertvalue`` or ``ret`` lets it or a pointer derived from it out, no call
    frees it, no function of the module (``defined``) it is given lets it out (:func:`_stays_in_callee`: its
    augmented pass could tape it), and no function is called through a pointer with it."""
    tapings = pointer_tapings(derived_pointers(value, instructions), instructions, defined, set(), declared)
    if tapings == []:
        return None, None, None
    if tapings is None or len(tapings) != 1:
        return None
    taping = tapings[0]
    if taping.opcode == "insertvalue":
        parts = operand_parts(taping)
        if len(parts) < 3 or words(tokenize(parts[1])) != ["ptr", value]:
            return None
        indices = [int(p) for p in parts[2:] if p.isdigit()]
        holder = element_at(parts[0].rsplit(" ", 1)[0].strip(), indices[:-1])
        return None if holder is None or not indices else (holder, indices[-1], None)
    pointer = taping.address()
    if pointer is None or words(split_top_level(taping.after_opcode())[0]) != ["ptr", value]:
        return None
    gep = next((ins for ins in instructions if ins.result == pointer), None)
    if gep is None or gep.opcode != "getelementptr":
        return None
    selected = gep_selection(gep)
    if selected is None or len(selected[1]) != 2 or selected[1][0] != 0:
        return None
    return selected[0], selected[1][1], pointer


def pointer_tapings(derived: set[str], instructions: list[Instruction], defined: dict[str, Function],
                    seen: set[tuple[str, int]] | None = None,
                    declared: dict[str, Function] | None = None) -> list[Instruction] | None:
    """The stores and ``insertvalue`` instructions of ``instructions`` putting a pointer of ``derived`` (see
    :func:`derived_pointers`) into memory or an aggregate; None where one leaves otherwise (a ``ret``,
    ``ptrtoint``, atomic, ``free``/``realloc``, a call through a pointer, a function of the module, ``defined``,
    that lets it out: :func:`_stays_in_callee`; ``seen``: the parameters being looked at). With ``declared``
    (the module's declarations by symbol), a function declared only may be given it where it is an LLVM
    intrinsic or its parameter is marked as not capturing it."""
    seen = set() if seen is None else seen
    tapings = []
    for ins in instructions:
        if not set(ins.operands()) & derived:
            continue
        call = ins.call()
        if call is not None:
            if call.callee in ("@free", "@realloc") or call.callee.startswith("%"):
                return None
            callee = defined.get(call.callee)
            given = [k for k, passed in enumerate(call.values) if passed in derived]
            if callee is not None and not all(_stays_in_callee(callee, k, defined, seen, declared) for k in given):
                return None
            if callee is None and declared is not None and not call.callee.startswith("@llvm.") and not all(
                    _not_captured(declared.get(call.callee), k) for k in given):
                return None
        elif ins.opcode == "store":
            if words(split_top_level(ins.after_opcode())[0])[-1:] in ([d] for d in derived):
                tapings.append(ins)
        elif ins.opcode == "insertvalue":
            parts = operand_parts(ins)
            if len(parts) < 2 or words(tokenize(parts[1]))[-1:] in ([d] for d in derived):
                tapings.append(ins)
        elif ins.opcode in _ESCAPING:
            return None
    return tapings


def _not_captured(function: Function | None, position: int) -> bool:
    """Whether ``function``'s parameter ``position`` is marked as not capturing what it is given."""
    if function is None or position >= len(function.parameters):
        return False
    return bool({"nocapture", "captures(none)"} & set(function.parameters[position].attributes))


def _stays_in_callee(callee: Function, position: int, defined: dict[str, Function],
                     seen: set[tuple[str, int]], declared: dict[str, Function] | None = None) -> bool:
    """Whether ``callee`` keeps the pointer it is given as parameter ``position`` to itself: nothing it does
    stores it, puts it in an aggregate or lets it out otherwise (:func:`_tapings`, through the functions it
    calls; a call already being looked at is taken to keep it)."""
    if (callee.symbol, position) in seen:
        return True
    seen.add((callee.symbol, position))
    if position >= len(callee.parameters) or callee.parameters[position].name is None:
        return False
    instructions = [ins for ins in map(parse_instruction, callee.body or []) if ins is not None]
    derived = derived_pointers(callee.parameters[position].name, instructions)
    return pointer_tapings(derived, instructions, defined, seen, declared) == []


def gep_selection(ins: Instruction) -> tuple[str, list[int]] | None:
    """A ``getelementptr``'s source type and constant indices; ``None`` if an index is not a constant."""
    parts = operand_parts(ins)
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


def extract_selection(ins: Instruction) -> tuple[str, list[int]] | None:
    """An ``extractvalue``'s aggregate type and indices."""
    parts = operand_parts(ins)
    if not parts:
        return None
    aggregate = parts[0].rsplit(" ", 1)[0].strip()
    indices = [int(p) for p in parts[1:] if p.isdigit()]
    return aggregate, indices


def read_fields(module: Module, tapes: set[str], slot_pointers: set[tuple[str, str]]) -> dict[str, set[int | None]]:
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
                selected = gep_selection(ins)
                first_field = 1  # a getelementptr's first index steps over the pointer
            else:
                selected = extract_selection(ins)
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


def extracted_frees(function: Function, names: set[str]) -> list[tuple[list[int], bool]]:
    """The ``free`` calls of ``function`` of a value it extracts from an aggregate named in ``names`` (its tape
    parameters): each one's ``extractvalue`` indices, and whether it carries Enzyme's mark
    (``!enzyme_cache_free``)."""
    extracted: dict[str, list[int]] = {}
    found = []
    for ins in (i for i in map(parse_instruction, function.body or []) if i is not None):
        if ins.opcode == "extractvalue" and ins.result and len(ins.operands()) == 1 and ins.operands()[0] in names:
            selected = extract_selection(ins)
            extracted[ins.result] = selected[1] if selected is not None else []
        call = ins.call()
        if call is not None and call.callee == "@free" and call.values[:1] and call.values[0] in extracted:
            found.append((extracted[call.values[0]], "!enzyme_cache_free" in ins.text))
    return found


def frees_before_returns(function: Function, extracts: list[str], prefix: str, serial: list[int]) -> None:
    """Add to ``function``, before each ``ret``, an ``extractvalue`` of each of ``extracts`` (``<type> <value>,
    <indices>``, named ``<prefix><n>``, ``n`` counted by ``serial[0]``) and a ``free`` of it."""
    edited: list[str] = []
    for line in function.body or []:
        ins = parse_instruction(line)
        if ins is not None and ins.opcode == "ret":
            for extract in extracts:
                name = f"{prefix}{serial[0]}"
                serial[0] += 1
                edited += [f"  {name} = extractvalue {extract}", f"  call void @free(ptr {name})"]
        edited.append(line)
    function.body = edited
