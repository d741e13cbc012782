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

from .ir import Module, parse
from .ir.rewrite import drop_integer_freezes

__all__ = ["prepared_loop_bodies", "typed_body_integers"]

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


def prepared_loop_bodies(text: str) -> str:
    """``text`` (a parallel module) with its loop bodies' integers typed and their integer freezes dropped."""
    return typed_body_integers(drop_integer_freezes(parse(text, strict=False))).render()
