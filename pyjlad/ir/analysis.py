"""Analyses over a parsed :class:`~pyjlad.ir.module.Module`.

* :func:`references`: the global symbols an item refers to (never those inside
  ``c"..."`` data, quoted strings or comments: the lexer keeps them apart).
* :func:`reachable`: the symbols reachable from a root, in the order
  ``pyjlad.portable`` keeps them.
* :func:`numba_entry`: the parameters of a Numba ABI entry
  (``i32 (ptr %retptr, ptr %excinfo, args...)``).
* :func:`pointer_flow` / :func:`mixed_pointer_arguments`: where pointer values
  flow (``phi``, ``select``, ``getelementptr``, casts, calls into defined
  functions), for the aliasing check of ``pyjlad.aliasing``.
* :func:`llvmlite_signatures`: LLVM's own view (through llvmlite) of the
  functions of a module it can parse, to cross-check the parser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import IRError, IRLookupError
from .lexer import Token, closing, split_top_level, tokenize, words
from .module import Function, Item, Module, Parameter, parse_instruction

__all__ = [
    "references", "reachable", "NumbaEntry", "numba_entry", "PointerFlow", "pointer_flow",
    "mixed_pointer_arguments", "external_functions", "users", "llvmlite_signatures",
]


def references(item: Item) -> set[str]:
    """The ``@`` symbols ``item`` mentions (its own symbol excluded)."""
    own = getattr(item, "symbol", None)
    return {t.text for t in tokenize(item.render()) if t.kind == "global" and t.text != own}


def reachable(module: Module, root: str, extra: Mapping[str, Iterable[str]] | None = None,
              references_of: Callable[[Item], set[str]] = references) -> list[str]:
    """The symbols reachable from ``root`` (an ``@`` symbol), ``root`` first, depth-first.

    Parameters
    ----------
    module : Module
    root : str
        The symbol to start from (``@f``).
    extra : mapping of str to iterable of str, optional
        References of symbols that the module does not define (or that are replaced):
        used instead of the module's item where given.
    references_of : callable
        The references of an item (default :func:`references`).

    Returns
    -------
    list of str
        Every reachable symbol once; a symbol the module neither defines nor declares (and
        ``extra`` does not name) is listed but not followed. The order is that of a stack
        into which each symbol's unseen references are pushed in sorted order.
    """
    items: dict[str, Item] = {}
    for item in module.items:
        symbol = getattr(item, "symbol", None)
        if symbol is not None and symbol.startswith("@"):
            items.setdefault(symbol, item)
    extra = extra or {}
    seen: set[str] = set()
    order: list[str] = []
    stack = [root]
    while stack:
        symbol = stack.pop()
        if symbol in seen:
            continue
        seen.add(symbol)
        order.append(symbol)
        if symbol in extra:
            refs = set(extra[symbol])
        elif symbol in items:
            refs = references_of(items[symbol])
        else:
            refs = set()
        stack.extend(sorted(refs - seen))
    return order


def users(function: Function) -> dict[str, list[int]]:
    """For each local value of ``function``, the indices (into ``function.body``) of the lines that read it."""
    out: dict[str, list[int]] = {}
    for index, line in enumerate(function.body or ()):
        instruction = parse_instruction(line)
        if instruction is not None:
            for value in dict.fromkeys(instruction.operands()):
                out.setdefault(value, []).append(index)
    return out


def external_functions(module: Module) -> list[str]:
    """Names of the functions the module declares and does not define, in order of declaration."""
    defined = {f.symbol for f in module.definitions}
    return list(dict.fromkeys(f.name for f in module.declarations if f.symbol not in defined))


@dataclass(frozen=True)
class NumbaEntry:
    """The parameters of a Numba ABI function ``i32 (ptr %retptr, ptr %excinfo, args...)``."""

    function: Function
    retptr: Parameter
    excinfo: Parameter
    arguments: tuple[Parameter, ...]


def numba_entry(module: Module, name: str) -> NumbaEntry:
    """The Numba ABI entry ``name`` (without ``@``) of ``module``.

    Raises
    ------
    KeyError
        If ``module`` does not define ``name``.
    ValueError
        If its first two parameters are not ``ptr %retptr`` and ``ptr %excinfo``.
    """
    function = module.function(name)
    if function.is_declaration:
        raise IRLookupError(f"{name} is declared, not defined")
    params = function.parameters
    if len(params) < 2 or [p.type for p in params[:2]] != ["ptr", "ptr"] or \
            not (params[0].name or "").startswith("%retptr") or not (params[1].name or "").startswith("%excinfo"):
        raise IRError(f"{name} is not a Numba ABI function: {function.header()[:200]}")
    return NumbaEntry(function, params[0], params[1], tuple(params[2:]))


_Value = tuple[str, str]  # (function name, value)
_MOVES = ("phi", "select", "getelementptr", "bitcast", "addrspacecast", "freeze")
_MERGING = ("phi", "select")
_IGNORED_CONSTANTS = frozenset({"null", "undef", "poison", "zeroinitializer"})


@dataclass
class PointerFlow:
    """Where each value flows (``edges``: value to the values it becomes) and the merges it meets."""

    edges: dict[_Value, list[_Value]] = field(default_factory=dict)
    merges: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def add(self, source: _Value, target: _Value) -> None:
        self.edges.setdefault(source, []).append(target)


def _operands(opcode: str, rest: list[Token]) -> tuple[str, ...]:
    """The values an instruction of ``opcode`` moves into its result (``rest``: its tokens after the opcode)."""
    if opcode == "phi":
        out, index = [], 0
        while index < len(rest):
            if rest[index].text == "[":
                end = closing(rest, index)
                out.append("".join(t.text for t in split_top_level(rest[index + 1:end])[0]).strip())
                index = end
            index += 1
        return tuple(out)
    if opcode == "select":
        return tuple((words(part) or [""])[-1] for part in split_top_level(rest)[1:])
    return tuple(t.text for t in rest if t.kind == "local")


def pointer_flow(module: Module) -> PointerFlow:
    """The pointer-flow graph of every function ``module`` defines (the graph ``pyjlad.aliasing`` builds).

    Values are named by function name (no ``@``) and value text (``%x``). A ``phi``,
    ``select``, ``getelementptr``, cast or ``freeze`` result receives its operands; a
    call to a defined function passes each argument to the matching parameter.
    """
    functions = {f.name: f for f in module.definitions}
    params = {name: [p.name or "" for p in f.parameters] for name, f in functions.items()}
    graph = PointerFlow()
    for name, function in functions.items():
        for instruction in function.instructions():
            if instruction.result is not None and instruction.opcode in _MOVES:
                operands = _operands(instruction.opcode, instruction.after_opcode())
                for value in operands:
                    graph.add((name, value), (name, instruction.result))
                if instruction.opcode in _MERGING:
                    graph.merges.append((name, operands))
                continue
            call = instruction.call()
            if call is not None and call.callee.startswith("@") and call.callee[1:] in params:
                callee = call.callee[1:]
                for param, value in zip(params[callee], call.values):
                    graph.add((name, value), (callee, param))
    return graph


def mixed_pointer_arguments(module: Module, entry: str, roots: Mapping[str, int]) -> frozenset[int]:
    """The arguments whose pointer ``entry`` merges with other memory in a ``phi`` or ``select``.

    Parameters
    ----------
    module : Module
    entry : str
        The function whose parameters are traced (no ``@``).
    roots : mapping of str to int
        ``entry``'s parameter names (``%arg.x.4``) to trace, each with the argument index it stands for.
    """
    if not roots:
        return frozenset()
    graph = pointer_flow(module)
    origins: dict[_Value, set[int]] = {}
    for value_name, index in roots.items():
        stack = [(entry, value_name)]
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


def llvmlite_signatures(text: str) -> dict[str, tuple[bool, int]]:
    """LLVM's view of ``text``'s functions: name to ``(is_declaration, parameter count)``.

    Raises
    ------
    RuntimeError
        If llvmlite's LLVM cannot parse ``text`` (LLVM 22 rejects some LLVM 15 spellings).
    """
    import llvmlite.binding as llvm

    parsed = llvm.parse_assembly(text)
    return {f.name: (f.is_declaration, len(list(f.arguments))) for f in parsed.functions}
