"""Derivatives of ``parallel=True`` functions whose ``prange`` loops run in parallel (issue 17).

On unless ``PYJLAD_PARALLEL_DERIVATIVES`` is off (:func:`pyjlad.config.parallel_derivatives`): for a
reverse or forward sweep of a function compiled with ``parallel=True``, Enzyme differentiates a
copy of the function that keeps Numba's parallel loops, each rewritten as an OpenMP parallel loop
(:mod:`pyjlad.openmp_loops`) running on ``numba.get_num_threads()`` threads of LLVM's OpenMP runtime
(:mod:`pyjlad.openmp`).

* Constant arrays: Numba hands each parallel loop its arrays through an array of pointers it builds in
  memory (the gufunc's ``args``), and Enzyme stores into that array's shadow, for an array it holds
  constant (an argument not differentiated, a temporary computed from constants), the array's own pointer.
  The loop body's derivative sees only the pointers it loads, so it accumulated adjoints into the
  constant array itself (the caller's array changed, later gradients wrong) or, in forward mode, read the
  array as its own tangent. Every derivative call of a parallel module therefore asks for Enzyme's runtime
  activity (:func:`with_runtime_activity`): where a shadow pointer equals its primal, it is constant.
  Runtime activity does not cover a ``memcpy`` in forward mode: a loop body copying a constant array
  (``c = v.copy()``, or ``v * 1.0``, which LLVM makes a copy) took the array's values for their tangent,
  and ``jvp`` with that array's tangent ``None`` and every Hessian-vector product not taken with respect
  to it came out silently wrong. So a sweep with a forward part gives each constant float array a zeroed
  shadow of its own (:func:`tangent_shadowed_abi`), as the drivers do for arrays Numba aliases.
* Reverse mode: the reverse of each loop is a parallel loop over the same static schedule (Enzyme's
  own OpenMP support); adjoints of inputs shared between iterations are accumulated with atomic
  adds (so they may differ from run to run in the last bits), those of per-iteration elements are
  written by one thread each (identical run to run). Not in vector mode (several cotangents per
  sweep): Enzyme builds it, but its code stopped the process (a segmentation fault) on larger
  inputs, so ``jacobian`` and batched products run the serial vector-mode derivative (also much
  faster than one parallel sweep per row, what ``jacobian`` ran before with this setting on).
* Forward mode: Enzyme v0.0.289 stops on the OpenMP call in forward mode (an assertion in
  ``AdjointGenerator::visitOMPCall``, which looks up the call in the overwritten-arguments map only
  reverse mode fills), so the fork gets a registered forward derivative of pyjlad's: the same fork
  of a task running Enzyme's forward derivative of the loop body on each row
  (:func:`pyjlad.openmp_loops.openmp_parallel_loops` with ``forward=True``). Each tangent is written
  by the thread that writes its value, and ``prange`` reductions combine their per-thread parts as
  Numba does: identical run to run.
* Hessian-vector products (reverse over forward, :func:`pyjlad.engines.hvp_driver.hvp_driver`): the
  forward form of the module, whose registered fork derivatives Enzyme's reverse sweep then
  differentiates as it does any parallel loop (the reverse of the task forking the body's forward
  derivative is a parallel loop over the same schedule; shared inputs' adjoints atomic, so within
  rounding run to run). As in reverse mode, each thread reads the arrays every row reads from a private
  copy, and their tangents from another (:func:`pyjlad.private_adjoints.tangent_copy`), so that the adds
  into their adjoints are plain, not contended atomic adds. A loop reading the rows next to its own (a
  stencil) has its rows split as in reverse mode, each of its two forks wrapped with its own registered
  derivative (:func:`pyjlad.openmp_tasks.forward_fork` with ``parts``): without the split, every such read's
  adjoint was an atomic add (or, copying the rows and halo, the copies' adds back were), measured slower
  than the serial product on 2 threads. The task tells Enzyme that its rows' argument arrays hold pointers
  (``__enzyme_pointer``): without it, the reverse sweep could not type the stores of the shadow
  pointers. Not where the module calls custom rules (those products are forward over reverse, and
  Enzyme's forward mode cannot run over the reverse of a fork).

The function's ``@njit`` callees run serially inside it. Array and tuple results: the wrapper writing
them (:mod:`pyjlad.outputs`) has a ``parallel=True`` twin with the function inlined, whose loops are
the twin's own. Everything else is the serial
derivative (:func:`pyjlad.export_compile.serial_dispatcher`), with a
:class:`~pyjlad.errors.ParallelFallbackWarning` saying why unless the setting is off: a
Hessian-vector product through custom rules, a missing runtime, a loop the rewrite does
not recognize, a copy Numba cannot compile, a copy Enzyme fails on. Vector-mode sweeps (several directions at once: ``jacobian``,
``hessian``, batched ``jvp``/``vjp``) differentiate the serial copy too, without a warning: their
chunks of directions run on Numba's threads instead (:mod:`pyjlad.chunk_threads`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from numba import types as nbtypes
from numba.core.dispatcher import Dispatcher

from . import cache, config
from .abi import ArrayArg, FunctionABI
from .blas_loops import blas_as_loops, blas_in_parallel_loops
from .errors import ParallelFallbackWarning, PyjladError, UnsupportedFunctionError
from .export_ir import compile_before_codegen
from .invariant_reads import invariant_reads
from .ir import parse
from .ir.edit import mark_enzyme_calls
from .memo import cached_for
from .openmp import load_libatomic, load_libomp
from .openmp_loops import (
    openmp_parallel_loops,
    parallel_call_count,
    unrecognized_parallel_calls,
)
from .parfor_bodies import prepared_loop_bodies, typed_loop_arguments
from .portable import PortableModule
from .private_adjoints import LoopLayout, recording_loop_layouts
from .refusals import enzyme_reason
from .rules import calls_custom_rules
from .user_frames import warn_at_caller

__all__ = ["PARALLEL_TWIN", "cache_tag", "parallel_module", "parallel_wanted", "sweep_form", "with_parallel_fallback",
           "tangent_shadowed_abi", "with_runtime_activity"]

T = TypeVar("T")

#: Attribute of a generated ``@njit`` wrapper (:mod:`pyjlad.outputs`) that calls a ``parallel=True`` function:
#: a function of no arguments returning the wrapper's ``parallel=True`` twin, which has that function inlined,
#: so that its ``prange`` loops are the twin's own (differentiated where the parallel derivative is asked for).
#: Its attribute ``results_of`` is the function's name.
PARALLEL_TWIN = "pyjlad_parallel_twin"

#: The modules whose code makes the parallel module Enzyme differentiates, chooses its options, or edits its output.
_SOURCES = ("parallel_derivatives.py", "openmp_loops.py", "openmp_tasks.py", "private_adjoints.py", "private_bodies.py",
            "parfor_bodies.py", "openmp.py", "row_offsets.py", "openmp_fills.py", "blas_loops.py", "runtime/blas_loops.ll",
            "shared_writes.py", "private_callees.py", "invariant_reads.py", "forked_arrays.py", "inline_callees.py",
            "loop_caches.py")


@functools.cache
def cache_tag() -> str:
    """Part of the cache key of a parallel derivative (a serial one has none): the rewrite's name and a hash of
    the source of the modules that make the parallel module (:data:`_SOURCES`). The key holds the function's
    own module, not its parallel copy (built only on a miss), so a change of this code must change the key:
    a disk cache written by an earlier version of it is not read."""
    here = Path(__file__).resolve().parent
    try:
        sources = [(here / name).read_text() for name in _SOURCES]
    except OSError:  # installed without its sources: the version names the code
        from . import __version__

        sources = [__version__]
    return "openmp-parallel-loops:" + cache.cache_key(*sources)


def sweep_form(sweep: Any) -> str:
    """The form of parallel module ``sweep`` differentiates: ``"reverse"``, ``"forward"``, or ``"hvp"`` (the
    forward form, whose forward derivative the Hessian-vector product's reverse sweep differentiates).

    Examples
    --------
    >>> from pyjlad.sweep import Sweep
    >>> sweep_form(Sweep("ad", "forward", ())), sweep_form(Sweep("hvp", "reverse", (), 0))
    ('forward', 'hvp')
    """
    return "hvp" if sweep.kind == "hvp" else sweep.mode


def parallel_module(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...],
                    entry: str, *, form: str = "reverse",
                    never_written: Collection[int] = frozenset()) -> tuple[PortableModule | None, str]:
    """The portable module of ``dispatcher``'s parallel copy with its loops made OpenMP loops, or why not.

    ``form`` (:func:`sweep_form`): ``"forward"`` and ``"hvp"`` register the forward derivative of each fork
    (:func:`pyjlad.openmp_tasks.forward_fork`); ``"reverse"`` and ``"hvp"`` refuse BLAS in a loop, whose
    reverse-mode rules race. ``never_written``: the entry's parameters that point to arrays the function never
    writes (:func:`pyjlad.export_abi.never_written_data`), whose reads in the loops are marked invariant
    (:func:`pyjlad.invariant_reads.invariant_reads`). Returns ``(module, "")``, or ``(None, reason)`` in the
    user's terms.
    """
    from .portable_pipeline import make_portable

    forward = form != "reverse"
    compiled = _compiled_copy(dispatcher, argtypes)
    if isinstance(compiled, str):
        return None, compiled
    cres, text, layouts = compiled
    if parallel_call_count(text) == 0:
        return None, "Numba made no parallel loop of it for these argument types"
    racing = sorted({name.split(".")[0] for layout in layouts.values() for name in layout.shared_writes})
    if racing:
        return None, (f"its prange loop writes {', '.join(racing)} at an index other iterations may write too "
                      "(such as out[i % 4] += ... or out[idx[i]] = ...): iterations racing on one element, in the "
                      "function itself too, and its parallel reverse sweep got such gradients wrong; write each "
                      "iteration's own element (out[i]), or reduce into a scalar or a whole array (h += ...)")
    rewritten = prepared_loop_bodies(openmp_parallel_loops(typed_loop_arguments(text, layouts), forward=forward,
                                                           layouts=layouts, private_forward=form == "hvp"))
    if unrecognized_parallel_calls(rewritten):
        return None, "one of its parallel loops has a form the OpenMP rewrite does not recognize"
    try:
        module = make_portable(rewritten, cres.fndesc.mangled_name, name=entry, dump_as="enzyme-parallel")
    except PyjladError as exc:
        return None, f"its parallel copy could not be exported ({type(exc).__name__}: {str(exc)[:200]})"
    if "numba_parallel_for" in module.text or "@__kmpc_fork_call(" not in module.text:
        return None, "the OpenMP rewrite of its parallel loops did not survive the portable pipeline"
    if blas_in_parallel_loops(module.text):  # (Enzyme's BLAS rules: a race in reverse, a failure forward; loops)
        module = dataclasses.replace(module, text=blas_as_loops(module.text))
    module = dataclasses.replace(module, text=invariant_reads(module.text, entry, never_written))
    blas = [] if form == "forward" else blas_in_parallel_loops(module.text)
    if blas:
        return None, (f"its prange loops compute {' and '.join(blas)} with BLAS, whose reverse-mode derivative "
                      "(Enzyme's BLAS rules) adds into the adjoints of arrays shared between iterations without "
                      "atomic operations, a data race; write the product as a loop to keep the derivative parallel"
                      + (" (for two vectors, np.dot(a, b) is one: Numba makes it a loop)" if any(
                          "two vectors" in b for b in blas) else ""))
    return module, ""


def _compiled_copy(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...]
                   ) -> tuple[Any, str, dict[str, LoopLayout]] | str:
    """``dispatcher``'s parallel copy compiled for ``argtypes``: its compile result, its IR and the layouts of its
    loops (:func:`pyjlad.private_adjoints.recording_loop_layouts`), or why it could not be compiled.

    Once per function and argument types, for every form of :func:`parallel_module`: the layouts are recorded
    while Numba lowers the loops, and a second compile of the same copy is Numba's own cached one, which
    lowers nothing. Before, the second form built (a gradient after a ``jvp``) had no layouts: no refusal of
    a loop writing an element other iterations write (its gradient was silently wrong in some runs), no
    private copies, no element types told to Enzyme.
    """
    from .enzyme_copy import branch_preserving_compile, unvectorized_copy
    from .nested import calls_kept

    def compile_copy() -> tuple[Any, str, dict[str, LoopLayout]] | str:
        copy = unvectorized_copy(dispatcher, keep_parallel=True)
        layouts: dict[str, LoopLayout] = {}
        with branch_preserving_compile(), calls_kept(), recording_loop_layouts(layouts):
            try:
                fresh = compile_before_codegen(copy, argtypes)
            except Exception as exc:  # noqa: BLE001 - any failure of the copy means the serial derivative
                return f"Numba could not compile its parallel copy ({type(exc).__name__})"
        if fresh is None:
            return "Numba could not compile its parallel copy"
        return (*fresh, layouts)

    return cached_for(dispatcher, ("parallel-copy", tuple(argtypes)), compile_copy)


def with_runtime_activity(module_text: str) -> str:
    r"""``module_text`` (a parallel copy with its driver) with every ``__enzyme_autodiff``/``__enzyme_fwddiff``
    call asking for Enzyme's runtime activity (``enzyme_runtime_activity``): before it accumulates into (or,
    in forward mode, reads) a shadow, the derivative compares the shadow pointer with its primal and treats
    an equal one as constant. Needed for the pointers Numba passes its parallel loops in memory (see the
    module docstring); the serial derivative, which has no such array, goes without.

    Examples
    --------
    >>> text = with_runtime_activity("define void @d(ptr %x) {\n"
    ...                              "  call void (...) @__enzyme_fwddiff(ptr @f, ptr %x)\n  ret void\n}\n")
    >>> "@__enzyme_fwddiff(ptr @f, ptr @enzyme_runtime_activity, ptr %x)" in text
    True
    """
    return mark_enzyme_calls(parse(module_text, strict=False), "enzyme_runtime_activity").render()


def tangent_shadowed_abi(exported: Any, sweep: Any) -> FunctionABI:
    """``exported.abi``, with each float array marked as needing a zeroed shadow when constant
    (:attr:`~pyjlad.abi.ArrayArg.shadowed_when_constant`) where ``sweep`` has a forward part (``jvp``, a
    Hessian-vector product) that may differentiate the parallel copy: there a constant array's pointer,
    stored in the loop's ``args``, would be taken for its own tangent by a copy of it (see the module
    docstring). The drivers then pass such an array a zeroed shadow instead of none.

    Examples
    --------
    >>> from pyjlad.abi import ArrayArg, FunctionABI, ScalarArg
    >>> from pyjlad.sweep import Sweep
    >>> abi = FunctionABI("f", (ArrayArg("float64", 1, "C", "double"),), ScalarArg("float64", "double"), ())
    >>> tangent_shadowed_abi(type("Exported", (), {"abi": abi})(), Sweep("ad", "forward", ())) is abi  # not parallel
    True
    """
    abi = exported.abi
    forward = sweep.kind == "hvp" or sweep.mode == "forward"
    if (not forward or sweep.width > 1 or sweep.serial or getattr(exported, "make_parallel_module", None) is None
            or not config.parallel_derivatives()):
        return abi
    args = tuple(dataclasses.replace(a, aliased=True) if isinstance(a, ArrayArg) and a.differentiable else a
                 for a in abi.args)
    return dataclasses.replace(abi, args=args)


def parallel_wanted(exported: Any, sweep: Any) -> bool:
    """Whether to try the parallel derivative for ``sweep`` of ``exported``.

    False, silently, for a function that is not ``parallel=True`` or with the setting off (the serial
    derivative); False with a :class:`~pyjlad.errors.ParallelFallbackWarning` where the setting is on (the
    default) but the parallel derivative is not available (a Hessian-vector product through custom rules, no
    runtime); False silently for a vector-mode sweep, whose chunks run on several threads instead
    (:mod:`pyjlad.chunk_threads`), and for a sweep asking for the serial copy (``sweep.serial``: a Hessian's
    columns, also on several threads).

    Examples
    --------
    >>> from pyjlad.activity import Activity
    >>> from pyjlad.sweep import Sweep
    >>> parallel_wanted(object(), Sweep("ad", "reverse", (Activity.DIFF,)))  # not a parallel=True function
    False
    """
    if getattr(exported, "make_parallel_module", None) is None or not config.parallel_derivatives():
        return False
    if sweep.width > 1 or sweep.serial:
        return False  # the serial (vector) derivative, its sweeps or chunks on several threads (pyjlad.chunk_threads)
    if sweep.kind == "hvp" and calls_custom_rules(exported.module.external_functions):
        return _fallback(exported, "its Hessian-vector product goes through custom rules (forward over reverse), "
                         "whose forward sweep Enzyme cannot run over a parallel loop; reverse and forward mode run "
                         "the loops in parallel")
    if load_libomp() is None:
        return _fallback(exported, "LLVM's OpenMP runtime is not installed (Debian: apt-get install libomp5-15)")
    if load_libatomic() is None:
        return _fallback(exported, "GNU's libatomic is not installed (Debian: apt-get install libatomic1)")
    why = _numba_threading_layer()
    if why:
        return _fallback(exported, why)
    return True


def _numba_threading_layer() -> str:
    """Start Numba's threading layer in this process (once); ``""``, or why it could not be started.

    The parallel derivative calls Numba's schedule helpers (``do_scheduling_signed`` ...), which
    Numba adds to the JIT's symbols when it starts its threading layer: on its first parallel
    compile or run in the process. A derivative from the disk cache can be the first parallel code
    a process loads; without them the JIT stopped the whole process ("LLVM ERROR: Symbol not
    found: do_scheduling_unsigned").
    """
    try:
        from numba.np.ufunc.parallel import _launch_threads

        _launch_threads()
    except Exception as exc:  # noqa: BLE001 - any failure means the serial derivative
        return f"Numba's threading layer could not be started ({type(exc).__name__}: {str(exc)[:200]})"
    return ""


class _NotParallel(UnsupportedFunctionError):
    """The parallel copy cannot be built (its reason is the message); the serial derivative is used."""


def with_parallel_fallback(exported: Any, sweep: Any, load: Callable[[Callable[[], PortableModule] | None], T]) -> T:
    """``load(source)`` of the parallel module where wanted and possible, else ``load(None)`` (the serial one).

    ``load`` builds (or finds in the cache) the derivative of ``source()``, the module Enzyme
    differentiates, or of the serial copy for None. A parallel module that cannot be built, or that
    Enzyme or the JIT fails on, gives the serial derivative with a
    :class:`~pyjlad.errors.ParallelFallbackWarning` saying why.
    """
    if not parallel_wanted(exported, sweep):
        return load(None)

    def source() -> PortableModule:
        module, why = exported.make_parallel_module(sweep_form(sweep))
        if module is None:
            raise _NotParallel(why)
        return module

    try:
        return load(source)
    except _NotParallel as exc:
        _fallback(exported, str(exc))
    except (PyjladError, RuntimeError) as exc:  # EnzymeError, ToolchainError, a module that does not load
        reason = enzyme_reason(getattr(exc, "diagnostics", "") or "") or (str(exc).strip().splitlines() or [""])[0]
        _fallback(exported, f"Enzyme or the JIT failed on its parallel loops ({reason[:200]})")
    return load(None)


def _fallback(exported: Any, why: str) -> bool:
    # The wrapper writing a function's results (pyjlad.outputs) says whose they are: the name the user knows.
    twin = getattr(getattr(exported, "run", None), PARALLEL_TWIN, None)
    name = getattr(twin, "results_of", exported.name)
    warn_at_caller(f"the derivative of {name} runs serially: {why} (PYJLAD_PARALLEL_DERIVATIVES=0 builds serial "
                  "derivatives without this warning)", ParallelFallbackWarning)
    return False
