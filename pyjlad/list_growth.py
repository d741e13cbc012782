"""Growing lists made differentiable: each growth of a list a copy Enzyme knows the type of.

Numba's ``list.append`` (and the lists inside ``np.clip`` with array bounds, ``np.partition``, ``np.unique``) grows a list's payload with ``NRT_MemInfo_varsize_realloc(mi, size)``, then zero-fills the new
slots with a ``memset``. The payload is a header (``size``, ``allocated``, ``dirty``: integers) followed by the
items. Enzyme types a copy or fill of variable length by the type at its first byte only: a growth copied as
one block is typed by the header (an integer), so the items' adjoints were not carried over (a float32 list's
gradient came out wrong, silently); the zero fill of new slots had no type at all.

:func:`type_list_growth` rewrites, in each function, every growth of a list whose item type it can read from
the list's destructor (Numba names it ``.dtor.list.<item type>``, passed to ``NRT_MemInfo_new_varsize_dtor``
where the list is made, in the same function) into a call of ``@pyjlad_list_realloc.<kind>`` (pyjlad's runtime,
``nrt.ll``), which copies the header as integers and the items as ``<kind>`` (``double``, ``float``,
``integer``, ``pointer``), and types each fill of such a list's items (its address computed from the list's
data pointer) with Enzyme's hint ``__enzyme_<kind>``. Items of one kind, or floats of one width beside integers
(tuples such as ``(x[i], i)``: the integers are copied as floats, which only moves their shadow, never read),
have a kind; items holding both pointers (arrays) and floats, floats of both widths, or an integer first and
floats after it (Enzyme types the first field itself, and a hint saying otherwise is an error), have none.

A list made in one function and grown in another (Numba's ``list.extend``, which ``sorted(zip(...))`` calls, as
``np.moveaxis`` does) is followed through its calls: a parameter every call site passes a list of one kind to is a
list of that kind. The header's length is that of Numba's payload struct before its first item (``size`` and
``allocated``, ``i64``; ``dirty``, ``i8``; padding to the item's alignment): 20 bytes before ``float32`` items, 24
before ``float64`` ones, whatever the list's first size (a list literal ``[a, b]`` starts with its items).

Growths left as they were (a list whose maker cannot be traced, items without a kind) stay calls of Numba's
``NRT_MemInfo_varsize_realloc``, which pyjlad's runtime does not define: Enzyme refuses them, and
:mod:`pyjlad.refusals` says so in the user's terms.

Examples
--------
>>> item_kind(".dtor.list.float64"), item_kind(".dtor.list.Tuple(float32, int64)")
('double', 'float')
>>> item_kind(".dtor.list.Tuple(int64, float64)") is None
True
>>> item_kind(".dtor.list.array(float64, 1d, C)"), item_kind(".dtor.list.Tuple(array(float64, 1d, C), float64)")
('pointer', None)
>>> header_bytes(".dtor.list.float64"), header_bytes(".dtor.list.float32"), header_bytes(".dtor.list.bool")
(24, 20, 17)
"""

from __future__ import annotations

from collections import Counter

from .errors import EnzymeError
from .ir.edit import declare, define_element_loops, element_loop_call
from .ir.instructions import Instruction, parse_instruction
from .ir.items import Function
from .ir.lexer import texts_of, tokenize, words
from .ir.module import Module
from .ir.value_types import SCALAR_BYTES

__all__ = ["REALLOC", "LIST_REALLOC", "header_bytes", "item_kind", "type_list_growth"]

#: Numba's growth of a variable-size buffer (its lists'), left undefined by pyjlad's runtime.
REALLOC = "@NRT_MemInfo_varsize_realloc"
#: pyjlad's typed growth of a list's payload (``nrt.ll``), one per item kind: ``<symbol>.<kind>``.
LIST_REALLOC = "@pyjlad_list_realloc"
_MAKER = "@NRT_MemInfo_new_varsize_dtor"
_DTOR = ".dtor.list."
_DOUBLE = {"float64", "complex128"}
_FLOAT = {"float32", "complex64"}
_INTEGER = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "boolean",
            "intp", "uintp"}
