"""What Enzyme must be told about the bodies of Numba's parallel loops before it differentiates them in parallel.

In a parallel module (:mod:`pyjlad.parallel_derivatives`), a loop's body is Numba's parfor gufunc: a
wrapper reading each argument through the ``args`` array of pointers, and the body function it calls
with them. Enzyme differentiates the OpenMP task running it with atomic adds into shared adjoints, and
two things that are harmless in the serial derivative make it fail there (the serial derivative then
runs, with a warning):

* integers of the body without a type: a scalar argument (``k = w.shape[1]`` passed into the loop) is
  loaded from memory Enzyme cannot type, so it takes the integer for a possibly active value, and a
  ``trunc`` of it (LLVM's 32-bit fast path of ``i % k``) stops it: "Cannot deduce adding type (cast)".
  :func:`typed_body_integers` gives every integer parameter of a body function Enzyme's ``Integer`` type
  (Numba passes a float as ``double``/``float``, never as an integer);
* the elements of the arrays a body reads through ``args``: Enzyme's type analysis does not follow the
  pointers the caller stores there, and where the body copies part of an array (LLVM made ``u * 1.0`` a
  ``memcpy`` from the row's start), Enzyme could not type the copy at its offset (an index loaded from
  Numba's schedule, untyped memory too); with loose types, the last resort, it took the copied doubles for
  integers and the adjoint through the copy was lost (zero gradients, silently).
  :func:`typed_loop_arguments` gives each wrapper's ``args`` parameter Enzyme's type of what it points to:
  the schedule's integers and, at every offset, the elements of each float or integer array (``"enzyme_type"``);
* a ``freeze`` of an integer (LLVM's, on the remainder of ``i % m`` it branches on), which Enzyme's
  parallel reverse takes for a value with an adjoint: assertion ``addingType->isFPOrFPVectorTy()``
  (:func:`pyjlad.ir.rewrite.drop_integer_freezes`);
* the wrapper's path that turns an exception of the body into a Python exception. Once the body has raised,
  the wrapper sets pyjlad's failure flag (:func:`pyjlad.openmp_loops.openmp_parallel_loops`; pyjlad then
  calls the function itself for the exception), but went on to build the exception with Python's C API, on
  an OpenMP thread without the GIL, and, where the message formats run-time values (the shape check of
  ``ts[i, :] = b[i, :] / t`` with ``t`` an array), through a call of the body's argument builder by pointer,
  which Enzyme cannot differentiate ("No create nofree of unknown value"): an everyday ``prange`` loop ran
  serially. :func:`returning_error_paths` makes the wrapper return right after setting the flag.

Examples
--------
>>> text = prepared_loop_bodies(
...     "define i32 @_ZN8__numba_parfor_gufunc_1(ptr %retptr, i64 %arg.k, double %arg.a) {\\n"
...     "entry:\\n  %f = freeze i64 %arg.k\\n  %t = trunc i64 %f to i32\\n  ret i32 0\\n}\\n")
>>> print(text, end="")
define i32 @_ZN8__numba_parfor_gufunc_1(ptr %retptr, i64 "enzyme_type"="{[-1]:Integer}" %arg.k, double %arg.a) {
entry:
  %t = trunc i64 %arg.k to i32
  ret i32 0
}
"""

from __future__ import annotations

from collections.abc import Mapping

from .ir import Module, parse
from .ir.cfg import ControlFlow, blocks
from .ir.instructions import parse_instruction
from .ir.lexer import split_top_level, words
from .ir.rewrite import drop_integer_freezes
from .openmp_loops import FAILED_FLAG
from .private_adjoints import LoopLayout
from .private_bodies import BODY_PREFIX

__all__ = ["prepared_loop_bodies", "returning_error_paths", "typed_body_integers", "typed_loop_arguments"]

#: In the name of a parfor body's function (the gufunc's wrapper is ``__gufunc__.`` followed by it).
_BODY = "__numba_parfor_gufunc"
_WRAPPER = "__gufunc__."
_INTEGER = '"enzyme_type"="{[-1]:Integer}"'
_INTEGER_TYPES = frozenset({"i8", "i16", "i32", "i64"})


def typed_body_integers(module: Module) -> Module:
    """``module`` (edited in place) with each integer parameter of a parfor body function typed ``Integer`` for
    Enzyme (``"enzyme_type"="{[-1]:Integer}"``)."""
    for function in module.definitions:
        name = function.name
        if _BODY not in name or name.startswith(_WRAPPER):
            continue
        for parameter in function.parameters:
            if parameter.type in _INTEGER_TYPES and not any("enzyme_type" in a for a in parameter.attributes):
                parameter.attributes.append(_INTEGER)
    return module


#: Enzyme's name of each element type :mod:`pyjlad.private_adjoints` records (``ArrayLayout.element``).
_ELEMENT_TYPES = {"double": "Float@double", "float": "Float@float", "integer": "Integer"}


