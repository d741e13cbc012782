"""The top-level items of a parsed module, each a small dataclass that renders back to its line(s).

:class:`Line` (header lines, comments, blanks, comdats), :class:`TypeDefinition`,
:class:`GlobalVariable`, :class:`Function` (with its :class:`Parameter` list and body lines),
:class:`AttributeGroup` and :class:`Metadata`; :data:`Item` is any of them. They are read by
:mod:`pyjlad.ir.item_parser` and gathered in a :class:`~pyjlad.ir.module.Module`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .instructions import Call, Instruction, parse_instruction
from .lexer import decode_name

__all__ = [
    "Line", "Parameter", "Function", "GlobalVariable", "TypeDefinition", "AttributeGroup", "Metadata", "Item",
]


@dataclass
class Line:
    """A top-level line kept verbatim: ``kind`` is ``source_filename``, ``datalayout``, ``triple``,
    ``comment``, ``blank``, ``comdat``, ``module_asm`` or ``other``."""

    text: str
    kind: str

    def render(self) -> str:
        return self.text


@dataclass
class Parameter:
    """One parameter of a function header: ``<type> <attributes...> [<name>]``.

    Attributes
    ----------
    type : str
        The type as written (``ptr``, ``double``, ``{ i64, ptr }``, ``ptr addrspace(1)``).
    attributes : list of str
        Parameter attributes, one entry each (``noalias``, ``align 8``, ``dereferenceable(16)``,
        ``"enzyme_type"="..."``).
    name : str or None
        The local symbol (``%arg.x``, ``%"a b"``), ``None`` in a declaration without names.
    """

    type: str
    attributes: list[str] = field(default_factory=list)
    name: str | None = None

    def render(self) -> str:
        return " ".join([self.type, *self.attributes, *([self.name] if self.name else [])])

    @property
    def readonly(self) -> bool:
        """Whether an attribute says the function does not write through this pointer."""
        return bool({"readonly", "readnone"} & set(self.attributes))


@dataclass
class Function:
    """A ``define`` or ``declare``.

    The header is ``<keyword> <linkage...> <return_attributes...> <return_type> <symbol>(<parameters>[, ...])
    <attributes...>`` (then `` {``, the body lines and ``}`` for a definition).

    Attributes
    ----------
    keyword : str
        ``define`` or ``declare``.
    linkage : list of str
        Linkage, visibility and calling-convention words (:data:`~pyjlad.ir.item_parser.LINKAGE_WORDS`).
    return_attributes : list of str
        Attributes of the result (``noalias``, ``noundef``).
    return_type : str
    symbol : str
        ``@name`` as written (quoted if it needs quotes).
    parameters : list of Parameter
    varargs : bool
        Whether the parameter list ends with ``...``.
    attributes : list of str
        What follows the parameter list: ``local_unnamed_addr``, ``#0``, ``section``, ``".text"``, ...
    body : list of str or None
        The lines between the header and the closing ``}`` of a definition; ``None`` for a declaration.
    metadata : list of str
        The function's own metadata attachments, which LLVM's grammar puts after every attribute:
        ``["!dbg", "!6"]`` for Numba's ``debug=True`` (``NUMBA_DEBUGINFO``, ``NUMBA_ENABLE_PROFILING``).
        Kept apart so that attributes appended to :attr:`attributes` render before them.
    """

    keyword: str
    linkage: list[str]
    return_attributes: list[str]
    return_type: str
    symbol: str
    parameters: list[Parameter]
    varargs: bool
    attributes: list[str]
    body: list[str] | None = None
    metadata: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The function's name (no ``@``, quotes or escapes), as llvmlite reports it."""
        return decode_name(self.symbol)

    @property
    def is_declaration(self) -> bool:
        return self.body is None

    @property
    def is_internal(self) -> bool:
        """Whether the function is invisible outside its module (``internal``/``private``: the module holds every
        call of it)."""
        return any(word in ("internal", "private") for word in self.linkage)

    @property
    def attribute_group_refs(self) -> list[str]:
        """The ``#N`` attribute groups the header names."""
        return [a for a in self.attributes if a.startswith("#") and a[1:].isdigit()]

    def header(self) -> str:
        """The ``define``/``declare`` line."""
        params = [p.render() for p in self.parameters] + (["..."] if self.varargs else [])
        head = " ".join([self.keyword, *self.linkage, *self.return_attributes, self.return_type, self.symbol])
        tail = "".join(" " + a for a in [*self.attributes, *self.metadata])
        return f"{head}({', '.join(params)}){tail}" + (" {" if self.body is not None else "")

    def render(self) -> str:
        if self.body is None:
            return self.header()
        return "\n".join([self.header(), *self.body, "}"])

    def instructions(self) -> Iterator[Instruction]:
        """The instructions of the body, in order (labels, blank lines and comments skipped)."""
        for line in self.body or ():
            instruction = parse_instruction(line)
            if instruction is not None:
                yield instruction

    def calls(self) -> Iterator[Call]:
        """The call sites of the body, in order."""
        for instruction in self.instructions():
            call = instruction.call()
            if call is not None:
                yield call


@dataclass
class GlobalVariable:
    """``<symbol> = <linkage...> <kind> <value>``: a global variable, constant, alias or ifunc.

    ``value`` is the rest of the line as written: the type, the initializer (if any) and trailing
    ``, align N``/``, section ...`` parts.
    """

    symbol: str
    linkage: list[str]
    kind: str
    value: str

    @property
    def name(self) -> str:
        return decode_name(self.symbol)

    def render(self) -> str:
        return f"{self.symbol} = {' '.join([*self.linkage, self.kind])} {self.value}"


@dataclass
class TypeDefinition:
    """``%name = type <body>`` (``body``: ``{ i64, ptr }``, ``opaque``, ...)."""

    symbol: str
    body: str

    def render(self) -> str:
        return f"{self.symbol} = type {self.body}"


@dataclass
class AttributeGroup:
    """``attributes #N = { <attributes> }``; ``attributes`` one entry per attribute."""

    ref: str
    attributes: list[str]

    def render(self) -> str:
        inside = " ".join(self.attributes)
        return f"attributes {self.ref} = {{ {inside} }}" if inside else f"attributes {self.ref} = {{ }}"


@dataclass
class Metadata:
    """``!name = <value>`` (named metadata or a numbered node), value as written."""

    symbol: str
    value: str

    def render(self) -> str:
        return f"{self.symbol} = {self.value}"


Item = Line | Function | GlobalVariable | TypeDefinition | AttributeGroup | Metadata
