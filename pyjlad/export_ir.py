"""Numba's LLVM IR of a function as LLVM's optimizer left it, before code generation rewrote it, and
the copy of the function compiled for Enzyme (:func:`enzyme_ir`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from numba import types as nbtypes
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from .enzyme_copy import branch_preserving_compile, unvectorized_copy
from .export_compile import describe_function
from .export_recursion import resolve_recursion
from .log import get_logger

_log = get_logger(__name__)

__all__ = ["compile_before_codegen", "enzyme_ir", "ir_before_codegen"]


@contextlib.contextmanager
def ir_before_codegen(captured: list[tuple[Any, str]]) -> Iterator[None]:
    """Record ``(library, IR)`` for each Numba library finalized meanwhile, as it was before machine code.

    Numba emits a library's machine code with LLVM's MCJIT, whose code generator
    rewrites the module in place (loop strength reduction: ``lsr.iv``, ``scevgep``;
    CodeGenPrepare: ``sunkaddr``; stack slots of disjoint lifetimes sharing one
    ``alloca``), so ``library.get_llvm_str()`` afterwards is no longer the
    optimizer's output. Enzyme fails on that code: the ``np.linalg.det`` of a
    product sees one ``alloca`` hold an array struct and then a pair of doubles
    ("Illegal updateAnalysis"); ``np.cumsum(X, axis=0)`` has strength-reduced
    induction variables it cannot recompute ("Illegal replace ficticious phi").
    Held under Numba's compiler lock, which every finalization takes.
    """
    original = JITCodeLibrary._finalize_specific

    def finalize_specific(library: Any) -> None:
        captured.append((library, str(library._final_module)))
        original(library)

    with global_compiler_lock:
        JITCodeLibrary._finalize_specific = finalize_specific
        try:
            yield
        finally:
            JITCodeLibrary._finalize_specific = original


def enzyme_ir(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> tuple[Any, str] | None:
    """A fresh compile of ``dispatcher`` for Enzyme: its compile result and its IR before code generation.

    A copy of the function and of every ``@njit`` function it calls, compiled
    without LLVM's loop and SLP vectorizers and without SimplifyCFG's
    speculation (see :mod:`pyjlad.enzyme_copy`): Enzyme differentiates
    vectorized loops poorly (each vector body, scalar remainder and peeled
    iteration caches its own copy of the values it overwrites, with one cache
    allocation per outer iteration: the 2-D heat stencil of the benchmarks),
    and differentiates both sides of a branch LLVM turned into a ``select``,
    the untaken side giving NaN where it is singular. The differentiated module
    is optimized again after Enzyme (vectorizers included), and the user's own
    function keeps its vectorized code. Its IR is taken before Numba generates
    machine code (see :func:`ir_before_codegen`). ``None`` if the copy does not
    compile.
    """
    from .nested import calls_kept

    copy = unvectorized_copy(dispatcher)
    with branch_preserving_compile(), calls_kept():
        try:
            return compile_before_codegen(copy, argtypes)
        except Exception:  # noqa: BLE001 - any failure: the function's own module is differentiated instead
            _log.debug("the copy of %s for Enzyme did not compile: its own module is differentiated",
                       describe_function(dispatcher), exc_info=True)
            return None


def compile_before_codegen(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> tuple[Any, str] | None:
    """Compile ``dispatcher`` for ``argtypes``: its compile result and its IR before code generation.

    The IR is taken as LLVM's optimizer left it (see :func:`ir_before_codegen`),
    or read back from the library if ``dispatcher`` was compiled for
    ``argtypes`` already; the functions it calls recursively linked in and called
    directly (:func:`pyjlad.export_recursion.resolve_recursion`). ``None`` if no
    compile result matches ``argtypes``.
    """
    captured: list[tuple[Any, str]] = []
    with ir_before_codegen(captured):
        dispatcher.compile(argtypes)
    cres = dispatcher.overloads.get(tuple(argtypes))
    if cres is None:
        return None
    texts = {id(library): ir for library, ir in captured}
    text = texts.get(id(cres.library)) or cres.library.get_llvm_str()
    return cres, resolve_recursion(text, cres, describe_function(dispatcher), texts)
