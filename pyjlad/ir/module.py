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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import IRLookupError, IRParseError
from .lexer import Token, closing, decode_name, split_top_level, tokenize, words

__all__ = [
    "IRParseError", "Line", "Parameter", "Function", "GlobalVariable", "TypeDefinition", "AttributeGroup",
    "Metadata", "Instruction", "Call", "Item", "Module", "parse", "parse_parameter",
]

#: Words of a function header before its return type that are not return attributes: linkage,
#: preemption, visibility, DLL storage and calling convention.
LINKAGE_WORDS = frozenset({
    "private", "internal", "available_externally", "linkonce", "weak", "common", "appending", "extern_weak",
    "linkonce_odr", "weak_odr", "external", "dso_local", "dso_preemptable", "hidden", "protected", "default",
    "dllimport", "dllexport", "ccc", "fastcc", "coldcc", "tailcc", "swiftcc", "swifttailcc", "cfguard_checkcc",
    "preserve_mostcc", "preserve_allcc", "ghccc", "webkit_jscc", "anyregcc", "x86_stdcallcc", "x86_fastcallcc",
    "x86_vectorcallcc", "x86_64_sysvcc", "win64cc", "spir_func", "spir_kernel", "ptx_kernel", "ptx_device",
    "amdgpu_kernel", "thread_local", "unnamed_addr", "local_unnamed_addr", "externally_initialized",
})
#: Attributes written as a keyword and an integer (``align 8``).
_INTEGER_ATTRIBUTES = frozenset({"align", "addrspace", "alignstack"})
_GLOBAL_KINDS = ("global", "constant", "alias", "ifunc")


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


