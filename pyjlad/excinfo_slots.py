"""One type per stack slot: the exception slot a Numba call shares with an integer gets its own ``alloca``."""

from __future__ import annotations

import re

from .ir.downlevel import split_top_level

__all__ = ["NUMBA_ABI_DEFINE_RE", "split_shared_excinfo_slots"]

# A global symbol: @name or @"quoted name".
_SYMBOL = r'@(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
# Numba's calling convention: ``i32 @f(ptr %retptr, ptr %excinfo, args...)``.
NUMBA_ABI_DEFINE_RE = re.compile(r"^define\b[^@]*?(" + _SYMBOL + r")\(ptr [^,]*%retptr, ptr [^,]*%excinfo\b")
_LOCAL = r'%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
_ALLOCA_RE = re.compile(r"^\s*(" + _LOCAL + r") = alloca ")
_CALL_RE = re.compile(r"\bcall [^@]*?(" + _SYMBOL + r")\((.*)\)")


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
    allocas = {m.group(1): k for k, line in enumerate(lines) if (m := _ALLOCA_RE.match(line))}
    if not allocas:
        return define
    excinfo_uses: dict[str, list[int]] = {}
    for k, line in enumerate(lines):
        call = _CALL_RE.search(line)
        if call is None or call.group(1) not in numba_functions:
            continue
        args = split_top_level(call.group(2))
        if len(args) >= 2:
            slot = args[1].split()[-1] if args[1].split() else ""
            if slot in allocas:
                excinfo_uses.setdefault(slot, []).append(k)
    for slot, call_lines in excinfo_uses.items():
        name = re.escape(slot) + r"(?=,|\s*$)"  # the address operand, last before the alignment
        pointer_access = re.compile(r"^\s*(?:" + _LOCAL + r" = load ptr, ptr |store ptr .*, ptr )" + name)
        other_access = re.compile(r"^\s*(?:" + _LOCAL + r" = load (?!ptr,).*?, ptr |store (?!ptr ).*, ptr )"
                                  + name)
        if not any(other_access.match(line) for line in lines):
            continue
        fresh = slot + ".pyjlad.excinfo" if not slot.endswith('"') else slot[:-1] + '.pyjlad.excinfo"'
        for k, line in enumerate(lines):
            match = pointer_access.match(line)
            if match:
                lines[k] = line[:match.end() - len(slot)] + fresh + line[match.end():]
        for k in call_lines:
            call = _CALL_RE.search(lines[k])
            assert call is not None
            args = split_top_level(call.group(2))
            args[1] = args[1].rstrip()[: -len(slot)] + fresh
            start, end = call.span(2)
            lines[k] = lines[k][:start] + ",".join(args) + lines[k][end:]
        at = allocas[slot]
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        lines[at] += f"\n{indent}{fresh} = alloca ptr, align 8"
    return "\n".join(lines)