def typed_loop_arguments(text: str, layouts: Mapping[str, LoopLayout]) -> str:
    """``text`` (a parallel copy's module, before its loops are rewritten) with the ``args`` parameter of each
    loop body's wrapper whose layout is in ``layouts`` (by the wrapper's symbol) typed for Enzyme: ``args[0]``,
    Numba's schedule, points to integers, and ``args[j]`` of a float or integer array to its elements at every
    offset.

    >>> from pyjlad.private_adjoints import ArrayLayout
    >>> layout = LoopLayout(arrays=[ArrayLayout(index=1, itemsize=8, dims=(1,), steps=(3,), element="double")])
    >>> print(typed_loop_arguments("define void @__gufunc__.k(ptr %args, ptr %dims) {\\nentry:\\n  ret void\\n}\\n",
    ...                            {"__gufunc__.k": layout}).splitlines()[0])
    define void @__gufunc__.k(ptr "enzyme_type"="{[-1]:Pointer, [-1,0,-1]:Integer, [-1,8,-1]:Float@double}" %args, ptr %dims) {
    """
    typed = {name: layout for name, layout in layouts.items() if name.startswith(_WRAPPER)}
    if not typed:
        return text
    module = parse(text, strict=False)
    for function in module.definitions:
        layout = typed.get(function.name)
        if layout is None or not function.parameters or function.parameters[0].type != "ptr" or any(
                "enzyme_type" in a for a in function.parameters[0].attributes):
            continue
        trees = ["[-1]:Pointer", "[-1,0,-1]:Integer"] + [f"[-1,{8 * a.index},-1]:{_ELEMENT_TYPES[a.element]}"
                                                          for a in layout.arrays if a.element in _ELEMENT_TYPES]
        function.parameters[0].attributes.insert(0, f'"enzyme_type"="{{{", ".join(trees)}}}"')
    return module.render()


def returning_error_paths(module: Module) -> Module:
    """``module`` (edited in place) with each gufunc wrapper, and each copy of one that private rows run
    (:mod:`pyjlad.private_bodies`), returning as soon as it has set the failure flag.

    The rest of the block that sets it is replaced by ``ret void``; the blocks no longer reachable go, and
    so do the ``phi`` entries of the blocks they (or the cut block) branched to.

    Examples
    --------
    >>> module = parse("define void @__gufunc__.k(i1 %raised) {\\nentry:\\n  br i1 %raised, label %err, label %ok\\n"
    ...                "err:\\n  store atomic i32 1, ptr @pyjlad.omp.failed unordered, align 4\\n"
    ...                "  %p = call ptr %builder()\\n  br label %ok\\n"
    ...                "ok:\\n  %x = phi i32 [ 0, %entry ], [ 1, %err ]\\n  ret void\\n}\\n", strict=False)
    >>> print(returning_error_paths(module).render(), end="")
    define void @__gufunc__.k(i1 %raised) {
    entry:
      br i1 %raised, label %err, label %ok
    err:
      store atomic i32 1, ptr @pyjlad.omp.failed unordered, align 4
      ret void
    ok:
      %x = phi i32 [ 0, %entry ]
      ret void
    }
    """
    for function in module.definitions:
        wrapper = function.name.startswith((_WRAPPER, BODY_PREFIX.lstrip("@")))
        if wrapper and function.body is not None and function.return_type == "void":
            function.body = _returning_at_flag(function.body)
    return module


def _sets_failure_flag(line: str) -> bool:
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode != "store":
        return False
    value, *pointer = split_top_level(instruction.after_opcode())
    return bool(pointer) and FAILED_FLAG in words(pointer[0]) and words(value)[-1:] != ["0"]


def _returning_at_flag(body: list[str]) -> list[str]:
    """``body`` (a gufunc wrapper's) cut after each store of the failure flag, its dead blocks dropped."""
    found = blocks(body)
    cut = []
    for name, lines in found:
        at = next((k for k, line in enumerate(lines) if _sets_failure_flag(line)), None)
        cut.append((name, lines if at is None else [*lines[:at + 1], "  ret void"]))
    if cut == found:
        return body
    graph = ControlFlow.of([line for _, lines in cut for line in lines])
    live = graph.reverse_post_order()
    preds = {name: {p for p in live if name in graph.succ[p]} for name in live}
    return [_phi_from(line, preds[name]) for name, lines in cut if name in preds for line in lines]


def _phi_from(line: str, preds: set[str]) -> str:
    """``line``, a ``phi`` without its entries from blocks not in ``preds``; other lines unchanged."""
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode != "phi":
        return line
    incoming = instruction.phi_incoming()
    kept = [(value, block) for value, block in incoming if block.lstrip("%") in preds]
    if len(kept) == len(incoming):
        return line
    head = line[:line.index("[")].rstrip()
    return head + " " + ", ".join(f"[ {value}, {block} ]" for value, block in kept)


def prepared_loop_bodies(text: str) -> str:
    """``text`` (a parallel module) with its loop bodies' integers typed, their integer freezes dropped and
    their wrappers returning once the body has raised (:func:`returning_error_paths`)."""
    return typed_body_integers(returning_error_paths(drop_integer_freezes(parse(text, strict=False)))).render()
