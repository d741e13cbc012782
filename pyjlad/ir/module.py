"""LLVM IR text as a small structured module, and back.

:func:`parse` reads the text LLVM prints (Numba's LLVM 22 IR, pyjlad's
portable LLVM 15 text, Enzyme driver modules) into a :class:`Module`: an
ordered list of top-level items (header lines, named types, globals,
functions, attribute groups, metadata, comments and blank lines), each a small
dataclass. :meth:`Module.render` writes it back; for every module LLVM or
pyjlad prints, ``parse(text).render() == text`` byte for byte (each item is
checked as it is parsed: an item whose fields do not render back to its own
text raises :class:`IRParseError` rather than being silently changed).

Function bodies are kept as lines; :meth:`Function.instructions` and
:meth:`Instruction.call` read them through the lexer (:mod:`pyjlad.ir.lexer`).

The parts: the items are in :mod:`pyjlad.ir.items`, the instructions of a body in
:mod:`pyjlad.ir.instructions`, the readers of one line in :mod:`pyjlad.ir.item_parser`; this
module gathers them into a :class:`Module` and re-exports them (every name is importable from
here as before).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IRLookupError, IRParseError
from .instructions import Call, Instruction, parse_instruction
from .item_parser import LINKAGE_WORDS, checked, parse_function_header, parse_item, parse_parameter
from .items import AttributeGroup, Function, GlobalVariable, Item, Line, Metadata, Parameter, TypeDefinition

__all__ = [
    "IRParseError", "Line", "Parameter", "Function", "GlobalVariable", "TypeDefinition", "AttributeGroup",
    "Metadata", "Instruction", "Call", "Item", "Module", "parse", "parse_parameter",
    "parse_instruction", "parse_function_header", "LINKAGE_WORDS",
]


@dataclass
class Module:
    """A parsed module: its items in order, and whether the text ended with a newline."""

    items: list[Item]
    trailing_newline: bool = True

    def render(self) -> str:
        text = "\n".join(item.render() for item in self.items)
        return text + "\n" if self.trailing_newline else text

    def _of(self, kind: type) -> list:
        return [item for item in self.items if isinstance(item, kind)]

    @property
    def functions(self) -> dict[str, Function]:
        """Definitions and declarations by symbol (the first of a repeated declaration)."""
        out: dict[str, Function] = {}
        for function in self._of(Function):
            out.setdefault(function.symbol, function)
        return out

    @property
    def definitions(self) -> list[Function]:
        return [f for f in self._of(Function) if not f.is_declaration]

    @property
    def declarations(self) -> list[Function]:
        return [f for f in self._of(Function) if f.is_declaration]

    @property
    def globals(self) -> dict[str, GlobalVariable]:
        return {g.symbol: g for g in self._of(GlobalVariable)}

    @property
    def types(self) -> dict[str, TypeDefinition]:
        return {t.symbol: t for t in self._of(TypeDefinition)}

    @property
    def attribute_groups(self) -> dict[str, AttributeGroup]:
        return {g.ref: g for g in self._of(AttributeGroup)}

    @property
    def metadata(self) -> dict[str, Metadata]:
        return {m.symbol: m for m in self._of(Metadata)}

    @property
    def header(self) -> list[Line]:
        """``source_filename``, ``target datalayout`` and ``target triple`` lines."""
        return [line for line in self._of(Line) if line.kind in ("source_filename", "datalayout", "triple")]

    def function(self, name: str) -> Function:
        """The function named ``name`` (without ``@``); a definition is preferred to a declaration.

        Raises
        ------
        KeyError
            If the module has no function of that name.
        """
        found = [f for f in self._of(Function) if f.name == name]
        if not found:
            raise IRLookupError(name)
        return next((f for f in found if not f.is_declaration), found[0])


def parse(text: str, *, strict: bool = True) -> Module:
    """Parse LLVM IR text into a :class:`Module` (``parse(text).render() == text``).

    Parameters
    ----------
    text : str
        A module as LLVM prints it: one top-level item per line, a definition's body
        ending at a line ``}``.
    strict : bool
        Raise on a top-level line of no known kind (otherwise it is kept as a ``Line``
        of kind ``other``).

    Raises
    ------
    IRParseError
        If a definition is not closed, an item cannot be read, or (with ``strict``) a
        top-level line is of no known kind.
    """
    lines = text.split("\n")
    trailing = lines[-1] == ""
    if trailing:
        lines.pop()
    items: list[Item] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("define "):
            function = parse_function_header(line)
            checked(function, line + "\n}")  # the header renders back (with an empty body)
            end = index + 1
            while end < len(lines) and lines[end] != "}":
                end += 1
            if end == len(lines):
                raise IRParseError(f"definition of {function.symbol} is never closed")
            function.body = lines[index + 1:end]
            items.append(function)
            index = end + 1
            continue
        items.append(parse_item(line, strict))
        index += 1
    return Module(items, trailing)
