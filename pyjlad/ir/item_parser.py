"""Reading one top-level line of LLVM IR into its item (:mod:`pyjlad.ir.items`).

Each reader checks its result: an item whose fields do not render back to its own text raises
:class:`~pyjlad.errors.IRParseError` (:func:`checked`) rather than being silently changed.
:func:`pyjlad.ir.module.parse` calls :func:`parse_item` for every line outside a function body and
:func:`parse_function_header` for each ``define`` line.
"""

from __future__ import annotations

import re

from ..errors import IRParseError
from .instructions import significant
from .items import AttributeGroup, Function, GlobalVariable, Item, Line, Metadata, Parameter, TypeDefinition
from .lexer import Token, closing, split_top_level, tokenize, words

__all__ = ["LINKAGE_WORDS", "checked", "parse_function_header", "parse_item", "parse_parameter"]

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


def checked(item: Item, text: str) -> Item:
    """``item``, if it renders back to ``text``.

    Raises
    ------
    IRParseError
        If it does not (the parser would otherwise change the text silently).
    """
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


#: A metadata kind (``!dbg``, ``!prof``, ``!kcfi_type``): where a header's attachments begin (a node is ``!6``
#: or ``!{...}``, never a name).
_METADATA_KIND = re.compile(r"![-a-zA-Z$._][-a-zA-Z$._0-9]*")


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
    if significant(inner):
        for part in split_top_level(inner):
            if [t.text for t in significant(part)] == ["..."]:
                varargs = True
            else:
                parameters.append(parse_parameter(part))
    after = words(tokens[close + 1:])
    body: list[str] | None = None
    if keyword == "define":
        if not after or after[-1] != "{":
            raise IRParseError(f"definition header does not end with '{{': {line[:300]}")
        after, body = after[:-1], []
    first_attachment = next((k for k, word in enumerate(after) if _METADATA_KIND.fullmatch(word)), len(after))
    return Function(keyword, linkage, _merge_integer_attributes(return_attributes), return_type,
                    tokens[name_index].text, parameters, varargs, after[:first_attachment], body,
                    after[first_attachment:])


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


def parse_item(line: str, strict: bool) -> Item:
    """The one-line top-level item ``line`` (anything but a definition).

    Raises
    ------
    IRParseError
        If the item cannot be read or does not render back, or (with ``strict``) the line is of no
        known kind.
    """
    if line.startswith("declare "):
        return checked(parse_function_header(line), line)
    if line.startswith(("@", "%", "!")) and " = " in line:
        symbol = tokenize(line)[0]
        if symbol.kind == "global":
            return checked(_parse_global(line), line)
        if symbol.kind == "local" and line[len(symbol.text):].startswith(" = type "):
            return checked(TypeDefinition(symbol.text, line[len(symbol.text) + len(" = type "):]), line)
        if symbol.kind == "metadata":
            return checked(Metadata(symbol.text, line[len(symbol.text) + 3:]), line)
    if line.startswith("attributes #"):
        return checked(_parse_attribute_group(line), line)
    kind = _line_kind(line)
    if kind == "other" and strict:
        raise IRParseError(f"unknown top-level line: {line[:300]}")
    return Line(line, kind)
