"""Numba's compiled callees inlined into the function Enzyme differentiates, before Enzyme sees it.

Numba compiles each ``@njit`` function and each NumPy implementation it calls (``w @ x[i]`` is
``dot_2_mv``, ``z.max()`` is ``npy_max``) as a library of its own and links them into the caller
*after* optimizing it, so the module Enzyme gets calls them: nothing inlined them. Enzyme then
differentiates each callee on its own, per call:

* every call inside a loop returns a tape of its own, allocated per iteration (the stack slots a callee
  passes to BLAS, ``alpha`` and ``beta`` of ``cblas_dgemv``, become a heap block and its shadow per call);
* a temporary the callee allocates (the product ``z``) reaches the caller as a pointer loaded from the
  returned struct, so :mod:`pyjlad.memory_scopes`, which recognises a temporary by its allocation in
  the function it tags, cannot tell it from the caller's arrays, and Enzyme caches what it could read again.

A softmax classifier written with NumPy per sample (``z = w @ x[i]``, ``np.exp(z - m)``) had a gradient
15x its function on this project's AMD machine (63 ms for 20,000 samples), 11x inlined (45 ms; a probe,
serial gradient with respect to the weights, ``benchmarks/temporaries.py`` measures the same form).

:func:`inline_callees` marks ``alwaysinline`` every callee that is safe to inline and that inlining can
help: a definition Numba emitted for a compiled function (linkage ``linkonce_odr``, a Numba-mangled name
``@_ZN...``) or a BLAS wrapper (``@numba_xxgemv.d``: it only calls ``cblas_*``, which Enzyme's rules know by
name), only ever called directly (its address is never taken: a parallel loop's body is passed to
the threading layer by address), with no ``noinline`` and no Enzyme attribute of its own (``"enzyme_..."``:
a custom rule or an inactive function keeps its call). ``opt``'s ``always-inline`` pass then inlines them,
and nothing else runs. pyjlad's runtime (``NRT_*``) is never inlined: :mod:`pyjlad.memory_scopes` and Enzyme
recognise those calls by name.
"""

from __future__ import annotations

from collections import Counter

from .ir import Function, Module, parse
from .ir.lexer import tokenize

__all__ = ["inlinable", "mark_inlinable", "INLINE_PASSES"]

#: ``opt``'s passes that inline what :func:`mark_inlinable` marked (and nothing else).
INLINE_PASSES = "always-inline"
_NUMBA_MANGLED = ("@_ZN", "@numba_xx")


def _symbol_uses(module: Module) -> tuple[Counter, Counter]:
    """How many times each ``@`` symbol is mentioned outside its own header, and how many of those are
    the callee of a direct call."""
    mentioned: Counter = Counter()
    called: Counter = Counter()
    for item in module.items:
        own = getattr(item, "symbol", None)
        text = "\n".join(item.body) if isinstance(item, Function) and item.body is not None else item.render()
        if isinstance(item, Function) and item.body is None:
            continue
        mentioned.update(t.text for t in tokenize(text) if t.kind == "global" and t.text != own)
        if isinstance(item, Function):
            called.update(call.callee for call in item.calls())
    return mentioned, called


def _forbidden(function: Function, module: Module) -> bool:
    """Whether ``function``'s attributes (its own or its groups') say ``noinline`` or name Enzyme."""
    groups = module.attribute_groups
    attributes = [*function.attributes,
                  *(a for ref in function.attribute_group_refs if ref in groups for a in groups[ref].attributes)]
    return any(a == "noinline" or a.startswith('"enzyme_') for a in attributes)


def inlinable(module: Module) -> list[Function]:
    """The definitions of ``module`` that :func:`mark_inlinable` marks (see the module's docstring).

    Examples
    --------
    >>> m = parse('''define linkonce_odr i32 @_ZN5numba1fE(ptr %p) {
    ...   ret i32 0
    ... }
    ... define linkonce_odr i32 @_ZN5numba1gE(ptr %p) {
    ...   ret i32 1
    ... }
    ... define i32 @entry(ptr %p) {
    ...   %a = call i32 @_ZN5numba1fE(ptr %p)
    ...   %b = call i32 @_ZN5numba1gE(ptr @_ZN5numba1gE)
    ...   ret i32 %a
    ... }
    ... ''')
    >>> [f.name for f in inlinable(m)]
    ['_ZN5numba1fE']
    """
    mentioned, called = _symbol_uses(module)
    return [f for f in module.definitions
            if "linkonce_odr" in f.linkage and f.symbol.startswith(_NUMBA_MANGLED)
            and called[f.symbol] > 0 and mentioned[f.symbol] == called[f.symbol]
            and not _forbidden(f, module)]


def mark_inlinable(text: str) -> tuple[str, int]:
    """``text`` with :func:`inlinable`'s definitions marked ``alwaysinline``, and how many were marked (0: the
    text unchanged)."""
    module = parse(text)
    chosen = inlinable(module)
    for function in chosen:
        function.attributes.append("alwaysinline")
    return (module.render() if chosen else text), len(chosen)
