"""Basic blocks laid out so that every block comes after the blocks that dominate it.

Enzyme v0.0.289's forward mode visits a function's blocks in the order they
are written. A block written before the block that defines a value it uses
makes Enzyme ask for that value's tangent before it has visited the definition;
it then keeps a placeholder for it and, when it reaches the definition and
finds the value inactive, aborts (``forwardModeInvertedPointerFallback``:
"Assertion `found == gutils->invertedPointers.end()' failed"). Numba's
``np.roll`` of a 2-D array is such a function: its exit block, written first,
stores the element count (``smul.with.overflow`` of the two dimensions,
computed in a later block) into the array it returns.

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

import re

__all__ = ["dominance_ordered"]

_NAME = r'(?:[-\w.$]+|"[^"]*")'
_LABEL_RE = re.compile(rf"^({_NAME}):(?:\s*;.*)?$")
_SUCCESSOR_RE = re.compile(rf"\blabel %({_NAME})")
_NUMBERED_RE = re.compile(r"(?<![\w.$\"])%(\d+)\b")
_NUMBERED_LABEL_RE = re.compile(r"^(\d+):")
_NUMBERED_TYPE_RE = re.compile(r"^%\d+ = type ", re.M)


def _blocks(body: list[str]) -> list[tuple[str, list[str]]]:
    """``(name, lines)`` of each block of a function body, in order (the entry block may be unnamed: ``""``)."""
    blocks: list[tuple[str, list[str]]] = [("", [])]
    for line in body:
        label = _LABEL_RE.match(line)
        if label:
            blocks.append((label.group(1), [line]))
        else:
            blocks[-1][1].append(line)
    if len(blocks) > 1 and not any(line.strip() and not line.lstrip().startswith(";") for line in blocks[0][1]):
        blocks[:2] = [(blocks[1][0], blocks[0][1] + blocks[1][1])]  # the entry block has a label
    return blocks


def _reverse_post_order(blocks: list[tuple[str, list[str]]]) -> list[int]:
    """Indices of the blocks reachable from the first, in reverse post-order (iterative DFS)."""
    index = {name: k for k, (name, _) in enumerate(blocks)}
    successors = [[index[s] for s in _SUCCESSOR_RE.findall("\n".join(lines)) if s in index] for _, lines in blocks]
    order: list[int] = []
    seen = {0}
    stack = [(0, iter(successors[0]))]
    while stack:
        node, children = stack[-1]
        child = next((c for c in children if c not in seen), None)
        if child is None:
            order.append(node)
            stack.pop()
        else:
            seen.add(child)
            stack.append((child, iter(successors[child])))
    return order[::-1]


def _named(body: list[str]) -> list[str]:
    """``body`` with its numbered values and blocks (``%7``, ``7:``) given names (``%.pj7``, ``.pj7:``)."""
    return [_NUMBERED_LABEL_RE.sub(r".pj\1:", _NUMBERED_RE.sub(r"%.pj\1", line)) for line in body]


def _ordered_body(header: str, body: list[str]) -> list[str]:
    """The lines of a function body with its blocks in reverse post-order (unchanged if already so, or if
    the function has numbered parameters, which the renaming would not reach)."""
    if _NUMBERED_RE.search(header):
        return body
    blocks = _blocks(body)
    order = _reverse_post_order(blocks)
    rest = [k for k in range(len(blocks)) if k not in set(order)]
    if order + rest == list(range(len(blocks))):
        return body
    blocks = _blocks(_named(body))
    return [line for k in order + rest for line in blocks[k][1]]


def dominance_ordered(text: str) -> str:
    """``text`` (a module) with every function's blocks written after their dominators.

    A module that names a type by number (``%0 = type ...``) is returned
    unchanged: its type names could not be told from numbered values.
    """
    if _NUMBERED_TYPE_RE.search(text):
        return text
    lines = text.split("\n")
    out: list[str] = []
    k = 0
    while k < len(lines):
        out.append(lines[k])
        if lines[k].startswith("define ") and lines[k].rstrip().endswith("{"):
            end = lines.index("}", k + 1)
            out += _ordered_body(lines[k], lines[k + 1:end])
            k = end
            out.append(lines[k])
        k += 1
    return "\n".join(out)
