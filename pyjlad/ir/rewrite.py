"""Small edits of a parsed :class:`~pyjlad.ir.Module` that keep every other byte as it was.

A pass that rewrites one item at a time as text (a definition's body, a global's initializer) uses
:func:`map_items`: only the items whose text changes are parsed again, so the module's other items
(and their parsed fields) are kept as they are. :func:`rename` renames one ``@`` symbol wherever it is
a ``global`` token, and :func:`drop_attachment` removes a metadata attachment from one instruction line.

>>> from pyjlad.ir import parse
>>> module = parse("define void @f() {\\nentry:\\n  call void @g()\\n  ret void\\n}\\ndeclare void @g()\\n")
>>> print(rename(module, "@g", "@h").render(), end="")
define void @f() {
entry:
  call void @h()
  ret void
}
declare void @h()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .lexer import Token, substitute
from .module import Function, Item, Module, parse, parse_instruction

__all__ = ["drop_attachment", "items_of", "map_items", "rename"]


def items_of(text: str) -> list[Item]:
    """The top-level items of ``text`` (one or more items, no trailing newline needed).

    >>> [type(item).__name__ for item in items_of("@g = global i64 0\\ndeclare void @f()")]
    ['GlobalVariable', 'Function']
    """
    return parse(text).items


def map_items(module: Module, rewrite: Callable[[str], str], *,
              where: Callable[[Item], bool] = lambda item: True) -> Module:
    """``module`` (edited in place) with each item ``where`` accepts replaced by the items of ``rewrite(its text)``.

    An item whose text ``rewrite`` returns unchanged is kept as it is (not parsed again); a changed one
    may become several items (a definition followed by a helper it needs).

    >>> from pyjlad.ir import parse
    >>> module = parse("@a = global i64 1\\n@b = global i64 2\\n")
    >>> print(map_items(module, lambda text: text.replace("2", "3")).render(), end="")
    @a = global i64 1
    @b = global i64 3
    """
    items: list[Item] = []
    for item in module.items:
        if not where(item):
            items.append(item)
            continue
        text = item.render()
        new = rewrite(text)
        items.extend([item] if new == text else items_of(new))
    module.items = items
    return module


def definitions_named(symbols: Iterable[str]) -> Callable[[Item], bool]:
    """A ``where`` for :func:`map_items`: the definitions of the ``@`` symbols ``symbols``."""
    names = set(symbols)
    return lambda item: isinstance(item, Function) and not item.is_declaration and item.symbol in names


def rename(module: Module, old: str, new: str) -> Module:
    """``module`` (edited in place) with the ``@`` symbol ``old`` renamed ``new`` wherever it is a ``global``
    token (never inside ``c"..."`` data or comments)."""
    return map_items(module, lambda text: substitute(text, "global", lambda s: new if s == old else s),
                     where=lambda item: old in item.render())


def drop_attachment(line: str, name: str, opcodes: frozenset[str] = frozenset({"load", "store"})) -> str:
    """``line`` (one instruction) without its first ``, <name> !N`` metadata attachment, if its opcode is one
    of ``opcodes``; any other line unchanged.

    >>> drop_attachment("  %v = load i64, ptr %p, align 8, !invariant.group !3, !tbaa !4", "!invariant.group")
    '  %v = load i64, ptr %p, align 8, !tbaa !4'
    >>> drop_attachment("  call void @f(), !invariant.group !3", "!invariant.group")
    '  call void @f(), !invariant.group !3'
    """
    if name not in line or not line[:1].isspace():
        return line
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode not in opcodes:
        return line
    tokens: list[Token] = list(instruction.tokens)
    for k in range(2, len(tokens) - 2):
        if (tokens[k].kind == "metadata" and tokens[k].text == name and tokens[k - 1].kind == "ws"
                and tokens[k - 2].text == "," and tokens[k + 1].kind == "ws" and tokens[k + 2].kind == "metadata"
                and tokens[k + 2].text[1:].isdigit()):
            return "".join(t.text for t in tokens[:k - 2] + tokens[k + 3:])
    return line
