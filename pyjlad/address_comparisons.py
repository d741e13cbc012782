"""Addresses that are only compared (the vectorizer's overlap checks) computed by an inactive helper."""

from __future__ import annotations

import re

from . import runtime
from .excinfo_slots import _LOCAL

__all__ = ["ADDRESS_FUNCTION", "ADDRESS_DEFINITION", "opaque_address_comparisons"]

#: The address of a pointer as an integer, for comparisons only (see :func:`opaque_address_comparisons`).
#: Enzyme neither analyzes its body (``enzyme_ta_norecur``) nor differentiates it; the
#: optimizer after Enzyme inlines it back into a ``ptrtoint``.
ADDRESS_FUNCTION = "@pyjlad_address"
ADDRESS_DEFINITION = runtime.definitions("address.ll")[ADDRESS_FUNCTION]  # pyjlad/runtime/address.ll
_PTRTOINT_RE = re.compile(r"^(\s*(" + _LOCAL + r") = )ptrtoint ptr (" + _LOCAL + r") to i64\s*$")
_RESULT_RE = re.compile(r"^\s*(" + _LOCAL + r") = (\w+)")
_LOCAL_RE = re.compile(_LOCAL + r"(?![-a-zA-Z$._0-9])")
#: Integer operations through which an address may flow on its way to a comparison.
_ADDRESS_ARITHMETIC = frozenset(
    "add sub mul shl lshr ashr and or xor udiv sdiv trunc zext sext freeze select phi".split()
)


def _compared_only(name: str, lines: list[str], users: dict[str, list[int]]) -> bool:
    """Whether the integer ``name`` flows, through integer arithmetic only, into comparisons only."""
    pending, seen = [name], {name}
    while pending:
        for k in users.get(pending.pop(), ()):
            match = _RESULT_RE.match(lines[k])
            if match is None or match.group(2) not in _ADDRESS_ARITHMETIC | {"icmp"}:
                return False
            if match.group(2) != "icmp" and match.group(1) not in seen:
                seen.add(match.group(1))
                pending.append(match.group(1))
    return True


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
    lines = define.split("\n")
    users: dict[str, list[int]] = {}
    for k, line in enumerate(lines):
        defined = _RESULT_RE.match(line)
        operands = line[defined.end():] if defined else line
        for token in set(_LOCAL_RE.findall(operands)):
            users.setdefault(token, []).append(k)
    changed = False
    for k, line in enumerate(lines):
        match = _PTRTOINT_RE.match(line)
        if match and _compared_only(match.group(2), lines, users):
            lines[k] = f"{match.group(1)}call i64 {ADDRESS_FUNCTION}(ptr {match.group(3)})"
            changed = True
    return ("\n".join(lines), True) if changed else (define, False)