#: Words of an item type's name that are not item types (a tuple's, a read-only array's).
_SYNTAX = {"Tuple", "UniTuple", "x", "readonly"}
#: The kinds whose fills and copies become calls of pyjlad's own, typed in every mode (:func:`_zero_fill`): loops
#: of float stores, or a typed call for integers.
_ELEMENT_CALLS = ("double", "float", "integer")
#: Enzyme's type hint for each kind, and the bytes it types.
_HINTS = {"double": ("@__enzyme_double", 8), "float": ("@__enzyme_float", 4), "integer": ("@__enzyme_integer", 1),
          "pointer": ("@__enzyme_pointer", 8)}
#: Where the data pointer of a MemInfo is (``struct MemInfo``'s ``data`` field).
_DATA_OFFSET = "24"
#: The bytes of a list payload's fields before its items (``size``, ``allocated``: i64; ``dirty``: i8).
_HEADER_FIELDS = 17
#: The alignment of each item type's fields (an array's struct, of pointers and ``i64``: 8).
_ALIGNMENT = {**dict.fromkeys(("float64", "complex128", "int64", "uint64", "intp", "uintp"), 8),
              **dict.fromkeys(("float32", "complex64", "int32", "uint32"), 4), "int16": 2, "uint16": 2,
              **dict.fromkeys(("int8", "uint8", "bool", "boolean"), 1)}


def _without_arrays(name: str) -> tuple[str, bool]:
    """``name`` with each ``array(...)`` left out, and whether there was one."""
    found = False
    while "array(" in name:
        start = name.index("array(")
        end = name.find(")", start)
        if end < 0:
            return name, True
        name, found = name[:start] + name[end + 1:], True
    return name, found


def _item_words(dtor: str) -> tuple[list[str], bool] | None:
    """The scalar type names in a list destructor's item type, in order, and whether it holds arrays; ``None`` if
    the name is not a list destructor's."""
    name = dtor.lstrip("@").strip('"')
    if not name.startswith(_DTOR):
        return None
    rest, arrays = _without_arrays(name[len(_DTOR):])
    return [w for w in "".join(c if c.isalnum() or c == "_" else " " for c in rest).split()
            if w not in _SYNTAX and not w.isdigit()], arrays


