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

A softmax classifier written with NumPy per sample (``z = w @ x[i]``, ``np.exp(z - m)``, 20,000 samples) had a
gradient 18.4x its function on this project's AMD machine; inlined, 10.2x (``benchmarks/temporaries.py``).

:func:`mark_inlinable` marks ``alwaysinline`` every callee that is safe to inline and that inlining can
help: a definition Numba emitted for a compiled function (linkage ``linkonce_odr``, a Numba-mangled name
``@_ZN...``; or :mod:`pyjlad.invariant_reads`' internal copy of one, ``<name>.pyjlad.reads``), only ever called
directly (its address is never taken: a parallel loop's body is passed to
the threading layer by address, a custom rule is registered by address), with no ``noinline`` and no Enzyme
attribute of its own (``"enzyme_..."``), and that calls only pyjlad's runtime (``NRT_*``), LLVM's intrinsics,
libm, the wrappers of BLAS products (``numba_xxgemv.d``, ``numba_xxgemm.d``, ``numba_xxdot.d``: kept as
calls themselves), Numba's error helpers, and other such callees. Kept as calls: whatever calls LAPACK or
another helper that pyjlad's passes find by its call (the LAPACK loops of :mod:`pyjlad.lapack`, BLAS inside
parallel loops: inlined, Enzyme failed on ``np.linalg.solve`` and on products with a shared operand in a
``prange``), and Numba's sorting and selection (``np.sort``, ``np.median``: Enzyme could not type the
memory they permute). ``opt``'s ``always-inline`` pass then inlines them, and nothing else runs.
"""

from __future__ import annotations

from collections import Counter

from .invariant_reads import COPY_SUFFIX
from .ir import Function, Module, parse
from .ir.lexer import tokenize
from .portable import LIBM_FUNCTIONS as _LIBM

__all__ = ["inlinable", "mark_inlinable", "more_inlinable", "INLINE_PASSES"]

#: ``opt``'s passes that inline what :func:`mark_inlinable` marked (and nothing else).
INLINE_PASSES = "always-inline"
_NUMBA_MANGLED = "@_ZN"
#: What a chosen callee may call besides other chosen ones and libm (see :func:`_known_call`).
_KNOWN_CALLS = ("@NRT_", "@llvm.", "@numba_xxgemv.", "@numba_xxgemm.", "@numba_xxdot.", "@Py_FatalError",
                "@numba_gil_ensure", "@numba_attempt_nocopy_reshape")
#: Numba's sorting and selection (``np.sort``, ``np.median``, ``np.partition``) keep their calls: inlined,
#: Enzyme could not type the memory they permute (``tests/test_copied_slices.py``'s median of sorted
#: differences needed loose types, and their derivative failed its check).
_KEPT_WORDS = ("sort", "_select", "_partition", "median")


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


def inlinable(module: Module, whatever_they_call: bool = False) -> list[Function]:
    """The definitions of ``module`` that :func:`mark_inlinable` marks (see the module's docstring).

    ``whatever_they_call``: also the callees that call something else (a helper that sorts, solves or calls
    another kept helper; those calls stay calls in its inlined body): the retry after Enzyme failed on a
    module where such a helper was left a call (:func:`more_inlinable`).

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
    candidates = {f.symbol: f for f in module.definitions
                  if f.symbol.startswith(_NUMBA_MANGLED)
                  and ("linkonce_odr" in f.linkage or ("internal" in f.linkage and f.name.endswith(COPY_SUFFIX)))
                  and called[f.symbol] > 0 and mentioned[f.symbol] == called[f.symbol]
                  and not _forbidden(f, module) and not any(word in f.name for word in _KEPT_WORDS)}
    declared = {f.symbol for f in module.declarations}
    changed = not whatever_they_call
    while changed:  # a candidate that calls what is neither known nor a candidate is not one
        changed = False
        for symbol, function in list(candidates.items()):
            if not all(_known_call(c.callee, candidates, declared) for c in function.calls()):
                del candidates[symbol]
                changed = True
    return list(candidates.values())


def _known_call(callee: str, candidates: dict[str, Function], declared: set[str]) -> bool:
    """Whether a chosen callee may call ``callee``: another chosen one, pyjlad's runtime, LLVM's intrinsics,
    libm, a BLAS product's wrapper or Numba's error helpers; never LAPACK, sorting or another helper that
    pyjlad's passes find by its call."""
    return (callee in candidates or callee.startswith(_KNOWN_CALLS)
            or (callee in declared and callee[1:] in _LIBM))


def mark_inlinable(text: str, whatever_they_call: bool = False) -> tuple[str, int]:
    """``text`` with :func:`inlinable`'s definitions marked ``alwaysinline``, and how many were marked (0: the
    text unchanged)."""
    module = parse(text)
    chosen = inlinable(module, whatever_they_call)
    for function in chosen:
        function.attributes.append("alwaysinline")
    return (module.render() if chosen else text), len(chosen)


def more_inlinable(text: str) -> bool:
    r"""Whether ``inlinable(..., whatever_they_call=True)`` chooses more of ``text``'s callees than :func:`inlinable`.

    Enzyme v0.0.289's reverse mode failed ("function failed verification": ``Instruction does not dominate all
    uses``) on a scaling-and-squaring ``expm`` helper called from the function, a helper that ``np.sort`` kept a
    call; with its body inlined it differentiated it right. What such a retry costs is paid only where Enzyme
    failed.

    >>> text = ('define linkonce_odr i32 @_ZN5numba4sortE(ptr %p) {\n  ret i32 0\n}\n'
    ...         'define linkonce_odr i32 @_ZN5numba4helpE(ptr %p) {\n'
    ...         '  %a = call i32 @_ZN5numba4sortE(ptr %p)\n  ret i32 %a\n}\n'
    ...         'define i32 @entry(ptr %p) {\n  %a = call i32 @_ZN5numba4helpE(ptr %p)\n  ret i32 %a\n}\n')
    >>> mark_inlinable(text)[1], mark_inlinable(text, whatever_they_call=True)[1], more_inlinable(text)
    (0, 1, True)
    """
    module = parse(text)
    return len(inlinable(module, True)) > len(inlinable(module))
