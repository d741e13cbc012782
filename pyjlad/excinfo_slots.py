"""One type per stack slot: the exception slot a Numba call shares with an integer gets its own ``alloca``.

Instructions are read through :mod:`pyjlad.ir` (``parse_instruction``, tokens), not regular expressions.
"""

from __future__ import annotations

from .ir.cfg import ControlFlow
from .ir.lexer import Token, split_top_level, substitute, tokenize, words
from .ir.module import Instruction, parse_function_header, parse_instruction

__all__ = ["numba_abi_symbol", "split_result_slots", "split_shared_excinfo_slots"]


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


def _allocas(lines: list[str]) -> dict[str, int]:
    """The index in ``lines`` of each ``alloca``, by its result."""
    found: dict[str, int] = {}
    for k, line in enumerate(lines):
        if " = alloca " in line:
            instruction = parse_instruction(line)
            if instruction is not None and instruction.opcode == "alloca" and instruction.result is not None:
                found[instruction.result] = k
    return found


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
    allocas = _allocas(lines)
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


def _slot_use(line: str, slot: str, numba_functions: set[str]) -> str | None:
    """How ``line`` uses the stack slot ``slot``: ``"store"`` (a value stored into it), ``"load"``, ``"call"``
    (passed as a Numba function's result or exception pointer, its first or second argument), ``"marker"``
    (an ``llvm.lifetime`` marker); ``None`` for any other use (the slot's address stored, offset, compared,
    passed elsewhere)."""
    instruction = parse_instruction(line)
    if instruction is None:
        return None
    if instruction.opcode in ("load", "store"):
        parts = _operand_parts(instruction)
        address = [t for t in parts[1] if t.kind != "ws"] if len(parts) > 1 else []
        others = [t for part in (parts[:1] + parts[2:]) for t in part if t.kind == "local" and t.text == slot]
        if [t.text for t in address] == ["ptr", slot] and not others and not (
                instruction.opcode == "load" and instruction.result == slot):
            return instruction.opcode
        return None
    call = instruction.call()
    if call is None:
        return None
    if call.callee.startswith("@llvm.lifetime."):
        return "marker"
    if call.callee in numba_functions and call.values.count(slot) == 1 and slot in call.values[:2]:
        return "call"
    return None


#: The types of an 8-byte word: a slot of one of them, stored one of them, is overwritten whole.
_WORD_TYPES = ("ptr", "i64", "double")


def _allocated_type(line: str) -> str:
    """The type an ``alloca`` line allocates (``ptr`` in ``%r = alloca ptr, align 8``)."""
    return line.split(" = alloca ", 1)[1].split(",", 1)[0].strip()


