"""Addresses that are only compared (the vectorizer's overlap checks) computed by an inactive helper.

Instructions are read through :mod:`pyjlad.ir` (``parse_instruction``), not regular expressions.
"""

from __future__ import annotations

from . import runtime
from .ir.module import Instruction, parse_instruction

__all__ = ["ADDRESS_FUNCTION", "ADDRESS_DEFINITION", "opaque_address_comparisons"]

#: The address of a pointer as an integer, for comparisons only (see :func:`opaque_address_comparisons`).
#: Enzyme neither analyzes its body (``enzyme_ta_norecur``) nor differentiates it; the
#: optimizer after Enzyme inlines it back into a ``ptrtoint``.
ADDRESS_FUNCTION = "@pyjlad_address"
ADDRESS_DEFINITION = runtime.definitions("address.ll")[ADDRESS_FUNCTION]  # pyjlad/runtime/address.ll
#: Integer operations through which an address may flow on its way to a comparison.
_ADDRESS_ARITHMETIC = frozenset(
    "add sub mul shl lshr ashr and or xor udiv sdiv trunc zext sext freeze select phi".split()
)


def _compared_only(name: str, instructions: dict[int, Instruction], users: dict[str, list[int]]) -> bool:
    """Whether the integer ``name`` flows, through integer arithmetic only, into comparisons only."""
    pending, seen = [name], {name}
    while pending:
        for k in users.get(pending.pop(), ()):
            user = instructions[k]
            if user.result is None or user.opcode not in _ADDRESS_ARITHMETIC | {"icmp"}:
                return False
            if user.opcode != "icmp" and user.result not in seen:
                seen.add(user.result)
                pending.append(user.result)
    return True


def _address_of(instruction: Instruction) -> tuple[str, str] | None:
    """``(text before the opcode, pointer)`` of ``%x = ptrtoint ptr %p to i64``; ``None`` for any other line."""
    if instruction.opcode != "ptrtoint" or instruction.result is None:
        return None
    at = next(k for k, t in enumerate(instruction.tokens) if t.kind == "word" and t.text == "ptrtoint")
    before = "".join(t.text for t in instruction.tokens[:at])
    pointer = [t for t in instruction.tokens[at:] if t.kind != "ws"]
    if len(pointer) != 5 or pointer[2].kind != "local":
        return None
    written = instruction.text[len(before):].rstrip()
    if written != f"ptrtoint ptr {pointer[2].text} to i64" or before.strip() != f"{instruction.result} =":
        return None
    return before, pointer[2].text


def opaque_address_comparisons(define: str) -> tuple[str, bool]:
    """Compute addresses that are only compared through :data:`ADDRESS_FUNCTION`; return the
    function and whether it changed.

    The runtime checks of LLVM's loop vectorizer compare addresses as integers:
    ``ptrtoint`` of the source and destination, arithmetic, ``icmp`` ("do the two
    ranges overlap?"), e.g. ``(dst - src) + 8 * n < 128`` in the copy loops of
    ``np.concatenate`` and ``np.stack``. Enzyme's type analysis gives a
    ``ptrtoint`` the type of its pointer, and an ``add`` whose result is compared
    with a small constant (an integer) integers for both operands: the address is
    then both a pointer and an integer, and Enzyme aborts ("Illegal orIn:
    {[-1]:Integer} right: {[-1]:Pointer}"). Numba's own library functions are
    compiled (and vectorized) once per process, so the unvectorized copy Enzyme
    differentiates still links their vectorized loops. The same address, computed
    by a function Enzyme does not look into, is an integer of no known origin
    (and inactive: a comparison carries no derivative). Only ``ptrtoint`` whose
    value reaches nothing but comparisons is replaced; the module computes the
    same values.
    """
    if "ptrtoint" not in define:
        return define, False
    lines = define.split("\n")
    instructions = {k: i for k, line in enumerate(lines) if k > 0 and (i := parse_instruction(line))}
    users: dict[str, list[int]] = {}
    for k, instruction in instructions.items():
        for value in dict.fromkeys(instruction.operands()):
            users.setdefault(value, []).append(k)
    changed = False
    for k, instruction in instructions.items():
        address = _address_of(instruction)
        if address is not None and _compared_only(instruction.result, instructions, users):
            lines[k] = f"{address[0]}call i64 {ADDRESS_FUNCTION}(ptr {address[1]})"
            changed = True
    return ("\n".join(lines), True) if changed else (define, False)
