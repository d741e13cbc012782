"""The frees of taped blocks that Enzyme's forward derivative of a reverse pass drops, put back.

A reverse pass that calls a function ``X`` runs ``X``'s augmented forward (``augmented_X``), which returns a tape
holding the blocks it allocated, and later ``X``'s reverse (``diffeX``), which reads them from the tape and frees
them (``free`` marked ``!enzyme_cache_free``). In the forward derivative of such a reverse pass (a vector-mode
``hessian``), Enzyme v0.0.289 differentiates both: ``fwddiffe<W>augmented_X`` allocates each block and its ``W``
tangents and returns them in a tape and ``W`` tangent tapes, and ``fwddiffe<W>diffeX``, given those, drops the
frees ``diffeX`` has. The growth of a list (``pyjlad_list_realloc.pointer``, a left call: inlined, Enzyme cannot
type the copies of a list of arrays' tangents) is such an ``X``: the vector-mode Hessian of a function growing a
list of arrays lost the list's buffers, ten 1,024-byte blocks per sweep at 12 inputs, 31,200 bytes per call
(``tests/test_repeated_calls_memory.py``).

:func:`forward_tape_frees_restored` edits Enzyme's output (between Enzyme and the optimization after it:
:func:`pyjlad.engines.differentiate.run_enzyme`). For a function ``fwddiffe<W>diffeX`` whose ``diffeX`` frees
field ``f`` of its tape (``extractvalue <T> %tapeArg, f``), it frees field ``f`` of the tape and of each tangent
tape before each ``ret``, when:

* it takes the tape (type ``T``) and the tangent tapes (``[W x T]``, or a second ``T`` where ``W`` is one) and
  frees nothing extracted from them;
* exactly one function ``fwddiffe<W>augmented_...`` returns a primal result and ``W`` tangent results holding a
  tape of type ``T`` (Enzyme's tape types are structs of its own), each built by ``insertvalue`` (through
  ``phi`` nodes), whose field ``f`` is, in the primal result and in each tangent, a block that function
  allocates (``malloc``), a different one in each, or null or undefined (through a ``phi``: made null, so that
  ``free`` does nothing where the block was not allocated).

Examples
--------
>>> tape = "{ ptr, i64 }"
>>> text = "\\n".join([
...     f"define internal {{ {tape}, [2 x {tape}] }} @fwddiffe2augmented_g(i64 %n) {{", "entry:",
...     "  %b = call ptr @malloc(i64 %n)", "  %b0 = call ptr @malloc(i64 %n)", "  %b1 = call ptr @malloc(i64 %n)",
...     f"  %t = insertvalue {tape} undef, ptr %b, 0", f"  %u = insertvalue {tape} %t, i64 %n, 1",
...     f"  %l0 = insertvalue {tape} zeroinitializer, ptr %b0, 0", f"  %l1 = insertvalue {tape} zeroinitializer, ptr %b1, 0",
...     f"  %a = insertvalue [2 x {tape}] undef, {tape} %l0, 0", f"  %c = insertvalue [2 x {tape}] %a, {tape} %l1, 1",
...     f"  %r = insertvalue {{ {tape}, [2 x {tape}] }} undef, {tape} %u, 0",
...     f"  %s = insertvalue {{ {tape}, [2 x {tape}] }} %r, [2 x {tape}] %c, 1",
...     f"  ret {{ {tape}, [2 x {tape}] }} %s", "}",
...     f"define internal void @diffeg(i64 %n, {tape} %tapeArg) {{", "entry:",
...     f"  %p = extractvalue {tape} %tapeArg, 0", "  call void @free(ptr %p), !enzyme_cache_free !1", "  ret void", "}",
...     f"define internal void @fwddiffe2diffeg(i64 %n, {tape} %tapeArg, [2 x {tape}] %\\"tapeArg'\\") {{", "entry:",
...     "  ret void", "}", "declare ptr @malloc(i64)", "declare void @free(ptr)", ""])
>>> print("\\n".join(forward_tape_frees_restored(text).splitlines()[23:30]))
  %pyjlad.tape.free.0 = extractvalue { ptr, i64 } %tapeArg, 0
  call void @free(ptr %pyjlad.tape.free.0)
  %pyjlad.tape.free.1 = extractvalue [2 x { ptr, i64 }] %"tapeArg'", 0, 0
  call void @free(ptr %pyjlad.tape.free.1)
  %pyjlad.tape.free.2 = extractvalue [2 x { ptr, i64 }] %"tapeArg'", 1, 0
  call void @free(ptr %pyjlad.tape.free.2)
  ret void

Where the first tangent's block is the primal's own, nothing is freed (it would be freed twice):

>>> same = text.replace("ptr %b0, 0", "ptr %b, 0")
>>> forward_tape_frees_restored(same) == same
True
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import IRParseError
from .ir import Function, Instruction, Module, parse
from .ir.module import parse_instruction
from .ir.value_types import element_at
from .unread_tape_slots import extracted_frees, frees_before_returns, operand_parts

__all__ = ["forward_tape_frees_restored"]

_FORWARD = "@fwddiffe"
_PREFIX = "%pyjlad.tape.free."  # the names of the fields extracted
_UNDEFINED = frozenset({"undef", "poison"})


@dataclass(frozen=True)
class _Tapes:
    """The tape parameters of a forward derivative of a reverse pass: the tape's type and name, the tangent
    tapes' type and name, and the width."""

    tape: str
    name: str
    tangents: str
    tangent_name: str
    width: int