def _webs(kinds: dict[int, str], graph: ControlFlow, first_line: dict[str, int], lines: list[str]) -> list[list[int]] | None:
    """The accesses of a slot (line index -> :func:`_slot_use`'s kind, lifetime markers left out) grouped into
    webs: each store or call that writes the slot, with every access its value can reach through the control
    flow (a store of a whole word ends what came before), joined where their values meet. No value crosses
    from one web to another. The web of the slot's value before any store comes first, if used. ``None`` for a
    store that writes only part of the slot."""
    accesses = sorted(k for k, kind in kinds.items() if kind != "marker")
    for k in accesses:
        if kinds[k] == "store":
            stored = parse_instruction(lines[k])
            if stored is None or words(_operand_parts(stored)[0])[:1] not in ([t] for t in _WORD_TYPES):
                return None
    parent = {k: k for k in [-1, *accesses]}  # -1: the slot's value on entry (never stored)

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def join(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    def block_accesses(block: str) -> list[int]:
        start = first_line[block]
        return [k for k in accesses if start <= k < start + len(graph.lines[block])]

    order = graph.reverse_post_order()
    preds = graph.predecessors()
    out: dict[str, frozenset[int]] = {name: frozenset() for name in order}
    changed = True
    while changed:
        changed = False
        for name in order:
            live = frozenset({-1}) if name == order[0] else frozenset().union(*(out[p] for p in preds[name]))
            for k in block_accesses(name):
                if kinds[k] != "load":
                    live = frozenset({k})  # a store or a call writes the slot
            if live != out[name]:
                out[name], changed = live, True
    for name in order:
        live = frozenset({-1}) if name == order[0] else frozenset().union(*(out[p] for p in preds[name]))
        for k in block_accesses(name):
            if kinds[k] != "store":  # a load, or a call (it reads what reaches it and writes into the same web)
                for d in live:
                    join(k, d)
            if kinds[k] != "load":
                live = frozenset({k})
    webs: dict[int, list[int]] = {}
    for k in accesses:
        webs.setdefault(find(k), []).append(k)
    entry_web = find(-1)
    return sorted(webs.values(), key=lambda ks: (find(ks[0]) != entry_web, ks[0]))


def split_result_slots(define: str, numba_functions: set[str]) -> str:
    """Give each block's use of a stack slot that Numba calls return through its own ``alloca``.

    A Numba function returns its result through a pointer (``retptr``); the caller stores null in a stack
    slot, passes it, and loads the result from it. Where Numba's callees stay out of line (its debug
    information marks them ``noinline``), LLVM let one slot serve the calls of several inlined wrappers: the
    meminfo of a ``float64`` array and then of a ``bool`` one went through the same ``alloca ptr``
    (``y[x < 0] = 0.0``), and Enzyme's type analysis, which gives a slot one type for the whole function,
    failed ("Illegal updateAnalysis"); so did a slot that returned a broadcast shape (an integer) and then
    an array. When every use of a slot is a store of a whole word into it, a load from it, a Numba call
    taking it as its result or exception pointer (which Numba's callees never keep) or a lifetime marker,
    its accesses fall into webs (:func:`_webs`: a value written and every access it reaches) between which
    no value crosses; where two webs or more hold a call, each web after the first gets a fresh ``alloca``
    of the same type (the same program with more stack slots).

    >>> print(split_result_slots('''define i32 @f() {
    ... entry:
    ...   %r = alloca ptr, align 8
    ...   store ptr null, ptr %r, align 8
    ...   %s = call i32 @g(ptr nonnull %r, ptr null)
    ...   %a = load ptr, ptr %r, align 8
    ...   br label %next
    ... next:
    ...   store ptr null, ptr %r, align 8
    ...   %t = call i32 @h(ptr nonnull %r, ptr null)
    ...   %b = load ptr, ptr %r, align 8
    ...   ret i32 0
    ... }''', {"@g", "@h"}))
    define i32 @f() {
    entry:
      %r = alloca ptr, align 8
      %r.pyjlad.slot1 = alloca ptr, align 8
      store ptr null, ptr %r, align 8
      %s = call i32 @g(ptr nonnull %r, ptr null)
      %a = load ptr, ptr %r, align 8
      br label %next
    next:
      store ptr null, ptr %r.pyjlad.slot1, align 8
      %t = call i32 @h(ptr nonnull %r.pyjlad.slot1, ptr null)
      %b = load ptr, ptr %r.pyjlad.slot1, align 8
      ret i32 0
    }
    """
    lines = define.split("\n")
    allocas = _allocas(lines)
    if not allocas or not numba_functions:
        return define
    graph = ControlFlow.of(lines[1:-1])
    first_line, offset = {}, 1
    for name in graph.names:  # the index in ``lines`` of each block's first line
        first_line[name] = offset
        offset += len(graph.lines[name])
    uses: dict[str, list[int]] = {}
    alloca_lines = set(allocas.values())
    for k, line in enumerate(lines[1:-1], start=1):
        if "%" not in line or k in alloca_lines:
            continue
        instruction = parse_instruction(line)
        if instruction is not None:
            for value in dict.fromkeys(instruction.operands()):
                if value in allocas:
                    uses.setdefault(value, []).append(k)
    for slot, at in allocas.items():
        kinds = {k: _slot_use(lines[k], slot, numba_functions) for k in uses.get(slot, [])}
        if None in kinds.values() or _allocated_type(lines[at]) not in _WORD_TYPES:
            continue
        groups = _webs(kinds, graph, first_line, lines)
        if groups is None or sum(1 for ks in groups if any(kinds[k] == "call" for k in ks)) < 2:
            continue
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        added = []
        for n, ks in enumerate(groups[1:], start=1):
            fresh = slot + f".pyjlad.slot{n}" if not slot.endswith('"') else slot[:-1] + f'.pyjlad.slot{n}"'
            for k in ks:
                lines[k] = substitute(lines[k], "local", lambda t, s=slot, f=fresh: f if t == s else t)
            added.append(f"{indent}{fresh} = " + lines[at].lstrip().split(" = ", 1)[1])
        lines[at] = "\n".join([lines[at], *added])
    return "\n".join(lines)
