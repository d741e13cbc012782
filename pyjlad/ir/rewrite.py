"""Small edits of a parsed :class:`~pyjlad.ir.Module` that keep every other byte as it was.

A pass that rewrites one item at a time as text (a definition's body, a global's initializer) uses
:func:`map_items`: only the items whose text changes are parsed again, so the module's other items
(and their parsed fields) are kept as they are. :func:`rename` renames one ``@`` symbol wherever it is
a ``global`` token, :func:`drop_attachment` removes a metadata attachment from one instruction line, and
:func:`drop_integer_freezes` replaces each ``freeze`` of an integer by the integer.

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

import re
from collections.abc import Callable, Iterable

from .lexer import Token, substitute
from .module import Function, Item, Module, parse, parse_instruction

__all__ = ["drop_attachment", "drop_debug_attachments", "drop_integer_freezes", "items_of", "map_items", "rename"]


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


_DEBUG_ATTACHMENT = re.compile(r",\s*!dbg\s+!\d+|\s+!dbg\s+!\d+(?=\s*\{\s*$)", re.MULTILINE)


def drop_debug_attachments(text: str) -> str:
    r"""``text`` (a module's IR) without its ``!dbg`` attachments (Numba's ``debug=True``): on instructions and
    on ``define`` lines. Debug information only: dropping it never changes what the code computes.

    >>> print(drop_debug_attachments("define void @f() #0 !dbg !6 {\n  call void @g(i64 1), !dbg !9\n}"))
    define void @f() #0 {
      call void @g(i64 1)
    }
    """
    return _DEBUG_ATTACHMENT.sub("", text) if "!dbg" in text else text


def drop_integer_freezes(module: Module, where: Callable[[Item], bool] = lambda item: True) -> Module:
    """``module`` (edited in place) without the ``freeze`` of integers in the definitions ``where`` accepts: each
    such ``%y = freeze iN %x`` is removed and ``%y`` replaced by ``%x`` (``freeze`` only differs from its
    operand where that is ``undef`` or poison).

    LLVM's optimizer freezes an integer it branches on (the remainder of Numba's ``i % m``); in a parallel
    loop, Enzyme v0.0.289 takes such a ``freeze`` for a value with an adjoint and fails on it (assertion
    ``addingType->isFPOrFPVectorTy()``).

    >>> module = parse("define i64 @f(i64 %x) {\\nentry:\\n  %y = freeze i64 %x\\n  %z = add i64 %y, 1\\n"
    ...                "  ret i64 %z\\n}\\n")
    >>> print(drop_integer_freezes(module).render(), end="")
    define i64 @f(i64 %x) {
    entry:
      %z = add i64 %x, 1
      ret i64 %z
    }
    """
    def rewrite(text: str) -> str:
        lines = text.split("\n")
        frozen: dict[str, str] = {}
        for line in lines:
            if "freeze i" not in line:
                continue
            instruction = parse_instruction(line)
            operands = instruction.operands() if instruction is not None else []
            words = [t.text for t in instruction.tokens if t.kind == "word"] if instruction is not None else []
            if instruction is not None and instruction.opcode == "freeze" and len(operands) == 1 \
                    and len(words) >= 2 and words[1][:1] == "i" and words[1][1:].isdigit():
                frozen[instruction.result] = operands[0]
        if not frozen:
            return text

        def unfrozen(name: str) -> str:
            while name in frozen:
                name = frozen[name]
            return name

        kept = [line for line in lines if not any(line.lstrip().startswith(f"{name} = freeze ") for name in frozen)]
        return "\n".join(substitute(line, "local", unfrozen) for line in kept)

    return map_items(module, rewrite, where=lambda item: isinstance(item, Function) and not item.is_declaration
                     and where(item))
