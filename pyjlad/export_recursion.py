"""Recursive calls made direct: Numba calls a function that recursion is still compiling through a pointer.

When type inference meets a recursive call (``recur(n - 1, x)`` inside ``recur``, or a call into a
function whose compilation is under way), Numba compiles the call as a load of the global
``@".numba.unresolved$<symbol>"`` and an indirect call through it; the JIT stores the function's address
there when it links the library. The library's IR neither defines ``<symbol>`` nor knows what the
pointer holds, and Enzyme cannot differentiate through it ("cannot compute with global variable that
doesn't have marked shadow global").

:func:`resolve_recursion` links the IR of the Numba library that defines each such symbol into the
module (found among the compile results of the ``@njit`` functions the function calls, transitively) and
turns each load of the pointer into the function itself, so that the call is direct and Enzyme
differentiates the recursion like any other call.

Examples
--------
>>> unresolved_symbols('@".numba.unresolved$_ZN4main5recurExd" = external global ptr')
['_ZN4main5recurExd']
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import UnsupportedFunctionError

__all__ = ["UNRESOLVED_PREFIX", "resolve_recursion", "unresolved_symbols"]

#: The prefix of the globals through which Numba calls a function it had not finished compiling.
UNRESOLVED_PREFIX = ".numba.unresolved$"
_UNRESOLVED_RE = re.compile(r'@"' + re.escape(UNRESOLVED_PREFIX) + r'([^"]+)"')
_LOAD_RE = re.compile(r'^\s*(%[-\w.$]+|%"[^"]+") = load ptr, ptr @"' + re.escape(UNRESOLVED_PREFIX)
                      + r'([^"]+)"[^\n]*\n', re.M)


def unresolved_symbols(text: str) -> list[str]:
    """The symbols ``text`` calls through Numba's ``.numba.unresolved$`` pointers, in order of first mention."""
    return list(dict.fromkeys(_UNRESOLVED_RE.findall(text)))


def _called_dispatchers(cres: Any) -> Iterator[Any]:
    """The ``@njit`` dispatchers ``cres``'s typed IR calls."""
    annotation = getattr(cres, "type_annotation", None)
    for typ in (annotation.typemap.values() if annotation is not None else ()):
        dispatcher = getattr(typ, "dispatcher", None)
        if dispatcher is not None and hasattr(dispatcher, "overloads"):
            yield dispatcher


def _libraries_by_symbol(cres: Any) -> dict[str, Any]:
    """Mangled name -> Numba library, for every compile result of the functions ``cres`` calls, transitively."""
    found: dict[str, Any] = {}
    pending, seen = [cres], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        fndesc = getattr(current, "fndesc", None)
        if fndesc is not None:
            found.setdefault(fndesc.mangled_name, current.library)
        for dispatcher in _called_dispatchers(current):
            pending.extend(dispatcher.overloads.values())
    return found


def _defines(text: str, symbol: str) -> bool:
    return re.search(r"^define [^\n]*@" + re.escape(symbol) + r"\(", text, re.M) is not None


def _direct_calls(text: str) -> str:
    """Each load of an ``unresolved`` pointer removed, its value replaced by the function, in its function."""
    parts = re.split(r"(?m)^(?=define )", text)
    for k, part in enumerate(parts):
        loads = list(_LOAD_RE.finditer(part))
        if not loads:
            continue
        for load in loads:
            part = part.replace(load.group(0), "", 1)
            value = re.escape(load.group(1))
            part = re.sub(value + r'(?![-\w.$"])', "@" + load.group(2), part)
        parts[k] = part
    return "".join(parts)


def resolve_recursion(text: str, cres: Any, name: str, texts: Mapping[Any, str] | None = None) -> str:
    """``text`` (a Numba library's IR) with every function it calls through an ``unresolved`` pointer linked in
    and called directly.

    Parameters
    ----------
    text : str
        The library's LLVM IR (Numba's LLVM version).
    cres : CompileResult
        The compile result ``text`` belongs to: the functions it calls, transitively, are searched for the
        definitions.
    name : str
        The function, for messages.
    texts : mapping, optional
        ``id(library)`` -> the IR to use for that library instead of ``library.get_llvm_str()`` (as the
        optimizer left it, before code generation: see :func:`pyjlad.export_ir.ir_before_codegen`).

    Raises
    ------
    UnsupportedFunctionError
        If the function a pointer stands for is found in no compile result.
    """
    missing = [s for s in unresolved_symbols(text) if not _defines(text, s)]
    if not missing:
        return _direct_calls(text) if unresolved_symbols(text) else text
    import llvmlite.binding as llvm

    libraries = _libraries_by_symbol(cres)
    module = llvm.parse_assembly(text)
    linked: set[int] = set()
    while missing:
        symbol = missing[0]
        library = libraries.get(symbol)
        if library is None or id(library) in linked:
            raise UnsupportedFunctionError(
                f"{name} calls a function recursively that pyjlad could not find the compiled code of ({symbol}); "
                "write the recursion as a loop")
        linked.add(id(library))
        other = (texts or {}).get(id(library)) or library.get_llvm_str()
        module.link_in(llvm.parse_assembly(other))
        text = str(module)
        missing = [s for s in unresolved_symbols(text) if not _defines(text, s)]
    return _direct_calls(text)
