"""One type per stack slot: the exception slot a Numba call shares with an integer gets its own ``alloca``.

Instructions are read through :mod:`pyjlad.ir` (``parse_instruction``, tokens), not regular expressions.
"""

from __future__ import annotations

from .ir.lexer import Token, split_top_level, tokenize, words
from .ir.module import Instruction, parse_function_header, parse_instruction

__all__ = ["numba_abi_symbol", "split_shared_excinfo_slots"]


def numba_abi_symbol(define: str) -> str | None:
    """The ``@`` symbol of a definition with Numba's calling convention, ``i32 @f(ptr %retptr, ptr %excinfo,
    args...)``; ``None`` for any other function.

    >>> numba_abi_symbol("define i32 @f(ptr noalias nocapture %retptr, ptr noalias %excinfo, double %x) {")
    '@f'
    >>> numba_abi_symbol("define double @g(double %x) {") is None
    True

    Parameter attributes holding a comma count as attributes: the regular expression this replaces
    (``ptr [^,]*%retptr``) missed ``ptr initializes((0, 8)) %retptr``, which LLVM 22 writes on
    functions that store their result unconditionally.

    >>> numba_abi_symbol("define i32 @h(ptr initializes((0, 8)) %retptr, ptr readnone %excinfo) {")
    '@h'
    """
    if not define.startswith("define"):
        return None
    function = parse_function_header(define.split("\n", 1)[0])
    first = function.parameters[:2]
    if [(p.type, p.name) for p in first] != [("ptr", "%retptr"), ("ptr", "%excinfo")]:
        return None
    return function.symbol


def _operand_parts(instruction: Instruction) -> list[list[Token]]:
    """The top-level comma-separated parts after the opcode (``load``: type, address, ...;
    ``store``: value, address, ...)."""
    tokens = list(instruction.tokens)
    at = next(k for k, t in enumerate(tokens) if t.text == instruction.opcode and t.kind == "word")
    return split_top_level(tokens[at + 1:])


def _text(tokens: list[Token]) -> str:
    return "".join(t.text for t in tokens)


def _slot_access(line: str, allocas: dict[str, int]) -> tuple[str, bool] | None:
    """``(slot, is_pointer)`` for a ``load``/``store`` whose address is an ``alloca`` of ``allocas``:
    whether the value loaded or stored is a ``ptr``; ``None`` for any other line."""
    if "load " not in line and "store " not in line:
        return None
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode not in ("load", "store"):
        return None
    if instruction.opcode == "load" and instruction.result is None:
        return None
    parts = _operand_parts(instruction)
    if len(parts) < 2:
        return None
    address = [t for t in parts[1] if t.kind != "ws"]
    if len(address) != 2 or address[1].kind != "local" or address[1].text not in allocas:
        return None
    written = _text(parts[1]).rstrip() if len(parts) == 2 else _text(parts[1])
    if written != " ptr " + address[1].text:
        return None
    value = words(parts[0])
    pointer = _text(parts[0]) == " ptr" if instruction.opcode == "load" else value[:1] == ["ptr"]
    return address[1].text, pointer


def _renamed_address(line: str, slot: str, fresh: str) -> str:
    """``line`` (a ``load``/``store`` of ``slot``) with its address operand ``slot`` renamed ``fresh``."""
    instruction = parse_instruction(line)
    assert instruction is not None
    tokens = list(instruction.tokens)
    at = next(k for k, t in enumerate(tokens) if t.text == instruction.opcode and t.kind == "word")
    commas = 0
    depth = 0
    for k in range(at + 1, len(tokens)):
        token = tokens[k]
        if token.kind == "punct" and token.text in "([{<":
            depth += 1
        elif token.kind == "punct" and token.text in ")]}>":
            depth -= 1
        elif depth == 0 and token.kind == "punct" and token.text == ",":
            commas += 1
        elif commas == 1 and token.kind == "local" and token.text == slot:
            tokens[k] = Token("local", fresh)
            break
    return _text(tokens)