def forward_tape_frees_restored(text: str) -> str:
    """``text`` (Enzyme's output, as IR text) with the frees of taped blocks put back in the forward derivatives
    of reverse passes that dropped them (see the module docstring); ``text`` itself where there are none."""
    if _FORWARD not in text or "!enzyme_cache_free" not in text or "augmented_" not in text or _PREFIX in text:
        return text
    try:
        module = parse(text, strict=False)
    except IRParseError:
        return text
    if "@free" not in module.functions:
        return text
    defined = {f.symbol: f for f in module.definitions}
    serial = [0]
    changed = False
    for function in module.definitions:
        reverse = _first_order(function.symbol, defined)
        tapes = _tape_parameters(function, reverse) if reverse is not None else None
        if reverse is None or tapes is None:
            continue
        fields = _fields_freed(reverse)
        producer = _producer(module, tapes)
        if not fields or producer is None or extracted_frees(function, {tapes.name, tapes.tangent_name}):
            continue
        nulled: dict[str, set[str]] = {}  # phi -> incoming blocks whose undefined value becomes null
        if not _blocks_or_null(producer, tapes, sorted(fields), nulled):
            continue
        _undefined_made_null(producer, nulled)
        _freed_before_returns(function, tapes, sorted(fields), serial)
        changed = True
    return module.render() if changed else text


def _first_order(symbol: str, defined: dict[str, Function]) -> Function | None:
    """``@diffeX`` for ``@fwddiffe<W>diffeX`` (``W`` digits or none), where ``module`` defines it."""
    if not symbol.startswith(_FORWARD):
        return None
    rest = symbol[len(_FORWARD):].lstrip("0123456789")
    return defined.get("@" + rest) if rest.startswith("diffe") else None


def _width(symbol: str) -> int:
    """``W`` of ``@fwddiffe<W>...`` (1 where no digits follow)."""
    rest = symbol[len(_FORWARD):]
    digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
    return int(digits) if digits else 1


def _tape_parameters(function: Function, reverse: Function) -> _Tapes | None:
    """The tape and tangent tape parameters of ``function``, the forward derivative of ``reverse`` (whose tape
    parameter is ``%tapeArg``); None where they are not there as expected."""
    tape = next((p.type for p in reverse.parameters if p.name == "%tapeArg"), None)
    if tape is None or not tape.startswith("{"):
        return None
    width = _width(function.symbol)
    tangents = f"[{width} x {tape}]" if width > 1 else tape
    found = [(p.type, p.name) for p in function.parameters if p.type in (tape, tangents) and p.name]
    if len(found) != 2 or found[0][0] != tape or found[1][0] != tangents:
        return None
    return _Tapes(tape, found[0][1] or "", tangents, found[1][1] or "", width)


def _fields_freed(reverse: Function) -> set[int]:
    """The fields of ``%tapeArg`` that ``reverse`` frees with Enzyme's mark."""
    return {path[0] for path, marked in extracted_frees(reverse, {"%tapeArg"}) if marked and len(path) == 1}


def _producer(module: Module, tapes: _Tapes) -> Function | None:
    """The one ``@fwddiffe<W>augmented_...`` definition returning ``{ R, [W x R] }`` (``{ R, R }`` for width one)
    with ``R`` the tape's type or a struct whose first element it is."""
    found = []
    for function in module.definitions:
        if not function.symbol.startswith(_FORWARD) or "augmented_" not in function.symbol:
            continue
        primal = element_at(function.return_type, [0])
        if primal is None or (primal != tapes.tape and element_at(primal, [0]) != tapes.tape):
            continue
        expected = f"[{tapes.width} x {primal}]" if tapes.width > 1 else primal
        if element_at(function.return_type, [1]) == expected:
            found.append(function)
    return found[0] if len(found) == 1 else None


