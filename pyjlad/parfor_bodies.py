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
  (:func:`pyjlad.ir.rewrite.drop_integer_freezes`).

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
from .ir.rewrite import drop_integer_freezes
from .private_adjoints import LoopLayout

__all__ = ["prepared_loop_bodies", "typed_body_integers", "typed_loop_arguments"]

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


def prepared_loop_bodies(text: str) -> str:
    """``text`` (a parallel module) with its loop bodies' integers typed and their integer freezes dropped."""
    return typed_body_integers(drop_integer_freezes(parse(text, strict=False))).render()