def _excinfo_argument(line: str, numba_functions: set[str]) -> tuple[str, int] | None:
    """For a call of a function of ``numba_functions``: its ``excinfo`` argument (the second) and the index
    of that argument's value token in ``tokenize(line)``; ``None`` for any other line."""
    if "call " not in line:
        return None
    instruction = parse_instruction(line)
    call = instruction.call() if instruction is not None else None
    if call is None or call.callee not in numba_functions or len(call.arguments) < 2:
        return None
    tokens = list(instruction.tokens)
    callee = next(k for k, t in enumerate(tokens) if t.text == call.callee and tokens[k + 1].text == "(")
    parts = split_top_level(tokens[callee + 2:])
    value = [k for k, t in enumerate(parts[1]) if t.kind != "ws"]
    if not value:
        return None
    offset = callee + 2 + len(parts[0]) + 1
    return parts[1][value[-1]].text, offset + value[-1]


def split_shared_excinfo_slots(define: str, numba_functions: set[str]) -> str:
    """Give the exception slots of calls to Numba functions their own ``alloca``.

    When Numba's function calls another Numba function, it passes a stack slot
    (``alloca ptr``) as ``excinfo``: it stores null there, and loads a pointer to
    the exception's description from it when the call fails. LLVM may let one
    ``alloca`` serve several allocas whose lifetimes are disjoint (its
    ``llvm.lifetime.start/end`` markers, dropped here, delimit them). In
    ``np.linalg.solve`` with a vector ``b`` the excinfo slot of the call to
    ``np.asfortranarray`` shares an ``alloca [1 x i64]`` with the ``newshape``
    that ``numba_attempt_nocopy_reshape`` writes when the result is raveled: the
    same memory holds a pointer first and a shape later. Enzyme's type analysis
    gives each memory location one type for the whole function, so the shape
    loaded from the slot (stored to the result's ``shape[0]``, an integer) is
    inferred to be a pointer and the analysis fails ("Illegal updateAnalysis").

    Numba accesses an excinfo slot only as a pointer (and only from the caller
    and through the call), while the integer loads and stores belong to the other
    lifetimes. So when a slot passed as ``excinfo`` is also loaded or stored as a
    non-pointer, its pointer loads/stores and its ``excinfo`` arguments move to a
    fresh ``alloca ptr``: the same program with one more stack slot, in which
    every slot has one type.
    """
    lines = define.split("\n")
    allocas: dict[str, int] = {}
    for k, line in enumerate(lines):
        if " = alloca " in line:
            instruction = parse_instruction(line)
            if instruction is not None and instruction.opcode == "alloca" and instruction.result is not None:
                allocas[instruction.result] = k
    if not allocas:
        return define
    excinfo_uses: dict[str, list[int]] = {}
    for k, line in enumerate(lines):
        argument = _excinfo_argument(line, numba_functions)
        if argument is not None and argument[0] in allocas:
            excinfo_uses.setdefault(argument[0], []).append(k)
    if not excinfo_uses:
        return define
    accesses = {k: access for k, line in enumerate(lines) if (access := _slot_access(line, allocas))}
    for slot, call_lines in excinfo_uses.items():
        if not any(access == (slot, False) for access in accesses.values()):
            continue
        fresh = slot + ".pyjlad.excinfo" if not slot.endswith('"') else slot[:-1] + '.pyjlad.excinfo"'
        for k, access in accesses.items():
            if access == (slot, True):
                lines[k] = _renamed_address(lines[k], slot, fresh)
        for k in call_lines:
            argument = _excinfo_argument(lines[k], numba_functions)
            assert argument is not None
            tokens = tokenize(lines[k])
            tokens[argument[1]] = Token("local", fresh)
            lines[k] = _text(tokens)
        at = allocas[slot]
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        lines[at] += f"\n{indent}{fresh} = alloca ptr, align 8"
    return "\n".join(lines)