def _paths(function: Function, tapes: _Tapes, field: int) -> list[list[int]]:
    """The index paths of field ``field`` of the tape in ``function``'s result: the primal's, then each tangent's."""
    inner = [] if element_at(function.return_type, [0]) == tapes.tape else [0]
    lanes = [[1, lane] for lane in range(tapes.width)] if tapes.width > 1 else [[1]]
    return [[0, *inner, field], *([*lane, *inner, field] for lane in lanes)]


def _blocks_or_null(producer: Function, tapes: _Tapes, fields: list[int], nulled: dict[str, set[str]]) -> bool:
    """Whether, at each ``ret`` of ``producer``, each field of ``fields`` of the tape and of each tangent tape is a
    block ``producer`` allocates and does not free, a different one in each, or null or undefined (the ``phi``
    incomings undefined added to ``nulled``)."""
    instructions = [ins for ins in map(parse_instruction, producer.body or []) if ins is not None]
    defining = {ins.result: ins for ins in instructions if ins.result is not None}
    returns = [ins for ins in instructions if ins.opcode == "ret"]
    if not returns:
        return False
    for ret in returns:
        returned = ret.operands()
        if len(returned) != 1:
            return False
        seen: set[str] = set()
        for path in (path for field in fields for path in _paths(producer, tapes, field)):
            leaves = _leaves(returned[0], path, defining, nulled, set())
            if leaves is None or leaves & seen:
                return False
            seen |= leaves
        if any(call.callee == "@free" and set(call.values) & seen for call in map(Instruction.call, instructions)
               if call is not None):
            return False
    return True


def _leaves(value: str, path: list[int], defining: dict[str, Instruction], nulled: dict[str, set[str]],
            visiting: set[tuple[str, tuple[int, ...]]]) -> set[str] | None:
    """The blocks (``malloc`` results) that the pointer at ``path`` in the aggregate ``value`` may be, where it is
    otherwise only null or undefined (a ``phi`` incoming undefined added to ``nulled``); None where it may be
    anything else."""
    key = (value, tuple(path))
    if key in visiting:
        return set()
    visiting.add(key)
    if value == "null" or (value == "zeroinitializer" and path):
        return set()
    ins = defining.get(value)
    if ins is None:
        return None
    if ins.opcode == "insertvalue" and path:
        parts = operand_parts(ins)
        indices = [int(p) for p in parts[2:] if p.isdigit()]
        inserted = parts[1].split()[-1] if len(parts) > 1 else ""
        aggregate = parts[0].split()[-1] if parts else ""
        if path[:len(indices)] == indices:
            return _leaves(inserted, path[len(indices):], defining, nulled, visiting)
        if indices[:len(path)] == path:
            return None  # part of the field overwritten: not a shape Enzyme writes
        if aggregate in _UNDEFINED or aggregate == "zeroinitializer":
            return set() if aggregate == "zeroinitializer" else None
        return _leaves(aggregate, path, defining, nulled, visiting)
    if ins.opcode == "phi":
        if not path and " = phi ptr [" not in ins.text:
            return None
        found: set[str] = set()
        for incoming, block in ins.phi_incoming():
            if incoming in _UNDEFINED and not path:
                nulled.setdefault(value, set()).add(block)
                continue
            leaves = _leaves(incoming, path, defining, nulled, visiting)
            if leaves is None:
                return None
            found |= leaves
        return found
    call = ins.call()
    if not path and call is not None and call.callee == "@malloc":
        return {value}
    return None


def _undefined_made_null(producer: Function, nulled: dict[str, set[str]]) -> None:
    """Rewrite each ``phi`` of ``nulled`` with null for its undefined incomings from the blocks listed."""
    body = producer.body or []
    for k, line in enumerate(body):
        ins = parse_instruction(line)
        if ins is None or ins.result not in nulled or f"{ins.result} = phi ptr [" not in line:
            continue
        incoming = ", ".join(f"[ {'null' if v in _UNDEFINED and b in nulled[ins.result] else v}, {b} ]"
                             for v, b in ins.phi_incoming())
        body[k] = f"  {ins.result} = phi ptr {incoming}"


def _freed_before_returns(function: Function, tapes: _Tapes, fields: list[int], serial: list[int]) -> None:
    """Free field ``f`` of each of ``function``'s tapes, for each ``f`` of ``fields``, before each ``ret``."""
    lanes = [f"{lane}, " for lane in range(tapes.width)] if tapes.width > 1 else [""]
    frees_before_returns(function, [extract for field in fields for extract in (
        f"{tapes.tape} {tapes.name}, {field}", *(f"{tapes.tangents} {tapes.tangent_name}, {lane}{field}" for lane in lanes))],
        _PREFIX, serial)