def header_bytes(dtor: str) -> int | None:
    """The bytes before the first item in the payload of a list whose destructor is ``dtor``: the header's 17
    rounded up to the items' alignment (``None`` for a type this reading does not know)."""
    read = _item_words(dtor)
    if read is None or any(w not in _ALIGNMENT for w in read[0]):
        return None
    alignment = max([_ALIGNMENT[w] for w in read[0]] + ([8] if read[1] else [1]))
    return -(-_HEADER_FIELDS // alignment) * alignment


def item_kind(dtor: str) -> str | None:
    """The kind (``"double"``, ``"float"``, ``"integer"``, ``"pointer"``) of a list's items from its destructor's
    name (``.dtor.list.<item type>``, quotes and ``@`` allowed), or ``None`` where they have none (see the module's
    docstring) or the name is not a list's."""
    read = _item_words(dtor)
    if read is None:
        return None
    order, arrays = read
    parts = set(order)
    if parts - _DOUBLE - _FLOAT - _INTEGER:
        return None  # a type this reading does not know (a record, a string, a nested list)
    doubles, floats = bool(parts & _DOUBLE), bool(parts & _FLOAT)
    if arrays:
        return None if doubles or floats else "pointer"
    if doubles and floats or (doubles or floats) and order[0] in _INTEGER:
        return None  # Enzyme knows the first field's type: a hint saying otherwise contradicts it
    return "double" if doubles else "float" if floats else "integer"


def _lists(body: list[str]) -> dict[str, tuple[str, str]]:
    """Each list made in ``body`` whose items have a kind: its MemInfo (``%mi``) -> (kind, header bytes)."""
    found = {}
    for line in body:
        instruction = parse_instruction(line) if _MAKER in line else None
        call = instruction.call() if instruction is not None else None
        if call is None or call.callee != _MAKER or instruction.result is None or len(call.values) != 2:
            continue
        kind, header = item_kind(call.values[1]), header_bytes(call.values[1])
        if kind is not None and header is not None:
            found[instruction.result] = (kind, str(header))
    return found


def _calls(body: list[str], callees: set[str]) -> list:
    """Each direct call in ``body`` of one of ``callees``."""
    found = []
    for line in body:
        instruction = parse_instruction(line) if "@" in line and ("call " in line or "invoke " in line) else None
        call = instruction.call() if instruction is not None else None
        if call is not None and call.callee in callees:
            found.append(call)
    return found


def _passed_lists(module: Module, made: dict[str, dict[str, tuple[str, str]]]) -> dict[str, dict[str, tuple[str, str]]]:
    """The lists each function is passed: function -> {its parameter: (kind, header)} for each parameter that every
    call site in ``module`` passes a list of one kind to (``made``: the lists each function makes). Functions
    whose symbol is used other than as a direct callee (called from where pyjlad cannot see) get none."""
    functions = {f.symbol: f for f in module.definitions if any(p.type == "ptr" and p.name for p in f.parameters)}
    if not functions:
        return {}
    direct = {symbol: 0 for symbol in functions}
    uses = Counter(texts_of(module.render(), "global"))
    sites: dict[str, list[tuple[str, list[str]]]] = {symbol: [] for symbol in functions}
    for caller in module.definitions:
        for call in _calls(caller.body or [], set(functions)):
            direct[call.callee] += 1
            sites[call.callee].append((caller.symbol, call.values))
    seen = {s for s in functions if uses[s] == direct[s] + 1}  # its definition, then only its direct calls
    passed: dict[str, dict[str, tuple[str, str]]] = {}
    for _ in range(8):  # a list passed on through up to eight calls
        known = {s: {**made.get(s, {}), **passed.get(s, {})} for s in set(made) | set(passed)}
        found: dict[str, dict[str, tuple[str, str]]] = {}
        for symbol in seen:
            for index, parameter in enumerate(functions[symbol].parameters):
                kinds = {known.get(caller, {}).get(values[index]) if index < len(values) else None
                         for caller, values in sites[symbol]}
                if parameter.type == "ptr" and parameter.name and len(kinds) == 1 and None not in kinds:
                    found.setdefault(symbol, {})[parameter.name] = kinds.pop()
        if found == passed:
            break
        passed = found
    return passed


def _definitions(body: list[str]) -> dict[str, Instruction]:
    """Each ``getelementptr`` or ``load`` in ``body``, by its result."""
    found = {}
    for line in body:
        instruction = parse_instruction(line) if (" getelementptr " in line or " load " in line) else None
        if instruction is not None and instruction.result and instruction.opcode in ("getelementptr", "load"):
            found[instruction.result] = instruction
    return found


def _base(instruction: Instruction) -> str | None:
    """The local pointer a ``getelementptr`` indexes from (``None`` if not a local)."""
    rest = [w.rstrip(",") for w in words(instruction.after_opcode())]
    skip = ("ptr", "nonnull", "noundef")
    if "ptr" not in rest:
        return None
    index = rest.index("ptr")
    while index < len(rest) and rest[index] in skip:
        index += 1
    return rest[index] if index < len(rest) and rest[index].startswith("%") else None


def _list_of(pointer: str, definitions: dict[str, Instruction], lists: dict[str, tuple[str, str]]) -> str | None:
    """The list (its MemInfo) whose payload ``pointer`` points into: ``getelementptr``s from a ``load ptr`` of the
    list's data field (``getelementptr i8, ptr %mi, i64 24``); ``None`` if it is not one."""
    seen = set()
    while pointer in definitions and pointer not in seen:
        seen.add(pointer)
        instruction = definitions[pointer]
        if instruction.opcode == "load":
            if words(instruction.after_opcode())[:1] != ["ptr,"]:
                return None
            field = definitions.get(instruction.address() or "")
            if field is None or field.opcode != "getelementptr":
                return None
            rest = words(field.after_opcode())
            mi = _base(field)
            return mi if mi in lists and rest[-2:] == ["i64", _DATA_OFFSET] and rest[-3].endswith(",") \
                and rest[-3].rstrip(",") == mi else None
        pointer = _base(instruction) or ""
    return None


def _grows_a_parameter(function: Function) -> bool:
    """Whether ``function`` grows a list it is passed (a parameter of its own)."""
    parameters = {p.name for p in function.parameters if p.name}
    return any(call.callee == REALLOC and call.values[:1] and call.values[0] in parameters
               for call in _calls(function.body or [], {REALLOC}))


def type_list_growth(module: Module) -> Module:
    r"""``module`` with each growth of a list whose items have a kind made a call of
    ``@pyjlad_list_realloc.<kind>(mi, size, header bytes)`` (see the module's docstring); changed in place.

    Examples
    --------
    >>> from pyjlad.ir.module import parse
    >>> m = parse("define void @f() {\n"
    ...           "  %mi = call ptr @NRT_MemInfo_new_varsize_dtor(i64 24, ptr @.dtor.list.float64)\n"
    ...           "  %p = call ptr @NRT_MemInfo_varsize_realloc(ptr nonnull %mi, i64 56)\n  ret void\n}\n")
    >>> print(type_list_growth(m).render(), end="")  # doctest: +NORMALIZE_WHITESPACE
    define void @f() {
      %mi = call ptr @NRT_MemInfo_new_varsize_dtor(i64 24, ptr @.dtor.list.float64)
      %p = call ptr @pyjlad_list_realloc.double(ptr nonnull %mi, i64 56, i64 24)
      ret void
    }
    """
    growing = [f for f in module.definitions if any(REALLOC in line for line in f.body or [])]
    made = {f.symbol: _lists(f.body or []) for f in module.definitions
            if any(_MAKER in line for line in f.body or [])} if growing else {}
    passed = _passed_lists(module, made) if any(_grows_a_parameter(f) for f in growing) else {}
    for function in growing:
        body = function.body or []
        lists = {**passed.get(function.symbol, {}), **made.get(function.symbol, {})}
        for k, line in enumerate(body if lists else []):
            instruction = parse_instruction(line) if REALLOC in line else None
            call = instruction.call() if instruction is not None else None
            if call is None or call.callee != REALLOC or len(call.values) != 2 or call.values[0] not in lists:
                continue
            kind, header = lists[call.values[0]]
            start, end = line.index(REALLOC + "("), line.rindex(")")
            arguments = line[start + len(REALLOC) + 1:end]
            body[k] = f"{line[:start]}{LIST_REALLOC}.{kind}({arguments}, i64 {header}){line[end + 1:]}"
    return module


def _grown(body: list[str]) -> dict[str, str]:
    """Each list ``body`` grows with ``@pyjlad_list_realloc.<kind>``: its MemInfo -> kind."""
    found = {}
    for line in body:
        instruction = parse_instruction(line) if LIST_REALLOC + "." in line else None
        call = instruction.call() if instruction is not None else None
        if call is not None and call.callee.startswith(LIST_REALLOC + ".") and call.values:
            found[call.values[0]] = call.callee[len(LIST_REALLOC) + 1:]
    return found


def _hint(line: str, pointer: str, kind: str, size: int | None = None) -> str:
    """The line of Enzyme's hint that ``pointer`` points at a ``kind`` (``size`` bytes of it: the kind's own size
    where not given), indented as ``line``.

    A kind with a suffix (``double.10``) is a list helper that linking renamed: the derivative, called from the
    ``@njit`` code being differentiated, of a function growing a list. Refused in the user's terms (until
    2026-12-07 a bare ``KeyError``; read without the suffix, the derivative never returned: a user-style probe).
    """
    if kind not in _HINTS:
        raise EnzymeError(
            "pyjlad cannot differentiate this: it calls the derivative (pyjlad.grad) of a function that grows a "
            "list, from the @njit code being differentiated (a gradient penalty, a Jacobian of a gradient). Fill a "
            "preallocated NumPy array in that function instead of growing a list, or use pyjlad.hessian on it")
    hint, own = _HINTS[kind]
    return f"{line[:len(line) - len(line.lstrip())]}call void {hint}(ptr {pointer}, i64 {own if size is None else size})"


def hint_list_types(module: Module) -> Module:
    r"""``module`` with Enzyme's type hints where lists grow (after :func:`type_list_growth`): in each
    ``@pyjlad_list_realloc.<kind>``, its header copy as integers and its item copy as ``<kind>``; in each function
    that grows a list, the fill of its new slots (a ``memset`` of the payload) as ``<kind>`` (a zero fill of float
    items made a loop of ``0.0`` stores). Changed in place.

    Separate from :func:`type_list_growth` because only the module Enzyme gets may call the hints (Enzyme removes
    them; the portable module runs elsewhere too).

    Examples
    --------
    >>> from pyjlad.ir.module import parse
    >>> m = parse("define void @f(ptr %mi) {\n"
    ...           "  %p = call ptr @pyjlad_list_realloc.double(ptr nonnull %mi, i64 56, i64 24)\n"
    ...           "  %f = getelementptr i8, ptr %mi, i64 24\n  %d = load ptr, ptr %f, align 8\n"
    ...           "  %i = getelementptr inbounds i8, ptr %d, i64 24\n"
    ...           "  call void @llvm.memset.p0.i64(ptr align 1 %i, i8 0, i64 32, i1 false)\n  ret void\n}\n")
    >>> text = hint_list_types(m).render()
    >>> print("\n".join(text.splitlines()[:7]))
    define void @f(ptr %mi) {
      %p = call ptr @pyjlad_list_realloc.double(ptr nonnull %mi, i64 56, i64 24)
      %f = getelementptr i8, ptr %mi, i64 24
      %d = load ptr, ptr %f, align 8
      %i = getelementptr inbounds i8, ptr %d, i64 24
      call void @pyjlad.zero.double(ptr %i, i64 32)
      ret void
    >>> "define internal void @pyjlad.zero.double(ptr %p, i64 %bytes)" in text
    True

    The zero fill of float items is a loop of ``0.0`` stores, of integer items a call of
    ``@pyjlad.zero.integer``, whose pointer is typed (:func:`_zero_fill`); a fill of other items (array structs),
    or of other bytes, keeps its ``memset`` after a hint (``call void @__enzyme_pointer(ptr %i, i64 8)``).
    """
    kinds: set[str] = set()
    loops: set[tuple[str, str]] = set()
    for function in module.definitions:
        body = function.body or []
        own = function.symbol[len(LIST_REALLOC) + 1:] if function.symbol.startswith(LIST_REALLOC + ".") else None
        lists = {} if own else _grown(body)
        if own not in _HINTS and not lists:
            continue
        definitions = _definitions(body)
        rewritten = []
        for line in body:
            instruction = parse_instruction(line) if "@llvm.mem" in line else None
            call = instruction.call() if instruction is not None else None
            if call is not None and call.callee.startswith("@llvm.memcpy.") and own in _HINTS:
                kind = "integer" if call.values[2] == "%header" else own
                if kind in _ELEMENT_CALLS and call.values[2] != "%header" and call.callee.endswith(".i64"):
                    # the items: a loop of floats, or integers in a typed call of their own (_zero_fill says why)
                    indent = line[:len(line) - len(line.lstrip())]
                    rewritten.append(element_loop_call(indent, "copy", kind, call.values[:2], call.values[2]))
                    loops.add(("copy", kind))
                    continue
                rewritten.extend(_hint(line, p, kind) for p in call.values[:2])
                kinds.add(kind)
            elif call is not None and call.callee.startswith("@llvm.memset.") and lists and call.values:
                mi = _list_of(call.values[0], definitions, lists)
                if mi is not None and _zero_fill(instruction, lists[mi]):
                    indent = line[:len(line) - len(line.lstrip())]
                    rewritten.append(element_loop_call(indent, "zero", lists[mi], call.values[:1], call.values[2]))
                    loops.add(("zero", lists[mi]))
                    continue
                if mi is not None:
                    rewritten.append(_hint(line, call.values[0], lists[mi]))
                    kinds.add(lists[mi])
            elif lists and (stored := _integer_constant_stored(line)) is not None:
                mi = _list_of(stored[0], definitions, lists)
                if mi is not None and lists[mi] == "integer":
                    rewritten.append(_hint(line, stored[0], "integer", stored[1]))
                    kinds.add("integer")
            rewritten.append(line)
        function.body = rewritten
    for kind in sorted(kinds):
        declare(module, f"declare void {_HINTS[kind][0]}(ptr nocapture readnone, i64) readnone nounwind willreturn")
    return define_element_loops(module, loops)


def _integer_constant_stored(line: str) -> tuple[str, int] | None:
    """The address and bytes of ``line``'s store of an integer constant (``store i64 0, ptr %p``), else ``None``.

    Into an integer list's payload (a list literal's items, ``[0]``): Enzyme cannot tell a constant's type from the
    constant (``0`` may be a null pointer), and a Hessian-vector product of such a list was refused ("Cannot deduce
    type of store") until a hint said integer.

    Examples
    --------
    >>> _integer_constant_stored("  store i64 0, ptr %.75, align 1"), _integer_constant_stored("store i8 1, ptr %f")
    (('%.75', 8), ('%f', 1))
    >>> _integer_constant_stored("  store i64 %k, ptr %.75, align 8") is None
    True
    """
    if not line.lstrip().startswith("store i"):  # (most lines: not read further)
        return None
    parts = words(tokenize(line))
    if len(parts) < 5 or parts[0] != "store" or parts[1] not in _INTEGERS or parts[3] != "ptr":
        return None
    value, pointer = parts[2].rstrip(","), parts[4].rstrip(",")
    return (pointer, SCALAR_BYTES[parts[1]]) if value.lstrip("-").isdigit() and pointer.startswith("%") else None


#: The integer types a list's payload is stored with.
_INTEGERS = ("i8", "i16", "i32", "i64")


def _zero_fill(instruction: Instruction, kind: str) -> bool:
    """Whether ``instruction`` (a ``memset`` of a list's new slots) fills float or integer items with zeros, over
    an ``i64`` length: then it becomes a loop of ``0.0`` stores, or for integers a fill in a function whose pointer
    is typed (:func:`pyjlad.ir.edit.element_loop_call`), which Enzyme types in every mode, as the copy of the items
    in ``@pyjlad_list_realloc.<kind>`` becomes. Annotated with a hint instead, their own derivatives (a ``memset``
    or ``memcpy`` of the tangents) were met untyped by a Hessian-vector product, which was refused (for integer
    lists until 2026-12-07: an index list in a function given to ``pyjlad.hessian``)."""
    call = instruction.call()
    return (kind in _ELEMENT_CALLS and call is not None and call.callee.endswith(".i64")
            and len(call.values) >= 3 and call.values[1] == "0" and not instruction.result)
