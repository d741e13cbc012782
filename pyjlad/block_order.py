"""Basic blocks laid out so that every block comes after the blocks that dominate it.

Enzyme v0.0.289's forward mode visits a function's blocks in the order they
are written. A block written before the block that defines a value it uses
makes Enzyme ask for that value's tangent before it has visited the definition;
it then keeps a placeholder for it and, when it reaches the definition and
finds the value inactive, aborts (``forwardModeInvertedPointerFallback``:
"Assertion `found == gutils->invertedPointers.end()' failed"). Numba's
``np.roll`` of a 2-D array is such a function: its exit block, written first,
stores the element count (``smul.with.overflow`` of the two dimensions,
computed in a later block) into the array it returns. Worse, it may not abort:
a loop nest whose outer header Numba's optimizer wrote after its inner loop
gave a wrong Hessian-vector product (reverse over forward) with no error
(``tests/test_block_order.py``). pyjlad therefore orders every module Enzyme
gets (``pyjlad.engines.differentiate._enzyme_input``).

:func:`dominance_ordered` rewrites each function of a module with its blocks
in reverse post-order of its control-flow graph (a block after all of its
dominators), unreachable blocks last. The code is unchanged: only the order in
which the blocks are written. Numbered values and blocks (``%7``, ``7:``)
are renamed first (``%.pj7``), because LLVM numbers them in the order they
are written.

Examples
--------
>>> text = "define void @f() {\\nentry:\\n  br label %b\\nc:\\n  ret void\\nb:\\n  br label %c\\n}\\n"
>>> print(dominance_ordered(text), end="")
define void @f() {
entry:
  br label %b
b:
  br label %c
c:
  ret void
}
"""

from __future__ import annotations

from .ir.cfg import ControlFlow, blocks
from .ir.lexer import substitute, tokenize
from .ir.module import parse

__all__ = ["dominance_ordered"]


def _is_numbered(symbol: str) -> bool:
    """Whether a ``%`` symbol is a number (``%7``), which LLVM assigns in the order values are written."""
    return symbol[1:].isdigit()


def _renamed(symbol: str) -> str:
    return "%.pj" + symbol[1:] if _is_numbered(symbol) else symbol


def _named_line(line: str) -> str:
    """``line`` with its numbered values (``%7``, in ``; preds = %7`` comments too) and a numbered label
    (``7:``) given names (``%.pj7``, ``.pj7:``)."""
    if "%" in line:
        line = "".join(_renamed(t.text) if t.kind == "local" else
                       ";" + substitute(t.text[1:], "local", _renamed) if t.kind == "comment" else t.text
                       for t in tokenize(line))
    number, colon, _ = line.partition(":")
    return f".pj{line}" if colon and number.isascii() and number.isdigit() else line


def _named(body: list[str]) -> list[str]:
    """``body`` with its numbered values and blocks (``%7``, ``7:``) given names (``%.pj7``, ``.pj7:``)."""
    return [_named_line(line) for line in body]


def _ordered_body(header: str, body: list[str]) -> list[str]:
    """The lines of a function body with its blocks in reverse post-order (unchanged if already so, or if
    the function has numbered parameters, which the renaming would not reach)."""
    if any(t.kind == "local" and _is_numbered(t.text) for t in tokenize(header)):
        return body
    graph = ControlFlow.of(body)
    index = {name: k for k, name in enumerate(graph.names)}
    order = [index[name] for name in graph.reverse_post_order()]
    rest = [k for k in range(len(graph.names)) if k not in set(order)]
    if order + rest == list(range(len(graph.names))):
        return body
    named = blocks(_named(body))
    return [line for k in order + rest for line in named[k][1]]


def dominance_ordered(text: str) -> str:
    """``text`` (a module) with every function's blocks written after their dominators.

    A module that names a type by number (``%0 = type ...``) is returned
    unchanged: its type names could not be told from numbered values.
    """
    module = parse(text, strict=False)
    if any(_is_numbered(symbol) for symbol in module.types):
        return text
    for function in module.definitions:
        function.body = _ordered_body(function.header(), function.body or [])
    return module.render()
