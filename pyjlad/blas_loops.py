"""Numba's BLAS helpers as loops in a parallel derivative's module: a matrix product inside a ``prange``.

A portable module defines Numba's BLAS helpers (``@numba_xxgemv.d`` and the others) over CBLAS
(``pyjlad/runtime/cblas.ll``), and Enzyme differentiates a CBLAS call by its BLAS rules, whose adjoints
add into a shared matrix's adjoint with BLAS again, without atomic operations: inside a parallel loop, a
data race (:func:`blas_in_parallel_loops`); in forward mode Enzyme failed on them
inside a parallel loop. :func:`blas_as_loops` gives those helpers
the bodies of ``pyjlad/runtime/blas_loops.ll`` instead, the same products as plain loops, which Enzyme
differentiates as it does every other loop of a parallel region. The whole module's helpers change, those
its serial code calls too (one definition serves every caller); the serial derivative keeps BLAS.

Examples
--------
>>> text = "\\n".join(["define i32 @f(ptr %o) {", "entry:", "  ret i32 0", "}", "",
...                   "define linkonce_odr i32 @numba_xxdot.d(i8 %kind, i8 %conj, i64 %n, ptr %x, ptr %y, ptr %out) {",
...                   "entry:", "  %r = call double @cblas_ddot(i32 0, ptr %x, i32 1, ptr %y, i32 1)",
...                   "  store double %r, ptr %out, align 8", "  ret i32 0", "}", ""])
>>> out = blas_as_loops(text)
>>> "@cblas_ddot" in out, "fmul double %vx, %vy" in out, out.startswith("define i32 @f(ptr %o)")
(False, True, True)
"""

from __future__ import annotations

from . import runtime
from .ir import Function, parse
from .ir.analysis import reachable

__all__ = ["blas_as_loops", "blas_in_parallel_loops"]


def blas_as_loops(text: str) -> str:
    """``text`` with each BLAS helper it defines (``@numba_xxdot.d``, ``@numba_xxgemv.s``, ...) given the
    loop body of ``pyjlad/runtime/blas_loops.ll``; unchanged where it defines none."""
    loops = runtime.module("blas_loops.ll").functions
    if not any(symbol[1:] in text for symbol in loops):
        return text
    module = parse(text, strict=False)
    replaced = False
    for k, item in enumerate(module.items):
        if isinstance(item, Function) and not item.is_declaration and item.symbol in loops:
            module.items[k] = loops[item.symbol]
            replaced = True
    return module.render() if replaced else text


#: What a user wrote for each BLAS routine Numba calls (through ``numba_xxdot``/``xxgemv``/``xxgemm``).
_BLAS_CONSTRUCTS = {"dot": "a dot product of two vectors with @", "gemv": "a matrix-vector product (@, np.dot)",
                    "gemm": "a matrix product (@, np.dot)"}


def blas_in_parallel_loops(text: str) -> list[str]:
    """What the parallel loops of ``text`` (rewritten by :func:`openmp_parallel_loops`) compute with BLAS, in words.

    Enzyme differentiates a BLAS call by its own rules, which add into the adjoint of a matrix or vector with
    BLAS itself (``cblas_dger``, ``cblas_daxpy``): without atomic operations. Inside a parallel loop, where
    every thread adds into the adjoint of an array the iterations share, that is a data race (a silently
    wrong gradient, different from run to run). Returns ``[]`` where no loop body reaches a BLAS routine.

    Examples
    --------
    >>> from pyjlad.openmp_loops import EXAMPLE, openmp_parallel_loops
    >>> blas_in_parallel_loops(openmp_parallel_loops(EXAMPLE))
    []
    """
    module = parse(text, strict=False)
    tasks = [f.symbol for f in module.definitions if f.symbol.startswith("@pyjlad.omp.task.")]
    found: dict[str, None] = {}
    for name in tasks:
        for symbol in reachable(module, name):
            if symbol.startswith("@cblas_"):
                routine = symbol[len("@cblas_") + 1:]
                found[_BLAS_CONSTRUCTS.get(routine, f"BLAS {routine}")] = None
    return list(found)
