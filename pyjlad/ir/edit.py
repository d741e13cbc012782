"""Small edits of a parsed :class:`~pyjlad.ir.Module` that module passes share.

Each edits the module in place, re-rendering only what it changes: every other byte stays as it was
(see :func:`pyjlad.ir.parse`).

* :func:`rename_callees`: rename functions where they are called and where they are declared or
  defined (a ``global`` token written directly before ``(``), never inside ``c"..."`` data,
  quoted strings or comments.
* :func:`drop_repeated_declarations`: keep the first ``declare`` of each symbol.
* :func:`declare`: append a declaration unless the module already has the function.
* :func:`drop_attributes`: remove function attributes from every attribute group.
* :func:`tag_integer_accesses`: give every integer load and store one TBAA type, "long".
* :func:`tag_float_accesses`: give every float load and store its TBAA type, "double" or "float".
* :func:`mark_enzyme_calls`: give every ``__enzyme_autodiff``/``__enzyme_fwddiff`` call one more marker.
* :func:`type_float_copies`: tell Enzyme what a ``memcpy``/``memmove`` of float array elements copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..errors import IRError
from .downlevel import tokenize_attributes
from .instructions import parse_instruction, significant
from .lexer import closing, decode_name, split_top_level, substitute, symbol_for, tokenize
from .module import AttributeGroup, Function, GlobalVariable, Metadata, Module, parse
from .rewrite import map_items

__all__ = ["rename_callees", "renamed_line", "drop_repeated_declarations", "declare", "drop_attributes",
           "drop_empty_attribute_groups", "tag_float_accesses", "tag_integer_accesses", "mark_enzyme_calls", "type_float_copies",
           "type_float_fills", "float_copies_as_loops", "element_loop_call", "define_element_loops",
           "FLOAT_TYPE_HINTS", "type_hint_declaration"]


def _functions(module: Module) -> list[Function]:
    """Every ``define`` and ``declare`` of ``module``, in order (repeated declarations included)."""
    return [item for item in module.items if isinstance(item, Function)]


def renamed_line(line: str, rename: Callable[[str], str | None]) -> str:
    """``line`` with each ``@symbol(`` renamed as ``rename`` says; the line itself when nothing changes."""
    if "@" not in line:
        return line
    tokens = tokenize(line)
    out, changed = [], False
    for index, token in enumerate(tokens):
        text = token.text
        if token.kind == "global" and index + 1 < len(tokens) and tokens[index + 1].text == "(":
            new = rename(decode_name(text))
            if new is not None:
                text, changed = symbol_for(new), True
        out.append(text)
    return "".join(out) if changed else line


def rename_callees(module: Module, rename: Callable[[str], str | None]) -> Module:
    """Rename functions at their call sites and in their own ``define``/``declare`` headers.

    A function's name is renamed where it is written directly before ``(``: the callee of a
    ``call``/``invoke`` and the name in a header. Uses as a value (``ptr @f`` in a global's
    initializer, a metadata node) are left alone, as are ``c"..."`` data, quoted strings and comments.

    Parameters
    ----------
    module : Module
        Edited in place.
    rename : callable
        Given a function's name (no ``@``, quotes decoded), returns its new name, or ``None`` to keep it.

    Returns
    -------
    Module
        ``module``.

    Examples
    --------
    >>> m = parse("declare double @sin(double)\\n"
    ...           "define double @f(double %x) {\\n  %y = call double @sin(double %x) ; @sin(\\n  ret double %y\\n}\\n")
    >>> print(rename_callees(m, {"sin": "__nv_sin"}.get).render(), end="")
    declare double @__nv_sin(double)
    define double @f(double %x) {
      %y = call double @__nv_sin(double %x) ; @sin(
      ret double %y
    }
    """
    for function in _functions(module):
        new = rename(function.name)
        if new is not None:
            function.symbol = symbol_for(new)
        if function.body is not None:
            function.body = [renamed_line(line, rename) for line in function.body]
    return module


def drop_repeated_declarations(module: Module) -> Module:
    """Keep only the first ``declare`` of each symbol (after a rename, two may name one function).

    Examples
    --------
    >>> m = parse("declare double @g(double)\\ndeclare double @g(double)\\ndeclare double @h(double)\\n")
    >>> print(drop_repeated_declarations(m).render(), end="")
    declare double @g(double)
    declare double @h(double)
    """
    seen: set[str] = set()
    kept = []
    for item in module.items:
        if isinstance(item, Function) and item.is_declaration:
            if item.symbol in seen:
                continue
            seen.add(item.symbol)
        kept.append(item)
    module.items = kept
    return module


def declare(module: Module, declaration: str) -> bool:
    """Append ``declaration`` (one ``declare`` line) unless the module declares or defines that function.

    Returns
    -------
    bool
        Whether it was appended.

    Raises
    ------
    IRError
        If ``declaration`` is not one ``declare`` line.

    Examples
    --------
    >>> m = parse("declare void @free(ptr nocapture)\\n")
    >>> declare(m, "declare void @free(ptr)"), declare(m, "declare void @abort()")
    (False, True)
    >>> print(m.render(), end="")
    declare void @free(ptr nocapture)
    declare void @abort()
    """
    items = parse(declaration + "\n").items
    function = items[0] if len(items) == 1 else None
    if not isinstance(function, Function) or not function.is_declaration:
        raise IRError(f"not a declaration: {declaration!r}")
    if any(f.name == function.name for f in _functions(module)):
        return False
    module.items.append(function)
    module.trailing_newline = True
    return True


def drop_attributes(module: Module, names: frozenset[str]) -> Module:
    r"""``module`` with the attributes ``names`` (keywords such as ``argmemonly``, or the quoted keys of string
    attributes such as ``"target-cpu"``) removed from every attribute group, in place. Dropping a function
    attribute is always safe.

    Examples
    --------
    >>> m = parse("define void @f() #0 {\n  ret void\n}\n\nattributes #0 = { nounwind argmemonly }\n")
    >>> print(drop_attributes(m, frozenset({"argmemonly"})).render().splitlines()[-1])
    attributes #0 = { nounwind }
    >>> m = parse('define void @f() #0 {\n  ret void\n}\n\nattributes #0 = { nounwind "target-cpu"="znver3" }\n')
    >>> print(drop_attributes(m, frozenset({'"target-cpu"'})).render().splitlines()[-1])
    attributes #0 = { nounwind }
    """
    for item in module.items:
        if isinstance(item, AttributeGroup):
            tokens = [t for entry in item.attributes for t in tokenize_attributes(entry)]
            kept = [t for t in tokens if t not in names and t.split("=", 1)[0] not in names]
            if len(kept) != len(tokens):
                item.attributes = [" ".join(kept)] if kept else []
    return drop_empty_attribute_groups(module)


def drop_empty_attribute_groups(module: Module) -> Module:
    r"""``module`` without its empty attribute groups (``attributes #1 = { }``, which no LLVM version reads)
    and without the references to them (``#1`` after a function's header, a call or a global), in place.

    Passes that drop attributes leave such groups when every attribute of a group goes (the CPU
    attributes ``opt -mcpu`` puts on each function, for instance).

    Examples
    --------
    >>> m = parse("declare void @g() #1\n\ndefine void @f() #0 {\n  call void @g() #1\n  ret void\n}\n\n"
    ...           "attributes #0 = { nounwind }\nattributes #1 = { }\n")
    >>> print(drop_empty_attribute_groups(m).render(), end="")
    declare void @g()
    <BLANKLINE>
    define void @f() #0 {
      call void @g()
      ret void
    }
    <BLANKLINE>
    attributes #0 = { nounwind }
    """
    empty = {item.ref for item in module.items
             if isinstance(item, AttributeGroup) and not any(a.strip() for a in item.attributes)}
    if not empty:
        return module
    module.items = [i for i in module.items if not (isinstance(i, AttributeGroup) and i.ref in empty)]
    for item in module.items:
        if isinstance(item, Function):
            item.attributes = [a for a in item.attributes if a not in empty]
            if item.body is not None:
                item.body = [_without_groups(line, empty) for line in item.body]
    map_items(module, lambda text: _without_groups(text, empty),
              where=lambda item: not isinstance(item, (Function, AttributeGroup)))
    return module


def _without_groups(text: str, refs: set[str]) -> str:
    """``text`` without its ``#N`` tokens naming one of ``refs`` (and the space before each)."""
    if "#" not in text:
        return text
    return substitute(text, "attrgroup", lambda ref: "\0" if ref in refs else ref).replace(" \0", "").replace("\0", "")


#: The TBAA type :func:`tag_integer_accesses` gives each integer element type (i8 is left alone: C's char type
#: aliases all).
_INTEGER_TYPES = {"i16": "long", "i32": "long", "i64": "long"}
#: The TBAA type :func:`tag_float_accesses` gives each float element type (the names Enzyme's type analysis reads).
_FLOAT_TYPES = {"double": "double", "float": "float"}


def tag_integer_accesses(module: Module) -> Module:
    r"""``module`` with a TBAA tag of type ``"long"`` on every load and store of an integer or a vector of
    integers (16 to 64 bits) that has none, in place: what Enzyme's type analysis reads to know that memory
    holds integers, where nothing else tells it (an ``np.arange`` filled by a vectorized loop, in forward mode).

    One type for all of them: LLVM learns no more about aliasing than without tags (two accesses with the same
    type may alias, as may an access without a tag and any other), so the tags cannot change what the
    optimizer may do; they only type the memory.

    Examples
    --------
    >>> m = parse("define void @f(ptr %p) {\n  store <4 x i64> zeroinitializer, ptr %p, align 8\n"
    ...           "  %v = load double, ptr %p, align 8\n  ret void\n}\n")
    >>> print(tag_integer_accesses(m).render(), end="")
    define void @f(ptr %p) {
      store <4 x i64> zeroinitializer, ptr %p, align 8, !tbaa !3
      %v = load double, ptr %p, align 8
      ret void
    }
    !0 = !{!"Simple C/C++ TBAA"}
    !1 = !{!"omnipotent char", !0, i64 0}
    !2 = !{!"long", !1, i64 0}
    !3 = !{!2, !2, i64 0}
    """
    return _tag_accesses(module, _INTEGER_TYPES)


def tag_float_accesses(module: Module) -> Module:
    r"""``module`` with a TBAA tag of type ``"double"`` (``"float"``) on every load and store of a ``double``
    (``float``) or a vector of them that has none, in place: what Enzyme's type analysis reads to know that
    memory holds floats. Numba's array elements carry no such tag, and Enzyme v0.0.289 does not take an LLVM
    ``double`` for a float: where nothing else types a value (the tangent a forward derivative loads from a
    shadow, which a Hessian-vector product's reverse sweep differentiates) it stops, and with loose types it
    builds a derivative that can be wrong (:mod:`pyjlad.engines.differentiate` tries this before them).

    Each type in a type tree of its own (its own root): LLVM takes two accesses whose types have different roots
    to alias, as it does an access without a tag and any other, so the tags tell it nothing about aliasing (a
    float store and an integer load of the same memory, :func:`tag_integer_accesses`'s, may still alias); they
    only type the memory for Enzyme.

    Examples
    --------
    >>> m = parse("define void @f(ptr %p) {\n  %v = load <2 x double>, ptr %p, align 8\n"
    ...           "  store i64 0, ptr %p, align 8\n  store atomic float 0.0, ptr %p seq_cst, align 4\n"
    ...           "  ret void\n}\n")
    >>> print(tag_float_accesses(m).render(), end="")
    define void @f(ptr %p) {
      %v = load <2 x double>, ptr %p, align 8, !tbaa !3
      store i64 0, ptr %p, align 8
      store atomic float 0.0, ptr %p seq_cst, align 4
      ret void
    }
    !0 = !{!"pyjlad TBAA: double"}
    !1 = !{!"omnipotent char", !0, i64 0}
    !2 = !{!"double", !1, i64 0}
    !3 = !{!2, !2, i64 0}
    """
    return _tag_accesses(module, _FLOAT_TYPES, own_roots=True)


def _tag_accesses(module: Module, types: dict[str, str], own_roots: bool = False) -> Module:
    """``module`` with a TBAA tag on every non-atomic load and store of an element type ``types`` names (or a
    vector of one) that has no tag: the TBAA type ``types`` gives that element type. In place. With
    ``own_roots``, each TBAA type in a type tree of its own (see :func:`tag_float_accesses`)."""
    found = [(body, index, types[element]) for function in module.definitions
             for body in [function.body or []] for index, line in enumerate(body)
             if "tbaa" not in line and (element := _accessed_element(line)) in types]
    if not found:
        return module
    numbers = [int(symbol[1:]) for symbol in module.metadata if symbol[1:].isdigit()]
    next_number = max(numbers, default=-1) + 1
    tags: dict[str, str] = {}
    root = None
    for name in dict.fromkeys(name for _, _, name in found):
        if root is None or own_roots:
            root = f"!{next_number}"
            title = f"pyjlad TBAA: {name}" if own_roots else "Simple C/C++ TBAA"
            module.items += [Metadata(root, f'!{{!"{title}"}}'),
                             Metadata(f"!{next_number + 1}", f'!{{!"omnipotent char", {root}, i64 0}}')]
            char, next_number = f"!{next_number + 1}", next_number + 2
        node, tags[name] = f"!{next_number}", f"!{next_number + 1}"
        module.items += [Metadata(node, f'!{{!"{name}", {char}, i64 0}}'),
                         Metadata(tags[name], f"!{{{node}, {node}, i64 0}}")]
        next_number += 2
    for body, index, name in found:
        body[index] = body[index].rstrip() + f", !tbaa {tags[name]}"
    return module


def _accessed_element(line: str) -> str | None:
    """The element type body ``line`` loads or stores (of a vector: its elements'), where it is a non-atomic,
    non-volatile ``load``/``store``; else ``None``."""
    if "load" not in line and "store" not in line:
        return None
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode not in ("load", "store"):
        return None
    words = [t.text for t in significant(list(instruction.tokens))]
    start = words.index(instruction.opcode) + 1
    if start < len(words) and words[start] in ("atomic", "volatile"):
        return None  # (left as they are)
    first = words[start:start + 4]
    if first[:1] == ["<"] and len(first) == 4 and first[2] == "x":
        return first[3]
    return first[0] if first else None


#: The calls Enzyme lowers (pyjlad's own ``__enzyme_fwddiff_<suffix>`` names included).
_ENZYME_CALLS = ("@__enzyme_autodiff", "@__enzyme_fwddiff")


def mark_enzyme_calls(module: Module, marker: str) -> Module:
    r"""``module`` with Enzyme's marker ``marker`` (a flag such as ``enzyme_runtime_activity``, which takes no
    value) passed to every call of ``__enzyme_autodiff*``/``__enzyme_fwddiff*``, right after the function
    differentiated, and the marker's global declared, in place. A call that passes it already is left alone.

    Examples
    --------
    >>> m = parse("declare void @__enzyme_autodiff(...)\n@enzyme_dup = external global i32\n"
    ...           "define void @d(ptr %x, ptr %dx) {\n"
    ...           "  call void (...) @__enzyme_autodiff(ptr @f, ptr @enzyme_dup, ptr %x, ptr %dx)\n  ret void\n}\n")
    >>> print(mark_enzyme_calls(m, "enzyme_runtime_activity").render(), end="")
    declare void @__enzyme_autodiff(...)
    @enzyme_dup = external global i32
    define void @d(ptr %x, ptr %dx) {
      call void (...) @__enzyme_autodiff(ptr @f, ptr @enzyme_runtime_activity, ptr @enzyme_dup, ptr %x, ptr %dx)
      ret void
    }
    @enzyme_runtime_activity = external global i32
    """
    symbol = symbol_for(marker)
    marked = False
    for function in module.definitions:
        body = function.body or []
        for index, line in enumerate(body):
            if "@__enzyme_" in line:
                new = _marked_call(line, symbol)
                marked |= new != line
                body[index] = new
    if marked and not any(isinstance(item, GlobalVariable) and item.symbol == symbol for item in module.items):
        module.items.append(GlobalVariable(symbol, ["external"], "global", "i32"))
        module.trailing_newline = True
    return module


def _marked_call(line: str, symbol: str) -> str:
    """Body ``line`` with ``ptr <symbol>`` after the first argument if it calls one of :data:`_ENZYME_CALLS`."""
    instruction = parse_instruction(line)
    call = instruction.call() if instruction is not None else None
    if call is None or not call.callee.startswith(_ENZYME_CALLS) or symbol in call.values:
        return line
    tokens = list(instruction.tokens)
    start = next(k for k, t in enumerate(tokens) if t.text == call.callee and k + 1 < len(tokens)
                 and tokens[k + 1].text == "(") + 1
    first = split_top_level(tokens[start + 1:closing(tokens, start)])[0]
    cut = start + 1 + len(first)  # the comma after the function (or the closing parenthesis)
    head = "".join(t.text for t in tokens[:cut])
    rest = "".join(t.text for t in tokens[cut:])
    return f"{head}, ptr {symbol}{rest}"


#: Enzyme's type annotation for each float element type: ``@<hint>(ptr p, i64 n)`` says ``p`` points to
#: that type in its first ``n`` bytes (removed by the optimizer after Enzyme; also used by the drivers).
FLOAT_TYPE_HINTS = {"double": ("__enzyme_double", 8), "float": ("__enzyme_float", 4)}


def type_hint_declaration(hint: str) -> str:
    """The ``declare`` line of Enzyme's type annotation ``hint`` (a name of :data:`FLOAT_TYPE_HINTS`, or
    ``__enzyme_pointer``: the memory holds pointers)."""
    return f"declare void @{hint}(ptr nocapture readnone, i64) readnone nounwind willreturn"


def type_float_copies(module: Module) -> Module:
    r"""``module`` with a type annotation before every call (``llvm.memcpy``, ``llvm.memmove``, a function
    of Numba's) passed an element of a float array (a ``getelementptr double``/``float``: the code indexes
    that memory as floats) or the pointer such an element is indexed from, in place:
    ``call void @__enzyme_double(ptr %p, i64 8)`` says the element at ``%p`` is a double.

    Enzyme must know what a copy copies to copy its adjoint too; it learns a temporary array's type from
    the element the code stores at its start, so a copy from an element further in (``y[k:].copy()``, or
    ``y[k:].flatten()`` and ``np.median(y[k:])``, which copy in a function of their own, of a temporary
    ``y``) had no type: with loose types Enzyme took it for integers and the gradient through it was zero.

    Examples
    --------
    >>> m = parse("define void @f(ptr %a, ptr %b, i64 %k, i64 %n) {\n"
    ...           "  %p = getelementptr double, ptr %a, i64 %k\n"
    ...           "  call void @llvm.memcpy.p0.p0.i64(ptr %b, ptr %p, i64 %n, i1 false)\n  ret void\n}\n")
    >>> print(type_float_copies(m).render(), end="")
    define void @f(ptr %a, ptr %b, i64 %k, i64 %n) {
      %p = getelementptr double, ptr %a, i64 %k
      call void @__enzyme_double(ptr %p, i64 8)
      call void @llvm.memcpy.p0.p0.i64(ptr %b, ptr %p, i64 %n, i1 false)
      ret void
    }
    declare void @__enzyme_double(ptr nocapture readnone, i64) readnone nounwind willreturn

    A vectorized gather's addresses (``getelementptr double, <4 x ptr> %v, <4 x i64> %i``) are not typed:
    the hint takes one pointer.

    >>> m = parse("define void @f(<4 x ptr> %a, <4 x i64> %i, ptr %b) {\n"
    ...           "  %p = getelementptr double, <4 x ptr> %a, <4 x i64> %i\n"
    ...           "  %g = call <4 x double> @llvm.masked.gather.v4f64.v4p0(<4 x ptr> %p, i32 8, <4 x i1> "
    ...           "<i1 true, i1 true, i1 true, i1 true>, <4 x double> poison)\n  ret void\n}\n")
    >>> "__enzyme_double" in type_float_copies(m).render()
    False
    """
    used: set[str] = set()
    for function in module.definitions:
        body = function.body or []
        elements = _float_elements(body)
        typed = []
        for line in body:
            if elements and "call" in line and "@__enzyme_" not in line:
                instruction = parse_instruction(line)
                call = instruction.call() if instruction is not None else None
                if call is not None and call.callee.startswith("@"):
                    indent = line[: len(line) - len(line.lstrip())]
                    for value in dict.fromkeys(v for v in call.values if v in elements):
                        hint, size = FLOAT_TYPE_HINTS[elements[value]]
                        typed.append(f"{indent}call void @{hint}(ptr {value}, i64 {size})")
                        used.add(hint)
            typed.append(line)
        function.body[:] = typed
    for hint in sorted(used):
        declare(module, type_hint_declaration(hint))
    return module


def type_float_fills(module: Module, float_callees: Mapping[str, str] | None = None) -> Module:
    r"""``module`` with every ``llvm.memset`` into a float array made a loop of float stores Enzyme types: a
    fill whose destination is an element of one (:func:`_float_elements`: the code indexes that memory as
    floats, or passes it to a function of ``float_callees``, each ``@name`` mapped to the element type of every
    pointer it takes: Numba's BLAS helpers), or computed from such a pointer by byte offsets (``getelementptr i8``) and ``phi``/``select`` joins,
    as LLVM's loop idiom writes the fill of each row of a 2-D array (``acc[:, :] = 0.0``, its row pointer
    stepped by a loop's ``phi``) or of a slice further in (``acc[1:] = 0.0``). A fill of
    zero bytes becomes a call of ``@pyjlad.zero.double`` (``float``), which stores ``0.0`` element by element;
    any other fill keeps its ``memset``, after a type annotation (``@__enzyme_double(ptr %p, i64 8)``).

    Enzyme v0.0.289 zeroes the adjoint of memory a ``memset`` overwrites in the reverse sweep only where it
    types the destination as floats; otherwise it fills the shadow in the forward sweep, where it is still
    zero, and the adjoint of the values the fill overwrote flows on to whatever wrote them before. A 2-D
    accumulator zeroed each time step so gave a silently wrong gradient (off by 14% after 2 steps); with
    loose types, ``acc[1:] = 0.0`` gave one the loose-types check refused. An annotation alone fixed the
    gradient, not a Hessian-vector product: Enzyme's forward derivative fills the tangent with a ``memset``
    of its own, unannotated, which the reverse sweep over it met untyped. Stores of ``0.0`` are typed in
    every mode, and LLVM makes the loop a ``memset`` again once Enzyme is done.

    Examples
    --------
    >>> m = parse("define void @f(ptr %a, i64 %k, i64 %n) {\n"
    ...           "  %e = getelementptr double, ptr %a, i64 %k\n"
    ...           "  %row = getelementptr inbounds i8, ptr %a, i64 %k\n"
    ...           "  tail call void @llvm.memset.p0.i64(ptr align 8 %row, i8 0, i64 %n, i1 false)\n"
    ...           "  tail call void @llvm.memset.p0.i64(ptr align 8 %e, i8 -1, i64 %n, i1 false)\n"
    ...           "  ret void\n}\n")
    >>> text = type_float_fills(m).render()
    >>> print("\n".join(text.splitlines()[:7]))
    define void @f(ptr %a, i64 %k, i64 %n) {
      %e = getelementptr double, ptr %a, i64 %k
      %row = getelementptr inbounds i8, ptr %a, i64 %k
      call void @pyjlad.zero.double(ptr %row, i64 %n)
      call void @__enzyme_double(ptr %e, i64 8)
      tail call void @llvm.memset.p0.i64(ptr align 8 %e, i8 -1, i64 %n, i1 false)
      ret void
    >>> "define internal void @pyjlad.zero.double(ptr %p, i64 %bytes)" in text
    True

    A fill of memory the code does not index as floats (an integer array, a structure) is left as it is.
    """
    hints: set[str] = set()
    zeroed: set[str] = set()
    for function in module.definitions:
        body = function.body or []
        if not any("@llvm.memset" in line for line in body):
            continue
        elements = _float_elements(body, float_callees)
        sources = _pointer_sources(body)
        typed = []
        for line in body:
            instruction = parse_instruction(line) if elements and "@llvm.memset" in line else None
            call = instruction.call() if instruction is not None else None
            kind = (_float_kind(call.values[0], elements, sources)
                    if call is not None and call.callee.startswith("@llvm.memset") and len(call.values) >= 3
                    else None)
            if kind is None:
                typed.append(line)
                continue
            indent = line[: len(line) - len(line.lstrip())]
            destination, value, length = call.values[:3]
            if value == "0" and call.callee.endswith(".i64") and not instruction.result:
                typed.append(element_loop_call(indent, "zero", kind, [destination], length))
                zeroed.add(kind)
                continue
            hint, size = FLOAT_TYPE_HINTS[kind]
            typed += [f"{indent}call void @{hint}(ptr {destination}, i64 {size})", line]
            hints.add(hint)
        function.body[:] = typed
    for hint in sorted(hints):
        declare(module, type_hint_declaration(hint))
    return define_element_loops(module, (("zero", kind) for kind in zeroed))


def element_loop_call(indent: str, loop: str, kind: str, pointers: Sequence[str], length: str) -> str:
    """The line calling ``@pyjlad.<loop>.<kind>`` over the ``length`` bytes (an ``i64``) at ``pointers``: ``zero``
    (one pointer) stores ``0.0`` into each ``kind`` element (``double``, ``float``), ``copy`` (destination,
    source) copies each. Loops of float loads and stores, which Enzyme types in every mode, where a ``memset`` or
    ``memcpy``'s own derivative (a fill or copy of the tangent, unannotated) is met untyped by a second
    derivative. Of ``integer`` memory (of any width): a ``memset`` or ``memcpy`` in a function of its own whose
    pointers are typed as pointing to integers (``"enzyme_type"``), in every mode, which must not be inlined
    before Enzyme runs. The module must define the function (:func:`define_element_loops`).

    Examples
    --------
    >>> element_loop_call("  ", "zero", "float", ["%row"], "%n")
    '  call void @pyjlad.zero.float(ptr %row, i64 %n)'
    >>> element_loop_call("", "copy", "double", ["%to", "%from"], "%n")
    'call void @pyjlad.copy.double(ptr %to, ptr %from, i64 %n)'
    """
    return f"{indent}call void @pyjlad.{loop}.{kind}({', '.join(f'ptr {p}' for p in pointers)}, i64 {length})"


def define_element_loops(module: Module, loops: Iterable[tuple[str, str]]) -> Module:
    """``module`` with ``@pyjlad.<loop>.<kind>`` defined for each ``(loop, kind)`` of ``loops`` (see
    :func:`element_loop_call`) it does not define yet. Changed in place."""
    defined = {function.symbol for function in module.definitions}
    definitions = {"zero": _zero_definition, "copy": _copy_definition}
    for loop, kind in sorted(set(loops)):
        if f"@pyjlad.{loop}.{kind}" not in defined:
            text = _integer_definition(loop) if kind == "integer" else definitions[loop](kind)
            module.items.extend(parse(text).items)
    return module


#: A pointer parameter Enzyme takes as pointing to integers at every offset, whatever the mode.
_INTEGER_MEMORY = '"enzyme_type"="{[-1]:Pointer, [-1,-1]:Integer}"'


def _integer_definition(loop: str) -> str:
    """``@pyjlad.zero.integer(ptr %p, i64 %bytes)`` (a zero fill) or ``@pyjlad.copy.integer(ptr %to, ptr %from, i64
    %bytes)``: of integer memory, so typed by the parameters' ``"enzyme_type"``; ``noinline``, so that the types
    reach Enzyme (LLVM inlines it once Enzyme is done).

    Examples
    --------
    >>> print(_integer_definition("zero").splitlines()[0])
    define internal void @pyjlad.zero.integer(ptr "enzyme_type"="{[-1]:Pointer, [-1,-1]:Integer}" %p, i64 %bytes) noinline {
    """
    if loop == "zero":
        pointers, body = f"ptr {_INTEGER_MEMORY} %p", "call void @llvm.memset.p0.i64(ptr align 1 %p, i8 0, i64 %bytes, i1 false)"
    else:
        pointers = f"ptr {_INTEGER_MEMORY} %to, ptr {_INTEGER_MEMORY} %from"
        body = "call void @llvm.memcpy.p0.p0.i64(ptr align 1 %to, ptr align 1 %from, i64 %bytes, i1 false)"
    return (f"define internal void @pyjlad.{loop}.integer({pointers}, i64 %bytes) noinline {{\n"
            f"entry:\n  {body}\n  ret void\n}}\n")


def float_copies_as_loops(module: Module) -> Module:
    r"""``module`` with every ``llvm.memcpy`` from or into a float array (found as :func:`type_float_fills` finds
    a fill's) made a call of ``@pyjlad.copy.double`` (``float``), which loads and stores the elements one by one.

    For a Hessian-vector product (reverse over forward). Enzyme v0.0.289's forward derivative of a copy from
    memory with no tangent (``u = u0.copy()`` of an argument held constant) fills the copy's tangent with a
    ``memset`` of its own, which the reverse sweep over it cannot type whatever annotates the copy; with loose
    types that product was wrong. A loop's tangent is stores of ``0.0``, typed, and LLVM makes the loop a
    ``memcpy`` again once Enzyme is done. A copy whose length is not an ``i64`` or that is volatile is left.

    Examples
    --------
    >>> m = parse("define void @f(ptr %a, ptr %b, i64 %k, i64 %n) {\n"
    ...           "  %p = getelementptr double, ptr %a, i64 %k\n"
    ...           "  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %b, ptr align 8 %a, i64 %n, i1 false)\n"
    ...           "  ret void\n}\n")
    >>> text = float_copies_as_loops(m).render()
    >>> print(text.splitlines()[2])
      call void @pyjlad.copy.double(ptr %b, ptr %a, i64 %n)
    >>> "define internal void @pyjlad.copy.double(ptr %to, ptr %from, i64 %bytes)" in text
    True
    """
    kinds: set[str] = set()
    for function in module.definitions:
        body = function.body or []
        if not any("@llvm.memcpy.p0.p0.i64" in line for line in body):
            continue
        elements, sources = _float_elements(body), _pointer_sources(body)
        looped = []
        for line in body:
            instruction = parse_instruction(line) if elements and "@llvm.memcpy.p0.p0.i64" in line else None
            call = instruction.call() if instruction is not None else None
            if call is None or call.callee != "@llvm.memcpy.p0.p0.i64" or len(call.values) != 4 \
                    or call.values[3] != "false" or instruction.result:
                looped.append(line)
                continue
            destination, source, length = call.values[:3]
            kind = _float_kind(destination, elements, sources) or _float_kind(source, elements, sources)
            if kind is None:
                looped.append(line)
                continue
            indent = line[: len(line) - len(line.lstrip())]
            looped.append(element_loop_call(indent, "copy", kind, [destination, source], length))
            kinds.add(kind)
        function.body[:] = looped
    return define_element_loops(module, (("copy", kind) for kind in kinds))


#: The functions :func:`float_copies_as_loops` calls in place of a copy: ``@pyjlad.copy.<double|float>``.
_COPY = "pyjlad.copy"


def _copy_definition(kind: str) -> str:
    """``@pyjlad.copy.<kind>(ptr %to, ptr %from, i64 %bytes)``: copies each ``kind`` element of ``bytes`` bytes."""
    size = FLOAT_TYPE_HINTS[kind][1]
    return _element_loop(f"{_COPY}.{kind}", kind, "ptr %to, ptr %from",
                         [f"%s = getelementptr inbounds {kind}, ptr %from, i64 %i",
                          f"%d = getelementptr inbounds {kind}, ptr %to, i64 %i",
                          f"%v = load {kind}, ptr %s, align {size}",
                          f"store {kind} %v, ptr %d, align {size}"])


#: The functions :func:`type_float_fills` calls in place of a zero fill: ``@pyjlad.zero.<double|float>``.
_ZERO = "pyjlad.zero"


def _zero_definition(kind: str) -> str:
    """``@pyjlad.zero.<kind>(ptr %p, i64 %bytes)``: stores ``0.0`` into each ``kind`` element of ``bytes`` bytes
    (a fill with an ``i32`` length keeps its ``memset``, annotated: Numba's are ``llvm.memset.p0.i64``)."""
    size = FLOAT_TYPE_HINTS[kind][1]
    return _element_loop(f"{_ZERO}.{kind}", kind, "ptr %p",
                         [f"%a = getelementptr inbounds {kind}, ptr %p, i64 %i",
                          f"store {kind} 0.0, ptr %a, align {size}"])


def _element_loop(name: str, kind: str, pointers: str, step: list[str]) -> str:
    """``define internal void @name(pointers, i64 %bytes)`` running ``step`` for each ``kind`` element ``%i`` of
    ``bytes`` bytes (none when ``bytes`` holds less than one element)."""
    size = FLOAT_TYPE_HINTS[kind][1]
    lines = [f"define internal void @{name}({pointers}, i64 %bytes) {{", "entry:",
             f"  %n = udiv i64 %bytes, {size}", "  %empty = icmp eq i64 %n, 0",
             "  br i1 %empty, label %done, label %loop", "loop:",
             "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]", *(f"  {line}" for line in step),
             "  %next = add nuw i64 %i, 1", "  %more = icmp ult i64 %next, %n",
             "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


def _pointer_sources(body: list[str]) -> dict[str, list[str]]:
    """The pointers each pointer of ``body`` is computed from: the base of a ``getelementptr i8`` (a byte
    offset), the values a ``phi`` or ``select`` of pointers joins (a loop's pointer, strength-reduced by LLVM,
    stepping a row at a time)."""
    sources: dict[str, list[str]] = {}
    for line in body:
        if "getelementptr" not in line and " phi ptr " not in line and " select " not in line:
            continue
        instruction = parse_instruction(line)
        if instruction is None or not instruction.result or " x ptr>" in line:
            continue
        if instruction.opcode == "getelementptr" and " i8," in line:
            words = [t.text for t in significant(list(instruction.tokens))]
            after = [w for w in words[words.index("getelementptr") + 1:] if w not in ("inbounds", "nuw", "nusw")]
            if after[:1] == ["i8"] and "ptr" in after[:-1]:
                sources[instruction.result] = [after[after.index("ptr") + 1]]
        elif instruction.opcode == "phi":
            sources[instruction.result] = [value for value, _ in instruction.phi_incoming()]
        elif instruction.opcode == "select" and " ptr " in line:
            sources[instruction.result] = instruction.operands()[1:]
    return sources


def _float_kind(pointer: str, elements: dict[str, str], sources: dict[str, list[str]]) -> str | None:
    """The float element type of the array ``pointer`` lies in, found by following what it is computed from
    back to a pointer the code indexes as floats (``None``: none is found)."""
    todo, seen = [pointer], set()
    while todo:
        current = todo.pop()
        if current in elements:
            return elements[current]
        if current in seen:
            continue
        seen.add(current)
        todo += [v for v in sources.get(current, ()) if v.startswith("%")]
    return None


def _float_elements(body: list[str], float_callees: Mapping[str, str] | None = None) -> dict[str, str]:
    """The float element type (``double``/``float``) of each ``getelementptr <type>`` result in ``body``, of
    each pointer such an element is indexed from, and of each pointer passed to a function of ``float_callees``
    (its element type: the output of ``A @ v`` is indexed only by the BLAS call that fills it, and by the fill of
    its zero-length case)."""
    elements: dict[str, str] = {}
    for line in body:
        if float_callees and "call " in line:
            elements.update(_float_call_operands(line, float_callees))
        instruction = parse_instruction(line) if "getelementptr" in line else None
        if instruction is None or instruction.opcode != "getelementptr" or not instruction.result:
            continue
        words = [t.text for t in significant(list(instruction.tokens))]
        after = [w for w in words[words.index("getelementptr") + 1:] if w != "inbounds"]
        if "<" in after:  # a vector of addresses (a gather's): no pointer a hint can take
            continue
        if after and after[0] in FLOAT_TYPE_HINTS:
            elements[instruction.result] = after[0]
            base = after[after.index("ptr") + 1] if "ptr" in after[:-1] else ""
            if base.startswith("%"):
                elements.setdefault(base, after[0])
    return _through_joins(body, elements)


def _float_call_operands(line: str, float_callees: Mapping[str, str]) -> dict[str, str]:
    """The pointers ``line`` passes to a function of ``float_callees``, each with that function's element type.

    >>> _float_call_operands("  %r = call i32 @gemv.d(i8 100, ptr %a, i64 %n, ptr nonnull %y)", {"@gemv.d": "double"})
    {'%a': 'double', '%y': 'double'}
    """
    instruction = parse_instruction(line)
    call = instruction.call() if instruction is not None else None
    if call is None or call.callee not in float_callees:
        return {}
    kind = float_callees[call.callee]
    return {value: kind for argument, value in zip(call.arguments, call.values)
            if argument.startswith("ptr ") and value.startswith("%")}


def _through_joins(body: list[str], elements: dict[str, str]) -> dict[str, str]:
    """``elements`` with the pointers joined to them by a ``phi`` or ``select`` (either way): one array's data
    pointer through a loop (``u = u.copy()`` in a time loop: the copy's source and destination are the loop's
    ``phi`` and the new array, the code indexes only the ``phi`` after the loop). Constants join nothing:

    >>> _through_joins(["  %m = phi ptr [ %alloc, %b1 ], [ null, %b2 ]",
    ...                 "  %d = phi ptr [ %data, %b1 ], [ null, %b2 ]"], {"%data": "double"})
    {'%data': 'double', '%d': 'double'}
    """
    joins = []
    for line in body:
        if (" phi ptr " not in line and " select " not in line) or " x ptr>" in line:  # not vectors of them
            continue
        instruction = parse_instruction(line)
        if instruction is None or not instruction.result:
            continue
        if instruction.opcode == "phi":
            values = [value for value, _ in instruction.phi_incoming()]
        elif instruction.opcode == "select":
            values = instruction.operands()[1:]  # not the condition
        else:
            continue
        # Only the instruction's own values: a constant (null, undef, a global) joins nothing to anything (two
        # phis each taking null would otherwise join an allocation's meminfo to an array's data pointer).
        joins.append([instruction.result, *(v for v in values if v.startswith("%"))])
    changed = bool(elements)
    while changed:
        changed = False
        for values in joins:
            kind = next((elements[v] for v in values if v in elements), None)
            for v in values if kind is not None else ():
                if v not in elements:
                    elements[v], changed = kind, True
    return elements