def _merge_integer_attributes(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if out and out[-1] in _INTEGER_ATTRIBUTES and item.isdigit():
            out[-1] += " " + item
        else:
            out.append(item)
    return out


def parse_parameter(tokens: list[Token]) -> Parameter:
    """The :class:`Parameter` written by ``tokens`` (one comma-separated part of a parameter list)."""
    parts = words(tokens)
    if not parts:
        raise IRParseError("empty parameter")
    type_, rest = parts[0], parts[1:]
    if rest and rest[0].startswith("addrspace("):
        type_, rest = f"{type_} {rest[0]}", rest[1:]
    name = rest.pop() if rest and rest[-1].startswith("%") else None
    return Parameter(type_, _merge_integer_attributes(rest), name)


@dataclass
class Call:
    """A call (or invoke) site: the callee symbol and its argument texts.

    Attributes
    ----------
    callee : str
        ``@name`` of a direct call, a ``%value`` of an indirect one.
    arguments : list of str
        Each argument as written (``ptr nonnull %x``, ``double 1.0``).
    """

    callee: str
    arguments: list[str]

    @property
    def values(self) -> list[str]:
        """The last word of each argument: the value passed (``%x``, ``1.0``, ``@g``)."""
        return [(words(tokenize(a)) or [""])[-1] for a in self.arguments]


@dataclass(frozen=True)
class Instruction:
    """One body line that is an instruction: its result (``%x`` or ``None``), opcode and tokens."""

    text: str
    result: str | None
    opcode: str
    tokens: tuple[Token, ...]

    def operands(self) -> list[str]:
        """The local values (``%x``) the instruction reads, in order, its result excluded."""
        found = [t.text for t in self.tokens if t.kind == "local"]
        if self.result is not None and found and found[0] == self.result:
            found = found[1:]
        return found

    def phi_incoming(self) -> list[tuple[str, str]]:
        """``(value, block)`` pairs of a ``phi`` (``[ %a, %bb ]``); ``[]`` for other opcodes."""
        if self.opcode != "phi":
            return []
        pairs, index, tokens = [], 0, self.tokens
        while index < len(tokens):
            if tokens[index].text == "[":
                end = closing(tokens, index)
                parts = ["".join(t.text for t in part).strip() for part in split_top_level(tokens[index + 1:end])]
                if len(parts) == 2:
                    pairs.append((parts[0], parts[1]))
                index = end
            index += 1
        return pairs

    def call(self) -> Call | None:
        """The call site, for a ``call``/``invoke``/``callbr``; ``None`` for other opcodes."""
        if self.opcode not in ("call", "invoke", "callbr"):
            return None
        depth = 0
        tokens = self.tokens
        for index, token in enumerate(tokens):
            if token.kind == "punct" and token.text in "([{<":
                depth += 1
            elif token.kind == "punct" and token.text in ")]}>":
                depth -= 1
            elif (depth == 0 and token.kind in ("global", "local") and token.text != self.result
                  and index + 1 < len(tokens) and tokens[index + 1].text == "("):
                end = closing(tokens, index + 1)
                inner = tokens[index + 2:end]
                args = ["".join(t.text for t in part).strip() for part in split_top_level(inner)]
                return Call(token.text, [a for a in args if a])
        return None


def _significant(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.kind not in ("ws", "comment")]


def parse_instruction(line: str) -> Instruction | None:
    """The instruction on body line ``line``; ``None`` for a label, blank or comment line."""
    tokens = tokenize(line)
    significant = _significant(tokens)
    if not significant or (len(significant) >= 2 and significant[1].text == ":" and significant[0].kind in
                           ("word", "string")):
        return None
    result = None
    rest = significant
    if len(rest) >= 2 and rest[0].kind == "local" and rest[1].text == "=":
        result, rest = rest[0].text, rest[2:]
    opcode_index = 0
    while opcode_index < len(rest) - 1 and rest[opcode_index].text in ("tail", "musttail", "notail"):
        opcode_index += 1
    opcode = rest[opcode_index].text if rest else ""
    return Instruction(line, result, opcode, tuple(tokens))


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
        Linkage, visibility and calling-convention words (:data:`LINKAGE_WORDS`).
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

    @property
    def name(self) -> str:
        """The function's name (no ``@``, quotes or escapes), as llvmlite reports it."""
        return decode_name(self.symbol)

    @property
    def is_declaration(self) -> bool:
        return self.body is None

    @property
    def attribute_group_refs(self) -> list[str]:
        """The ``#N`` attribute groups the header names."""
        return [a for a in self.attributes if a.startswith("#") and a[1:].isdigit()]

    def header(self) -> str:
        """The ``define``/``declare`` line."""
        params = [p.render() for p in self.parameters] + (["..."] if self.varargs else [])
        head = " ".join([self.keyword, *self.linkage, *self.return_attributes, self.return_type, self.symbol])
        tail = "".join(" " + a for a in self.attributes)
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


def _checked(item: Item, text: str) -> Item:
    if item.render() != text:
        raise IRParseError(f"parsed form does not render back:\n  read:     {text[:300]}\n"
                           f"  rendered: {item.render()[:300]}")
    return item


def _split_header(line: str) -> tuple[list[Token], int, int]:
    """The tokens of a function header, the index of its name and of the ``)`` closing its parameters."""
    tokens = tokenize(line)
    for index, token in enumerate(tokens):
        if token.kind == "global" and index + 1 < len(tokens) and tokens[index + 1].text == "(":
            return tokens, index, closing(tokens, index + 1)
    raise IRParseError(f"cannot find the function name in: {line[:300]}")


def parse_function_header(line: str) -> Function:
    """The :class:`Function` of a ``define``/``declare`` line (``body`` ``[]`` for a definition)."""
    tokens, name_index, close = _split_header(line)
    before = words(tokens[:name_index])
    keyword, rest = before[0], before[1:]
    if not rest:
        raise IRParseError(f"no return type in: {line[:300]}")
    count = 0
    while count < len(rest) - 1 and (rest[count] in LINKAGE_WORDS or rest[count] == "cc" or
                                     (count > 0 and rest[count - 1] == "cc" and rest[count].isdigit())):
        count += 1
    linkage, return_attributes, return_type = rest[:count], rest[count:-1], rest[-1]
    parameters: list[Parameter] = []
    varargs = False
    inner = tokens[name_index + 2:close]
    if _significant(inner):
        for part in split_top_level(inner):
            if [t.text for t in _significant(part)] == ["..."]:
                varargs = True
            else:
                parameters.append(parse_parameter(part))
    after = words(tokens[close + 1:])
    body: list[str] | None = None
    if keyword == "define":
        if not after or after[-1] != "{":
            raise IRParseError(f"definition header does not end with '{{': {line[:300]}")
        after, body = after[:-1], []
    return Function(keyword, linkage, _merge_integer_attributes(return_attributes), return_type,
                    tokens[name_index].text, parameters, varargs, after, body)


def _parse_global(line: str) -> GlobalVariable:
    symbol, _, rest = line.partition(" = ")
    parts = words(tokenize(rest))
    kind_index = next((k for k, w in enumerate(parts) if w in _GLOBAL_KINDS), None)
    if kind_index is None:
        raise IRParseError(f"cannot read global: {line[:300]}")
    linkage = parts[:kind_index]
    prefix = " ".join([*linkage, parts[kind_index]]) + " "
    if not rest.startswith(prefix):
        raise IRParseError(f"unexpected spacing in global: {line[:300]}")
    return GlobalVariable(symbol, linkage, parts[kind_index], rest[len(prefix):])


def _parse_attribute_group(line: str) -> AttributeGroup:
    tokens = tokenize(line)
    ref = next(t.text for t in tokens if t.kind == "attrgroup")
    start = next(k for k, t in enumerate(tokens) if t.text == "{")
    end = closing(tokens, start)
    return AttributeGroup(ref, _merge_integer_attributes(words(tokens[start + 1:end])))


def _line_kind(line: str) -> str:
    stripped = line.strip()
    if not stripped:
        return "blank"
    if stripped.startswith(";"):
        return "comment"
    for prefix, kind in (("source_filename", "source_filename"), ("target datalayout", "datalayout"),
                         ("target triple", "triple"), ("module asm", "module_asm")):
        if line.startswith(prefix):
            return kind
    if line.startswith("$"):
        return "comdat"
    return "other"


def _parse_top_level(line: str, strict: bool) -> Item:
    """A one-line top-level item."""
    if line.startswith("declare "):
        return _checked(parse_function_header(line), line)
    if line.startswith(("@", "%", "!")) and " = " in line:
        symbol = tokenize(line)[0]
        if symbol.kind == "global":
            return _checked(_parse_global(line), line)
        if symbol.kind == "local" and line[len(symbol.text):].startswith(" = type "):
            return _checked(TypeDefinition(symbol.text, line[len(symbol.text) + len(" = type "):]), line)
        if symbol.kind == "metadata":
            return _checked(Metadata(symbol.text, line[len(symbol.text) + 3:]), line)
    if line.startswith("attributes #"):
        return _checked(_parse_attribute_group(line), line)
    kind = _line_kind(line)
    if kind == "other" and strict:
        raise IRParseError(f"unknown top-level line: {line[:300]}")
    return Line(line, kind)


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
            _checked(function, line + "\n}")  # the header renders back (with an empty body)
            end = index + 1
            while end < len(lines) and lines[end] != "}":
                end += 1
            if end == len(lines):
                raise IRParseError(f"definition of {function.symbol} is never closed")
            function.body = lines[index + 1:end]
            items.append(function)
            index = end + 1
            continue
        items.append(_parse_top_level(line, strict))
        index += 1
    return Module(items, trailing)
