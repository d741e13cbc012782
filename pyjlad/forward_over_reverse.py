"""Forward derivatives of a reverse sweep: what Enzyme needs so that they free the memory they allocate.

A vector-mode Hessian (``hessian`` with ``chunk`` > 1: ``__enzyme_fwddiff`` with ``enzyme_width`` of a function
that calls ``__enzyme_autodiff``) and the vector-mode forward products of a function calling a derivative from
``@njit`` code (``jacobian(mode="forward")`` of a function calling a ``pyjlad.grad`` object) are forward
derivatives of a reverse sweep. The reverse sweep frees each block the function allocated (every ``np.zeros``,
``x * 2.0``, ``np.empty(3)`` in a loop) and the block's shadow when it reverses the allocation. Enzyme v0.0.289's
forward derivative of the sweep (seen in vector mode; a ``jvp`` of width one was not seen to leak) dropped those
frees, and the frees of their tangents, in two cases, so until 2026-12-06 every such derivative **leaked, on every
call, the blocks the function allocated, with their shadows and tangents** (values right; found by a user-style
probe):

* a block from one of pyjlad's allocators (:mod:`pyjlad.runtime`'s ``NRT_MemInfo_alloc_aligned`` and kin, left
  calls): Enzyme's reverse copy of the allocator frees it from the pointer on the tape, and the forward
  derivative of that copy is empty (32,640 bytes per call of the Hessian of a function of 12 inputs with two
  temporaries at ``chunk=4``; 16,312 of such a forward Jacobian: ``tests/test_repeated_calls_memory.py``).
  :func:`inline_allocators` marks the allocators ``alwaysinline`` for ``opt``'s ``always-inline`` pass
  (:data:`INLINE_PASS`), and the blocks are freed where Enzyme frees its own tape;
* a block allocated in a loop whose caches Enzyme sizes once (``-enzyme-max-cache``, :mod:`pyjlad.loop_caches`):
  the reverse loop's frees and the frees of the caches themselves are dropped (68,163 bytes per call of the
  Hessian of a function of 12 inputs with an ``np.empty(3)`` per iteration, at ``chunk=4``). Such modules are
  built without the option (:func:`forward_over_reverse_text`), and their loops grow their caches as Enzyme's
  default does.

Other derivatives keep both as they were measured.
"""

from __future__ import annotations

from functools import cache

from . import runtime
from .ir import Module, parse
from .ir.analysis import reachable, references
from .list_growth import LIST_REALLOC

__all__ = ["INLINE_PASS", "allocators", "forward_over_reverse", "forward_over_reverse_text",
           "inline_allocators"]

#: ``opt``'s pass that inlines what :func:`inline_allocators` marked.
INLINE_PASS = "always-inline"
_FORWARD, _REVERSE = "@__enzyme_fwddiff", "@__enzyme_autodiff"
_ALLOCATING = frozenset({"@malloc", "@calloc"})


@cache
def allocators() -> frozenset[str]:
    """The functions of ``nrt.ll`` (:mod:`pyjlad.runtime`) that return a block they ``malloc`` or ``calloc``, but
    for the growth of a list (:data:`pyjlad.list_growth.LIST_REALLOC`): inlined, Enzyme could no longer type the
    copies of a list of arrays' tangents, and the Hessian of such a list was refused.

    >>> sorted(allocators())[:3]
    ['@NRT_Allocate', '@NRT_MemInfo_alloc', '@NRT_MemInfo_alloc_aligned']
    >>> any(name.startswith(LIST_REALLOC) for name in allocators())
    False
    """
    return frozenset(f.symbol for f in runtime.module("nrt.ll").definitions
                     if f.return_type == "ptr" and references(f) & _ALLOCATING and not f.symbol.startswith(LIST_REALLOC))


def _runtime_name(symbol: str) -> str:
    """``symbol`` without the ``.N`` that linking gives a runtime function of a nested derivative's module.

    >>> _runtime_name("@NRT_MemInfo_alloc_aligned.4"), _runtime_name("@NRT_MemInfo_alloc")
    ('@NRT_MemInfo_alloc_aligned', '@NRT_MemInfo_alloc')
    """
    base, dot, suffix = symbol.rpartition(".")
    return base if dot and suffix.isdigit() else symbol


def _requested(module: Module, request: str) -> list[str]:
    """The functions ``module`` asks Enzyme to differentiate by ``request`` (the first argument of each call)."""
    return [call.values[0] for function in module.definitions for call in function.calls()
            if call.callee == request and call.values and call.values[0].startswith("@")]


def forward_over_reverse(module: Module) -> bool:
    """Whether some function ``module`` asks ``__enzyme_fwddiff`` to differentiate reaches a call of
    ``__enzyme_autodiff``: the forward derivative of a reverse sweep.

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> text = '''declare void @__enzyme_autodiff(...)
    ... declare void @__enzyme_fwddiff(...)
    ... define double @f(double %x) {
    ...   ret double %x
    ... }
    ... define void @g(double %x) {
    ...   call void (...) @__enzyme_autodiff(ptr @f, double %x)
    ...   ret void
    ... }
    ... define void @h(double %x) {
    ...   call void (...) @__enzyme_fwddiff(ptr @g, double %x, double 1.0)
    ...   ret void
    ... }'''
    >>> forward_over_reverse(parse(text)), forward_over_reverse(parse(text.replace("ptr @g", "ptr @f")))
    (True, False)
    """
    forward = _requested(module, _FORWARD)
    if not forward or not _requested(module, _REVERSE):
        return False
    callers = {f.symbol for f in module.definitions if any(call.callee == _REVERSE for call in f.calls())}
    return any(callers.intersection(reachable(module, target)) for target in forward)


def forward_over_reverse_text(text: str) -> bool:
    r""":func:`forward_over_reverse` of the module ``text`` (not parsed where it names only one of the two requests).

    >>> forward_over_reverse_text("define void @f() {\n  ret void\n}\n")
    False
    """
    if _FORWARD not in text or _REVERSE not in text:
        return False
    return forward_over_reverse(parse(text, strict=False))


def inline_allocators(module: Module) -> int:
    """Mark ``alwaysinline`` the :func:`allocators` ``module`` defines, where :func:`forward_over_reverse` holds;
    how many were marked (0: ``module`` unchanged).

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> text = '''declare void @__enzyme_autodiff(...)
    ... declare void @__enzyme_fwddiff(...)
    ... declare ptr @malloc(i64)
    ... define linkonce_odr ptr @NRT_MemInfo_alloc(i64 %size) {
    ...   %mi = call ptr @malloc(i64 %size)
    ...   ret ptr %mi
    ... }
    ... define void @g(double %x) {
    ...   call void (...) @__enzyme_autodiff(ptr @NRT_MemInfo_alloc, double %x)
    ...   ret void
    ... }
    ... define void @h(double %x) {
    ...   call void (...) @__enzyme_fwddiff(ptr @g, double %x, double 1.0)
    ...   ret void
    ... }'''
    >>> module = parse(text)
    >>> inline_allocators(module), module.function("NRT_MemInfo_alloc").attributes
    (1, ['alwaysinline'])
    """
    if not forward_over_reverse(module):
        return 0
    marked = 0
    for function in module.definitions:
        if _runtime_name(function.symbol) in allocators() and "alwaysinline" not in function.attributes:
            function.attributes.append("alwaysinline")
            marked += 1
    return marked
