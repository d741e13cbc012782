"""Which array arguments' memory Numba's code mixes with other memory.

Enzyme gives a constant (``enzyme_const``) pointer no shadow of its own. When
the function selects between that pointer and other memory, in a ``phi`` or a
``select``, Enzyme has to shadow the merged pointer, and the constant side of it
is shadowed by the constant pointer itself: reverse mode then adds adjoints
into the user's constant array (data loss) and forward mode reads its values as
tangents. Numba emits exactly that for an overlap-safe copy: ``y[:] = c``
selects between ``c``'s data and a temporary copy of it, and
``np.linalg.solve`` copies ``b`` that way.

This module finds those arguments in the exported module, so that the engines
can give them a zero shadow when they are constant (see
:attr:`pyjlad.abi.ArrayArg.aliased`). The analysis follows each float array's
data pointer through ``getelementptr``/``bitcast``/``phi``/``select``/
``freeze`` and into calls to functions defined in the module; a ``phi`` or
``select`` that merges a tracked pointer with anything else (another argument,
a temporary, a loaded pointer, a global) marks every argument involved.
Merges with ``null``, ``undef`` and ``poison`` do not count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .portable import split_module, split_top_level

__all__ = ["mixed_pointer_arguments"]

_VALUE = r'%[-\w.$]+|%"[^"]*"'
_NAME_RE = re.compile(_VALUE)
_MOVE_RE = re.compile(
    rf"^\s*({_VALUE}) = (?:[a-z]+ )*?(phi|select|getelementptr|bitcast|addrspacecast|freeze)\b(.*)$")
_PHI_INCOMING_RE = re.compile(rf"\[\s*([^\[\]]+?)\s*,\s*(?:{_VALUE})\s*\]")
_CALL_RE = re.compile(r"\bcall\b[^@]*@([-\w.$]+|\"[^\"]*\")\((.*)\)")
_MERGING = ("phi", "select")
_IGNORED_CONSTANTS = {"null", "undef", "poison", "zeroinitializer"}

_Value = tuple[str, str]  # (function, value name)


@dataclass
class _Graph:
    """Where each pointer value flows (``edges``) and the merges (``phi``/``select``) it meets."""

    edges: dict[_Value, list[_Value]] = field(default_factory=dict)
    merges: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def add(self, source: _Value, target: _Value) -> None:
        self.edges.setdefault(source, []).append(target)


def _last_token(operand: str) -> str:
    operand = operand.strip()
    return operand.rsplit(None, 1)[-1] if operand else operand


def _graph(text: str) -> _Graph:
    """The pointer-flow graph of every function ``text`` defines."""
    _, entities, _ = split_module(text)
    functions = {e.name.lstrip("@"): e.text for e in entities if e.kind == "define"}
    params: dict[str, list[str]] = {}
    for name, body in functions.items():
        header = body.split("\n", 1)[0]
        inside = header[header.index("(", header.index("@")) + 1:header.rindex(")")]
        params[name] = [_last_token(p) for p in split_top_level(inside) if p.strip() not in ("", "...")]
    graph = _Graph()
    for name, body in functions.items():
        for line in body.splitlines()[1:]:
            move = _MOVE_RE.match(line)
            if move:
                result, opcode, rest = move.groups()
                if opcode == "phi":
                    operands = tuple(v.strip() for v in _PHI_INCOMING_RE.findall(rest))
                elif opcode == "select":
                    operands = tuple(_last_token(p) for p in split_top_level(rest)[1:])
                else:
                    operands = tuple(_NAME_RE.findall(rest))
                for value in operands:
                    graph.add((name, value), (name, result))
                if opcode in _MERGING:
                    graph.merges.append((name, operands))
            elif "call" in line and "%" in line:
                call = _CALL_RE.search(line)
                if call and call.group(1) in params:
                    for param, arg in zip(params[call.group(1)], split_top_level(call.group(2))):
                        graph.add((name, _last_token(arg)), (call.group(1), param))
    return graph


def mixed_pointer_arguments(text: str, entry: str, roots: Mapping[str, int]) -> frozenset[int]:
    """The arguments whose data pointer ``entry`` merges with other memory.

    Parameters
    ----------
    text : str
        LLVM IR of the module.
    entry : str
        The function whose parameters are traced.
    roots : mapping of str to int
        ``entry``'s parameter names (``%arg.x.4``) to trace, each with the
        argument index it stands for.

    Returns
    -------
    frozenset of int
        Argument indices whose pointer meets another pointer in a ``phi`` or
        ``select``.
    """
    if not roots:
        return frozenset()
    graph = _graph(text)
    origins: dict[_Value, set[int]] = {}
    for name, index in roots.items():
        stack = [(entry, name)]
        while stack:
            value = stack.pop()
            reached = origins.setdefault(value, set())
            if index not in reached:
                reached.add(index)
                stack.extend(graph.edges.get(value, ()))

    mixed: set[int] = set()
    for function, operands in graph.merges:
        seen = [origins.get((function, v), set()) for v in operands if v not in _IGNORED_CONSTANTS]
        tracked = set().union(*seen)
        if tracked and (len(tracked) > 1 or any(not s for s in seen)):
            mixed |= tracked
    return frozenset(mixed)
