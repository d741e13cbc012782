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

from collections.abc import Iterator, Mapping
from typing import Any

from .errors import UnsupportedFunctionError
from .ir import parse
from .ir.instructions import parse_instruction
from .ir.lexer import substitute, texts_of
from .ir.names import decode_name, symbol_for
from .ir.rewrite import map_items

__all__ = ["UNRESOLVED_PREFIX", "resolve_recursion", "unresolved_symbols"]

#: The prefix of the globals through which Numba calls a function it had not finished compiling.
UNRESOLVED_PREFIX = ".numba.unresolved$"


def _unresolved(symbol: str) -> str | None:
    """The function an ``@".numba.unresolved$<name>"`` symbol stands for; ``None`` for any other symbol."""
    name = decode_name(symbol)
    return name[len(UNRESOLVED_PREFIX):] if name.startswith(UNRESOLVED_PREFIX) else None


def unresolved_symbols(text: str) -> list[str]:
    """The symbols ``text`` calls through Numba's ``.numba.unresolved$`` pointers, in order of first mention."""
    return list(dict.fromkeys(name for name in map(_unresolved, texts_of(text, "global")) if name))


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


def _missing(text: str) -> list[str]:
    """The functions ``text`` calls through an ``unresolved`` pointer that it does not define."""
    defined = {decode_name(f.symbol) for f in parse(text).definitions}
    return [name for name in unresolved_symbols(text) if name not in defined]


def _without_pointer_loads(define: str) -> str:
    """One ``define`` with each load of an ``unresolved`` pointer removed and its value replaced by the function."""
    lines, kept, functions = define.split("\n"), [], {}
    for line in lines:
        instruction = parse_instruction(line) if UNRESOLVED_PREFIX in line else None
        targets = [name for name in map(_unresolved, texts_of(line, "global")) if name]
        if instruction is not None and instruction.opcode == "load" and instruction.result and targets:
            functions[instruction.result] = symbol_for(targets[0])
            continue
        kept.append(line)
    return substitute("\n".join(kept), "local", lambda value: functions.get(value, value)) if functions else define


def _direct_calls(text: str) -> str:
    """Each load of an ``unresolved`` pointer removed, its value replaced by the function, in its function."""
    module = parse(text)
    return map_items(module, _without_pointer_loads, where=lambda item: UNRESOLVED_PREFIX in item.render()).render()


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
    if UNRESOLVED_PREFIX not in text:  # the common case: no parse of the module on every export
        return text
    missing = _missing(text)
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
        missing = _missing(text)
    return _direct_calls(text)
