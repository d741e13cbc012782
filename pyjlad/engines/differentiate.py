"""Running Enzyme: the ``opt`` pipeline, the modules linked with a function's, and the ladder of retries.

The embedded engine (:mod:`pyjlad.engines.embedded`) gives :func:`run_enzyme` the module with the
driver; it links pyjlad's LAPACK loops and custom rules, adds the special-function rules, runs
``opt-15`` with the Enzyme plugin in a subprocess, and retries the failures known to have a cause a
different pipeline or option removes. A failure no retry fixes is explained in the user's terms
(:func:`pyjlad.refusals.explain`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import cache, config
from ..allocation_exits import failed_allocations_exit
from ..blas_loops import blas_as_loops
from ..block_order import dominance_ordered
from ..dropped_cache_frees import dropped_cache_frees_restored
from ..empty_fills import guard_empty_fills
from ..endless_loops import endless_loops
from ..enzyme_copy import NO_SPECULATION_ARGS
from ..errors import (
    EnzymeError,
)
from ..export import ExportedFunction
from ..forward_over_reverse import INLINE_PASS, forward_over_reverse_text, inline_allocators
from ..forward_tape_frees import forward_tape_frees_restored
from ..inline_callees import INLINE_PASSES, mark_inlinable, more_inlinable
from ..ir.edit import (
    float_copies_as_loops,
    tag_float_accesses,
    tag_integer_accesses,
    type_float_copies,
    type_float_fills,
)
from ..ir.field_fills import fills_as_field_stores
from ..ir.instructions import integer_valued, parse_instruction
from ..ir.module import parse
from ..ir.pipeline import dump
from ..ir.pipeline import module_text as text_of
from ..lapack import LAPACK_HELPERS
from ..list_growth import LIST_REALLOC, hint_list_types
from ..log import get_logger, timed
from ..loop_caches import MAX_CACHE, bounded_caches_fit
from ..loop_exit_latches import exits_through_latch
from ..memory_scopes import scope_temporaries
from ..nested import explain_failure as explain_nested
from ..nested import is_nested_driver, nested_modules, refuse_endless
from ..openmp_fills import parallel_fills
from ..portable import LIBM_FUNCTIONS, RUNTIME_CALL_DTOR, blas_element_types, is_inactive_helper
from ..private_bodies import BODY_PREFIX, plain_private_adds
from ..refusals import HELPER_CONSTRUCTS, explain, out_of_resources
from ..rules import is_rule_symbol, rule_modules
from ..special import HANDLED as SPECIAL_FUNCTIONS
from ..special import prepare as prepare_special
from ..taped_slot_frees import taped_slots_freed
from ..targets.nvptx import NVPTX_TRIPLE
from ..toolchain import Toolchain, locate
from ..trip_counts import distinct_trip_counts
from ..unread_tape_slots import unread_slots_on_the_stack
from ..written_arguments import keep_written_arguments
from ..zeroed_allocations import zeroed_allocations
from .blas import BLAS_NAME
from .driver import OOM_ENTER

__all__ = ["HOST_TARGET", "NO_HOISTED_CACHES", "PASSES", "SCALARIZED_PASSES", "UNROLL_CONSTANT_LOOPS",
           "enzyme_input_key", "host_target_key", "linked_modules", "run_enzyme", "unknown_externals"]

#: Before Enzyme (:func:`_enzyme_input`): loops with a small constant trip count fully unrolled (Enzyme's copy of
#: the function is compiled without unrolling; see :mod:`pyjlad.enzyme_copy`). Left a loop, such a loop inside
#: another (the two rounds of Numba's ``x ** 2``) makes Enzyme cache each of its values and branches per round and
#: per iteration of the outer loop; unrolled, they are straight-line code Enzyme recomputes.
UNROLL_CONSTANT_LOOPS = "function(loop(loop-unroll-full))"
#: Enzyme's cache of a loop's loads copied before the loop (its "loop-invariant cache") off: Enzyme v0.0.289 takes
#: it wherever no single store of the loop may alias the load *in the same iteration*, so a loop that reads what an
#: earlier iteration wrote (``y[i] = x[i] + a * y[i - 1]``: an exponential filter, a recurrence) had the array
#: copied before the loop wrote it, and its derivatives with respect to the coefficient read memory not yet
#: written (NaN, or wrong with no error). Off, Enzyme caches such a load per iteration; what kept the corpus right
#: with it off is :mod:`pyjlad.trip_counts`.
NO_HOISTED_CACHES = "-enzyme-loop-invariant-cache=false"
#: opt pipeline over :func:`_enzyme_input`'s module: expand masked vector memory intrinsics (from
#: Numba's vectorizer; Enzyme has no rules for them) into scalar code; read the custom derivative
#: registrations (``preserve-nvvm`` turns ``__enzyme_register_*`` globals into the
#: metadata the ``enzyme`` pass looks for; see :mod:`pyjlad.rules`), differentiate,
#: optimize the result.
PASSES = "function(scalarize-masked-mem-intrin),preserve-nvvm,enzyme,preserve-nvvm-end,default<O2>"
#: The last retry after a type-analysis failure: vector loads and stores split into
#: scalar ones first (see :func:`_run_enzyme`).
SCALARIZED_PASSES = "function(scalarize-masked-mem-intrin,scalarizer),preserve-nvvm,enzyme,preserve-nvvm-end,default<O2>"


# External functions Enzyme differentiates by itself: libm, LLVM intrinsics and
# Numba's reference-counting/allocation runtime (inactive memory management).
# Numba's special-function helpers get their derivatives from pyjlad.special.
_KNOWN_EXTERNALS = (LIBM_FUNCTIONS | {name + "f" for name in LIBM_FUNCTIONS} | SPECIAL_FUNCTIONS
                    | {"malloc", "free", RUNTIME_CALL_DTOR})


def unknown_externals(exported: ExportedFunction) -> list[str]:
    """External functions of ``exported`` that Enzyme has no derivative rules for."""
    return [
        name for name in exported.module.external_functions
        if name not in _KNOWN_EXTERNALS and not is_inactive_helper(name) and not BLAS_NAME.match(name)
        and name.split(".")[0] not in LAPACK_HELPERS and not is_rule_symbol(name) and not is_nested_driver(name)
        # Numba runtime functions are handled by pyjlad.portable, except those a refusal names.
        and (not name.startswith(("llvm.", "NRT_")) or name in HELPER_CONSTRUCTS)
    ]


_TYPE_ANALYSIS_FAILURES = ("Cannot deduce type", "Cannot deduce adding type", "cannot handle unknown binary operator")
#: Enzyme looked for the shadow of a value as if it were a pointer (``invertPointerM``): after ``oval=`` and that
#: value's instruction (a vector of pointers; an integer, see :func:`_integer_taken_active`).
_SHADOW_ASSERTION = "cannot find deal with ptr that isnt arg"
#: Enzyme's failures on vector code (the loops of Numba's library functions, e.g. ``np.where``'s, are
#: vectorized when Numba first compiles them): forward mode puts the tangent phi of a ``<4 x i1>`` phi
#: after other instructions (a module that fails verification), reverse mode finds no shadow for a
#: vector of pointers (``invertPointerM``). Both differentiate once the vectors are split into scalars.
_VECTOR_CODE_FAILURES = ("PHI nodes not grouped at top of basic block", _SHADOW_ASSERTION)
_LOOSE_TYPES = "-enzyme-loose-types"
_SCALAR_MEMORY = "-scalarize-load-store"
#: Enzyme found no derivative for a function the module calls (a LAPACK helper such as
#: ``numba_ez_gesdd``, a typed-list helper). Often that call sits on a branch the arguments'
#: constants make dead: ``np.linalg.norm(a, 1)`` runs Numba's one implementation of every
#: order, whose ``ord == 2`` branch computes an SVD, with ``ord`` a run-time argument.
_NO_DERIVATIVE_FAILURES = ("No augmented forward pass found for", "No forward mode derivative found for",
                           "No reverse pass found for")
#: Before Enzyme, on the retry after such a failure: every definition but pyjlad's drivers and
#: Enzyme's registrations made internal, constants propagated into the functions they are passed
#: to (``ipsccp``: the ``ord`` above), the branches they decide removed, unreferenced code dropped.
_PRUNE_CONSTANT_BRANCHES = "internalize,ipsccp,function(simplifycfg),globaldce,"
_KEEP_EXTERNAL = "-internalize-public-api-list=pyjlad_*,__enzyme_*,enzyme_*"


@functools.cache
def _special_source_hash() -> str:
    """Identifies the derivatives pyjlad.special adds (part of every cache key: any module may call them)."""
    from pathlib import Path

    return cache.cache_key((Path(__file__).resolve().parent.parent / "special.py").read_text())


@functools.cache
def _lapack_source_hash() -> str:
    """Identifies pyjlad's LAPACK implementations in cache keys (they are compiled only when needed)."""
    from pathlib import Path

    here = Path(__file__).resolve().parent.parent
    return cache.cache_key(*((here / name).read_text() for name in ("lapack.py", "lapack_inverse.py")))


def custom_rule_modules(exported: ExportedFunction) -> list[str]:
    """The modules of the custom derivative rules ``exported`` calls (see :mod:`pyjlad.rules`)."""
    return [m for name in exported.module.external_functions if is_rule_symbol(name) for m in rule_modules(name)]


def linked_modules(exported: ExportedFunction) -> list[str]:
    """Every module linked with ``exported``'s: its custom rules and pyjlad's LAPACK loops."""
    from ..lapack import lapack_module

    return [*custom_rule_modules(exported), *(lapack_module(h, k) for h, k in exported.module.links)]


#: Enzyme v0.0.289's assertion when its min-cut cache planner picked a value it cannot recompute.
_MIN_CUT_FAILURE = "computeMinCache(): Assertion `legalRecompute("
#: Makes Enzyme cache every primal value its reverse pass needs and cannot recompute, without the min cut.
_NO_MIN_CUT = "-enzyme-mincut-cache=false"


#: ``opt`` arguments that make its post-Enzyme optimization (the vectorizers' cost models) target this
#: machine's CPU, as Numba's JIT targets it: without them ``opt`` optimizes for a baseline x86-64 (SSE2),
#: vectorizes loops two doubles wide and marks them vectorized, and the JIT's own pipeline does not widen them.
#: Runtime unrolling stays off, as it is for the baseline target: a CPU model with a loop buffer (AMD Zen 3)
#: turns it on, and it made the heat stencil's gradient 1.03-1.38x slower than the baseline's in runs of
#: ``benchmarks/host_target.py`` (without it: 0.90-1.05x).
HOST_TARGET = ("-mcpu=native", "-unroll-runtime=false")
#: The last stage of every pipeline here: the derivative optimized (see :func:`_optimized_for_host`).
_OPTIMIZE = "default<O2>"


def host_target_key() -> str:
    """:data:`HOST_TARGET` and what it resolves to on this machine (the CPU and its features, as LLVM names
    them): part of the cache key of every derivative optimized for the host."""
    return f"optimized-for:{' '.join(HOST_TARGET)}:{_host_cpu()}"


@functools.cache
def _host_cpu() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot list them on this platform: the CPU's name identifies it
        features = ""
    return f"{llvm.get_host_cpu_name()}:{features}"


def _optimized_for_host(toolchain: Toolchain, module: str | bytes, passes: str, what: str,
                        options: tuple[str, ...], rewrite: Callable[[str], str] | None = None) -> bytes:
    """``passes`` run in two ``opt`` processes: up to Enzyme for the baseline target (Enzyme's input is prepared
    as it always was: ``scalarize-masked-mem-intrin`` scalarizes by what the target cannot do), then the final
    ``default<O2>`` with :data:`HOST_TARGET`, so that the derivative's loops are vectorized as wide as this CPU's
    registers. The same ``options`` (SimplifyCFG's speculation limits among them) apply to both. ``rewrite``
    edits Enzyme's output (as IR text) before that optimization."""
    if not passes.endswith("," + _OPTIMIZE):
        return toolchain.run(module, passes, what=what, options=options)
    differentiated = toolchain.run(module, passes[: -len(_OPTIMIZE) - 1], what=what,
                                   options=(*options, "-S") if rewrite is not None else options)
    if rewrite is not None:
        differentiated = rewrite(differentiated.decode()).encode()
    return toolchain.run(differentiated, _OPTIMIZE, what=what, options=(*options, *HOST_TARGET))


def _parallel_rewrite(text: str) -> str:
    """Enzyme's output of a parallel derivative edited before its optimization: private adds made plain, large
    fills and copies split between threads, unread tape slots back on the stack."""
    return _tape_memory_released(parallel_fills(plain_private_adds(text)))


def _private_rewrite(text: str) -> str:
    """Enzyme's output of a derivative calling a parallel body's private copy: its adds made plain, unread tape
    slots back on the stack."""
    return _tape_memory_released(plain_private_adds(text))


def _tape_memory_released(text: str) -> str:
    """Enzyme's output with the memory it would lose on every call released: unread tape slots back on the stack
    (:mod:`pyjlad.unread_tape_slots`) or, where their address leaves their function, freed by the reverse pass
    (:mod:`pyjlad.taped_slot_frees`), the dropped frees of loop caches and of taped blocks put back
    (:mod:`pyjlad.dropped_cache_frees`, :mod:`pyjlad.forward_tape_frees`)."""
    return taped_slots_freed(unread_slots_on_the_stack(forward_tape_frees_restored(dropped_cache_frees_restored(text))))


def _differentiate(toolchain: Toolchain, module: str | bytes, passes: str, what: str,
                   options: tuple[str, ...] = (), host: bool = False,
                   rewrite: Callable[[str], str] | None = None) -> bytes:
    """Run Enzyme over ``module``; without its min-cut cache planner where that planner fails. With ``host``,
    ``rewrite`` edits Enzyme's output before it is optimized (:func:`_optimized_for_host`).

    Enzyme v0.0.289's planner (``GradientUtils::computeMinCache``) adds the
    value a loop-carried reduction starts from (the preheader operand of a
    loop-header PHI: ``m`` of a running max ``m = x[i] if x[i] > m else m``)
    to the values it may recompute in the reverse pass without checking that
    it can. When that start value is itself a PHI, i.e. the join of a previous
    loop that may not have run (``m`` of an earlier running max, or of the
    unrolled body of the same loop before its remainder loop), the planner
    chooses to recompute it and then aborts on its own check that every value
    it chose is recomputable. Without the planner, Enzyme caches each value the
    reverse pass needs and cannot recompute, which is correct; only those
    functions pay for it (the planner saves tape memory, not correctness).
    """
    run = functools.partial(_optimized_for_host, toolchain, rewrite=rewrite) if host else toolchain.run
    try:
        return run(module, passes, what=what, options=options)
    except EnzymeError as exc:
        if _MIN_CUT_FAILURE not in exc.diagnostics:
            raise
    return run(module, passes, what=what, options=(*options, _NO_MIN_CUT))


def _next_attempt(passes: str, options: tuple[str, ...], diagnostics: str) -> tuple[str, tuple[str, ...]] | None:
    """After Enzyme failed with ``passes`` and ``options``: what to try next, or ``None``.

    Retried only on failures known to have a cause these change; the tests
    check the results of every retried shape against analytic derivatives.

    * Enzyme has no derivative for a function the module calls
      (:data:`_NO_DERIVATIVE_FAILURES`): branches that constant arguments decide
      are removed first (:data:`_PRUNE_CONSTANT_BRANCHES`), which drops calls
      that never run (the SVD of ``np.linalg.norm(a, 1)``); the later retries
      keep that pruning.
    * Type analysis gave up (Enzyme cannot deduce the type of some untyped
      operation of Numba's runtime: a memset zeroing an array struct's pointer
      fields; index arithmetic a reverse pass caches and forward mode then
      differentiates): with loose types, Enzyme assumes their types.
    * Still a type failure, or a failure on vector code
      (:data:`_VECTOR_CODE_FAILURES`): vector operations, loads and stores are
      split into scalar ones first (LLVM's ``scalarizer``), so each element is
      typed by its own access: a vectorized copy (``load/store <4 x double>``)
      through a pointer whose element type Enzyme knows only at offset 0, the
      vectorized loops of ``np.where``. The last resort only: the first attempts
      keep the code as Numba vectorized it.
    """
    if any(m in diagnostics for m in _NO_DERIVATIVE_FAILURES) and _KEEP_EXTERNAL not in options:
        return _PRUNE_CONSTANT_BRANCHES + passes, (*options, _KEEP_EXTERNAL)
    pruned = passes.startswith(_PRUNE_CONSTANT_BRANCHES)
    typing = any(m in diagnostics for m in _TYPE_ANALYSIS_FAILURES)
    if typing and _LOOSE_TYPES not in options:
        return passes, (*options, _LOOSE_TYPES)
    if (typing or any(m in diagnostics for m in _VECTOR_CODE_FAILURES)) and _SCALAR_MEMORY not in options:
        return (_PRUNE_CONSTANT_BRANCHES if pruned else "") + SCALARIZED_PASSES, (*options, _SCALAR_MEMORY)
    return None


def _integers_typed(module: str | bytes) -> str:
    """``module`` with its integer loads and stores typed for Enzyme (:func:`pyjlad.ir.edit.tag_integer_accesses`).

    After every other attempt failed on a type: Enzyme's forward mode must know what a store writes into
    memory it may shadow, and nothing tells it for the integers a vectorized loop stores into an array the
    function allocates (``np.arange(n)``, the integer temporaries of ``np.sum(a, axis=0)``)."""
    text = module.decode() if isinstance(module, bytes) else module
    return tag_integer_accesses(parse(text, strict=False)).render()


def _floats_typed(module: str | bytes) -> str:
    """``module`` with its float loads and stores typed for Enzyme (:func:`pyjlad.ir.edit.tag_float_accesses`).

    Before loose types, after a type failure: Enzyme v0.0.289 does not take an LLVM ``double`` for a float, and a
    Hessian-vector product's reverse sweep over the forward derivative met a ``phi`` of tangents loaded from a
    shadow it could not type; with loose types that product was wrong (``np.max(x * x)``: all zeros). Typed so,
    it builds without them (``tests/test_float_accesses.py``)."""
    text = module.decode() if isinstance(module, bytes) else module
    return tag_float_accesses(parse(text, strict=False)).render()


def _fields_stored(module: str | bytes) -> str | None:
    """``module`` with its zero fills of stack structs made stores of their fields
    (:func:`pyjlad.ir.field_fills.fills_as_field_stores`), or None where it has none."""
    text = module.decode() if isinstance(module, bytes) else module
    stored = fills_as_field_stores(parse(text, strict=False))
    return None if stored is None else stored.render()


def _copies_looped(module: str | bytes) -> str:
    """``module`` with its copies of float arrays made loops (:func:`pyjlad.ir.edit.float_copies_as_loops`).

    After Enzyme could not type a fill: a Hessian-vector product of a function copying an argument held
    constant (``u = u0.copy()``), whose tangent Enzyme's forward derivative fills with an untyped ``memset``.
    With loose types the product was wrong (``tests/test_copies_as_loops.py``)."""
    text = module.decode() if isinstance(module, bytes) else module
    return float_copies_as_loops(parse(text, strict=False)).render()


#: Enzyme took an integer for a value with an adjoint and could not tell whether it holds a float (an index loaded
#: from an integer array the function fills in one loop and reads in another: ``np.maximum(np.minimum(k, 4),
#: 0)`` written as two statements).
_ADDED_INTEGER_FAILURE = "Cannot deduce adding type of"
#: Forward mode met an intrinsic it cannot differentiate, named on the next line, its call on the one after (an
#: integer one: ``llvm.smax`` of ``np.clip``).
_UNKNOWN_INTRINSIC = "unknown intrinsic"


def _integer_taken_active(diagnostics: str) -> bool:
    r"""Whether Enzyme failed on an integer it took for a value with a derivative (it did not know the memory it
    was loaded from holds integers).

    >>> _integer_taken_active("Cannot deduce adding type of:   %.406 = load i64, ptr %.405, align 8")
    True
    >>> _integer_taken_active("oval=  %m = tail call <8 x i64> @llvm.smin.v8i64(<8 x i64> %a, <8 x i64> %b) icv=0\n"
    ...                       "available inversion for ...\nAssertion `0 && \"cannot find deal with ptr that isnt arg\"'")
    True
    >>> _integer_taken_active("oval=  %p = load ptr, ptr %q icv=0\nAssertion `0 && \"cannot find deal with ptr that isnt arg\"'")
    False
    >>> _integer_taken_active("Enzyme: cannot handle (forward) unknown intrinsic\nllvm.smax\n"
    ...                       "  %.pj3 = tail call <8 x i64> @llvm.smax.v8i64(<8 x i64> %s, <8 x i64> %w) #11")
    True
    """
    if _ADDED_INTEGER_FAILURE in diagnostics:
        return True
    lines = diagnostics.splitlines()
    if _SHADOW_ASSERTION in diagnostics and any(
            integer_valued(line.partition("oval=")[2].partition(" icv=")[0]) for line in lines if "oval=" in line):
        return True
    return any(integer_valued(after) for k, line in enumerate(lines) if _UNKNOWN_INTRINSIC in line
               for after in lines[k + 1:k + 3])


#: Enzyme could not type a ``store`` (forward mode: what it writes into memory it may shadow; see
#: :func:`_integers_typed`).
_STORE_TYPE_FAILURE = "Cannot deduce type of store"


def _store_untyped_with_loose_types(options: tuple[str, ...], diagnostics: str) -> bool:
    """Whether Enzyme, with loose types and before the scalarized retry, still could not type a store.

    Forward mode through the integers a vectorized loop stores into an array the function allocates
    (``np.arange(n)``): scalarized, the vector code still stores untyped integers, and Enzyme ran for over ten
    minutes on the scalarized ``np.diff(x) * np.arange(n - 1)`` on an AMD EPYC host; its integer accesses typed
    (:func:`_integers_typed`), it builds on the first attempt.

    >>> _store_untyped_with_loose_types((_LOOSE_TYPES,), "Cannot deduce type of store   store i64 %3, ptr %p")
    True
    >>> _store_untyped_with_loose_types((), "Cannot deduce type of store   store i64 %3, ptr %p")
    False
    """
    return _LOOSE_TYPES in options and _SCALAR_MEMORY not in options and _STORE_TYPE_FAILURE in diagnostics


#: Enzyme could not type a ``memcpy``/``memmove`` (see :func:`_copies_typed`).
_COPY_TYPE_FAILURE = "Cannot deduce type of copy"
#: Enzyme could not type a fill: in a Hessian-vector product, the fill of a copy's tangent its own forward
#: derivative made (see :func:`pyjlad.ir.edit.float_copies_as_loops`).
_FILL_TYPE_FAILURE = "Cannot deduce type of memset"
#: Enzyme v0.0.289 reverse-differentiating its own forward-mode rule of a matrix product (a Hessian-vector product):
#: the rule scales the product's tangent with cblas_?lascl, an external function it has no derivative for.
_BLAS_RULE_UNDIFFERENTIABLE = "No augmented forward pass found for cblas_"


def _untyped_array_copy(diagnostics: str) -> bool:
    """Whether Enzyme could not type a copy (:data:`_COPY_TYPE_FAILURE`) of anything but a constant (the bytes of
    an error message: with loose types, integers, which they are).

    >>> _untyped_array_copy("Cannot deduce type of copy   call void @llvm.memcpy.p0.p0.i64(ptr %a, ptr %b, "
    ...                     "i64 %n, i1 false)")
    True
    >>> _untyped_array_copy("Cannot deduce type of copy   call void @llvm.memcpy.p0.p0.i64(ptr %a, ptr align 16 "
    ...                     "@.bytes.content.4, i64 21, i1 false)")
    False
    """
    for line in diagnostics.splitlines():
        if _COPY_TYPE_FAILURE not in line:
            continue
        ins = parse_instruction(line.split(_COPY_TYPE_FAILURE, 1)[1].strip())
        call = ins.call() if ins is not None else None
        if call is None or len(call.values) < 2 or not call.values[1].startswith("@"):
            return True
    return False


#: Enzyme's type analysis met two types for one value.
_TYPE_CONFLICT = "Illegal updateAnalysis"


def _copies_typed(module: str | bytes) -> str:
    """``module`` with its copies of float array elements typed for Enzyme (:func:`pyjlad.ir.edit.type_float_copies`).

    Before any retry with loose types, which take an untyped copy for integers: a copy of doubles that
    Enzyme takes for integers copies no adjoint, a silently zero gradient."""
    text = module.decode() if isinstance(module, bytes) else module
    return type_float_copies(parse(text, strict=False)).render()


def _callees_inlined(toolchain: Toolchain, module_text: str, what: str, entry: str,
                     whatever_they_call: bool = False) -> str:
    """``module_text`` with Numba's compiled callees inlined where :mod:`pyjlad.inline_callees` allows (``opt``'s
    ``always-inline`` pass; the text unchanged when none may be); ``whatever_they_call``: see
    :func:`pyjlad.inline_callees.inlinable`."""
    marked, count = mark_inlinable(module_text, whatever_they_call)
    if not count:
        return module_text
    return toolchain.run_text(marked, INLINE_PASSES, what=what, defines=entry)


#: The call of a reverse-mode driver (:mod:`pyjlad.engines.driver`): a derivative whose module has it is a reverse
#: sweep.
_REVERSE_CALL = "@__enzyme_autodiff("


def _enzyme_input(toolchain: Toolchain, exported: ExportedFunction, module_text: str,
                  whatever_they_call: bool = False) -> str | bytes:
    """The module Enzyme gets: ``module_text`` linked with the modules it needs, the entry's temporaries scoped
    (:mod:`pyjlad.memory_scopes`), small constant-trip loops unrolled (:data:`UNROLL_CONSTANT_LOOPS`), the fills
    of float arrays typed (:func:`_fills_typed`), a loop's failed allocations sent to the driver's exit
    (:func:`_allocation_failures_exit`) and its ways out that Enzyme would search too long taken at its latch
    (:func:`_exits_through_latches`), the copies and fills of growing lists typed (:func:`_list_types_hinted`),
    every loop's trip count its own (:mod:`pyjlad.trip_counts`), every
    function's blocks in dominance order (:mod:`pyjlad.block_order`).

    Always: Enzyme v0.0.289's forward mode visits blocks in the order they are written, and a use written
    before its definition either aborts it (``forwardModeInvertedPointerFallback``, once the only reason to
    reorder) or, silently, gives a wrong derivative: the Hessian-vector product (reverse over forward) of
    ``w = a[:, 0].copy(); sum_ij w[i] a[i, j] w[j]`` was wrong wherever Numba's O3 had left the second loop
    nest's outer header after its inner loop (``tests/test_block_order.py``)."""
    # Derivatives of the special functions Enzyme cannot differentiate (lgamma, gamma, ...).
    # The derivatives it calls from @njit code come first: Enzyme lowers the __enzyme_autodiff
    # calls in module order, and the inner ones must be lowered before the outer one reaches them.
    nested = nested_modules(exported.enzyme_module.external_functions, under_reverse=_REVERSE_CALL in module_text)
    # Numba's compiled callees inlined first (pyjlad.inline_callees): their temporaries become the entry's own.
    module_text = _callees_inlined(toolchain, module_text, exported.name, exported.abi.entry, whatever_they_call)
    # The entry's own temporaries told apart from its caller's memory, so that Enzyme does not cache what it
    # can read again (pyjlad.memory_scopes).
    # Then the caller's arrays it reads and writes kept for the reverse sweep (pyjlad.written_arguments). Both
    # change the one parsed module in place.
    entry_module = parse(module_text)
    if config.scope_temporaries():
        scope_temporaries(entry_module, exported.abi.entry)
    scoped = keep_written_arguments(entry_module, exported.abi.entry)
    texts = [prepare_special(m) for m in (*nested, scoped, *linked_modules(exported))]
    linked = toolchain.link(texts, what=exported.name, text=True).decode() if len(texts) > 1 else texts[0]
    # Small constant-trip loops unrolled; then every loop's trip count its own (pyjlad.trip_counts), so that
    # Enzyme never reads one loop's cache with another loop's counter.
    # In a forward derivative of a reverse sweep, pyjlad's allocators inlined first: otherwise Enzyme frees nothing
    # they allocate (pyjlad.forward_over_reverse).
    linked, passes = _allocators_inlined(linked)
    unrolled = toolchain.run_text(linked, passes, what=exported.name, defines=exported.abi.entry)
    typed = _fills_typed(_list_types_hinted(unrolled))
    return dominance_ordered(distinct_trip_counts(_exits_through_latches(_allocation_failures_exit(typed))))


def _allocators_inlined(module_text: str) -> tuple[str, str]:
    """``module_text`` with :func:`pyjlad.forward_over_reverse.inline_allocators` applied, and the passes that inline
    what it marked and unroll small constant-trip loops (:data:`UNROLL_CONSTANT_LOOPS` alone where nothing was)."""
    if not forward_over_reverse_text(module_text):
        return module_text, UNROLL_CONSTANT_LOOPS
    module = parse(module_text, strict=False)
    if not inline_allocators(module):
        return module_text, UNROLL_CONSTANT_LOOPS
    return module.render(), f"{INLINE_PASS},{UNROLL_CONSTANT_LOOPS}"


def _list_types_hinted(module_text: str) -> str:
    """``module_text`` with the copies and fills of growing lists typed for Enzyme
    (:func:`pyjlad.list_growth.hint_list_types`)."""
    if LIST_REALLOC not in module_text:
        return module_text
    return hint_list_types(parse(module_text, strict=False)).render()


def _second_order_grows_lists(module: str | bytes) -> bool:
    """Whether ``module`` is a second derivative (reverse over forward: it calls both ``__enzyme_fwddiff`` and
    ``__enzyme_autodiff``) that grows a list with pyjlad's typed growth (:mod:`pyjlad.list_growth`). A first
    derivative that needs loose types elsewhere (Numba's quicksort in ``np.partition``) is built so and checked
    (:mod:`pyjlad.engines.loose_check`)."""
    text = module.decode() if isinstance(module, bytes) else module
    return (LIST_REALLOC.lstrip("@") + "." in text and "@__enzyme_fwddiff" in text
            and "@__enzyme_autodiff" in text)


def _allocation_failures_exit(module_text: str) -> str:
    """``module_text`` with a loop's failed allocations sent to the driver's out-of-memory exit
    (:mod:`pyjlad.allocation_exits`), where that exit is armed on the thread that runs every allocation: serial CPU
    code whose driver arms it (not a derivative called from ``@njit`` code, nor a parallel or GPU one)."""
    if (f"@{OOM_ENTER}(" not in module_text or _PARALLEL in module_text or NVPTX_TRIPLE in module_text
            or "@NRT_MemInfo_" not in module_text):
        return module_text
    return failed_allocations_exit(parse(module_text, strict=False), armed=True).render()


def _exits_through_latches(module_text: str) -> str:
    """``module_text`` with each loop's early ways out that Enzyme would search too long taken at the loop's latch
    (:mod:`pyjlad.loop_exit_latches`)."""
    if "label %" not in module_text:
        return module_text
    return exits_through_latch(parse(module_text, strict=False)).render()


#: What a module with a parallel loop (:mod:`pyjlad.openmp_loops`) calls.
_PARALLEL = "@__kmpc_fork_call"


def _fills_typed(module_text: str) -> str:
    """``module_text`` with each fill of a float array made stores Enzyme types (:func:`pyjlad.ir.edit.type_float_fills`):
    always, since an untyped one gives no error, a silently wrong gradient (its adjoint is not zeroed in the
    reverse sweep); before that, an array zeroed right after its allocation allocated zeroed instead
    (:func:`pyjlad.zeroed_allocations.zeroed_allocations`: no fill left to type; serial CPU code only); and every fill
    left whose length may be zero made conditional
    (:func:`pyjlad.empty_fills.guard_empty_fills`): Enzyme aborts on a fill its own simplification left with a
    length of 0."""
    if "@llvm.memset" not in module_text:
        return module_text
    module = parse(module_text, strict=False)
    # Not on a GPU (no calloc), nor in a parallel derivative, whose large fills all its threads do
    # (pyjlad.openmp_fills): calloc would zero on one.
    if NVPTX_TRIPLE not in module_text and _PARALLEL not in module_text:
        zeroed_allocations(module)
    return guard_empty_fills(type_float_fills(module, blas_element_types())).render()


def _base_options(module: str | bytes, host: bool) -> tuple[str, ...]:
    """The options every Enzyme run over ``module`` starts from (its retries add to them); ``host``: the
    derivative runs on this machine's CPU."""
    text = module.decode() if isinstance(module, bytes) else module
    base = (*NO_SPECULATION_ARGS, NO_HOISTED_CACHES)
    # Not in a forward derivative of a reverse sweep: there Enzyme v0.0.289 frees nothing a loop with caches sized
    # once allocates (pyjlad.forward_over_reverse).
    if host and bounded_caches_fit(text) and not forward_over_reverse_text(text):
        return (*base, MAX_CACHE)
    return base


def enzyme_input_key() -> str:
    """What, besides the modules, decides :func:`_enzyme_input`'s output (for cache keys): the
    ``PYJLAD_SCOPE_TEMPORARIES`` setting, and what scoping does (a temporary's ``NRT_decref`` written out
    since 2026-12-02, :mod:`pyjlad.temporary_decrefs`: a derivative cached before that is not read); the fills
    of float arrays typed (:func:`_fills_typed`, since 2026-12-04: a derivative cached before is not read, it
    may be wrong); the float accesses typed before any attempt with loose types (:func:`_floats_typed`, since
    2026-12-04: a loose-typed derivative cached before is built again, typed); the fills of float arrays
    passed to BLAS typed, and float copies written as loops where Enzyme cannot type a fill (since 2026-12-05:
    a derivative refused or loose-typed before is built again); the integer accesses typed first where Enzyme
    took an integer for a value with a derivative (:func:`_integer_taken_active`, since 2026-12-05); the decrefs
    written out without branches, and a loop's failed allocations sent to the driver's exit
    (:mod:`pyjlad.allocation_exits`; both since 2026-12-05: a derivative refused before, Enzyme out of memory, is
    built); a loop's early ways out with long searches taken at its latch (:mod:`pyjlad.loop_exit_latches`, since
    2026-12-05: the same); the copies and fills of growing lists typed (:mod:`pyjlad.list_growth`, since
    2026-12-06: a list that grows was refused before); in a forward derivative of a reverse sweep, pyjlad's
    allocators inlined and no loop caches sized once (:mod:`pyjlad.forward_over_reverse`, since 2026-12-06: a
    derivative cached before leaked memory on every call); the values of an inner loop read after leaving two
    loops at once carried by a ``phi`` of the latch block (:mod:`pyjlad.loop_exit_latches`, since 2026-12-06: a
    derivative cached before may be wrong); fast-math ``@overload`` implementations compiled for the copy
    (:mod:`pyjlad.enzyme_copy`, since 2026-12-06: the same); a stack struct's zero fill Enzyme cannot type written as
    stores of its fields (:mod:`pyjlad.ir.field_fills`, since 2026-12-06: a derivative built with loose types
    before, refused or not, is built again typed); the ties of ``np.logaddexp``/``np.logaddexp2`` written in
    smooth form when Numba compiles the copy (:mod:`pyjlad.smooth_logaddexp`, since 2026-12-07: a derivative
    cached before may be wrong where an argument was negated); ``np.sinc`` of float32 at 0 in smooth form
    (:mod:`pyjlad.smooth_sinc`, since 2026-12-07: a Hessian cached before was 0 there); the copies, fills and
    constant items of integer lists typed by calls of their own (:mod:`pyjlad.list_growth`, since 2026-12-07: such
    a list's Hessian was refused before)."""
    scoped = ("temporaries scoped, their decrefs written out without branches" if config.scope_temporaries()
              else "temporaries not scoped")
    return f"{scoped}; zero fills of float arrays stored as floats, found through phis; fills of variable length guarded; zeroed arrays allocated zeroed; float accesses typed before loose types; BLAS-passed fills typed; float copies looped where fills are untyped; integers typed first where taken for floats; failed allocations in loops exit through the driver; early loop exits with long searches taken at the latch; growing lists typed; forward derivatives of reverse sweeps with allocators inlined and no caches sized once; inner-loop values read past two loops' way out carried by latch phis; fast-math overloads compiled for the copy; untyped zero fills of stack structs stored as their fields; logaddexp ties smooth in the copy's source; float32 sinc at zero smooth; integer lists' copies, fills and constants typed"


def nested_modules_called(exported: ExportedFunction) -> bool:
    """Whether ``exported`` calls a pyjlad derivative from ``@njit`` code (see :mod:`pyjlad.nested`).

    Asked of the copy Enzyme differentiates, where such calls are never inlined.
    """
    return any(is_nested_driver(name) for name in exported.enzyme_module.external_functions)


_log = get_logger(__name__)


@dataclass
class _TriedOnce:
    """A rewrite of Enzyme's input tried once, kept only if it helps.

    While it is the attempt being made (:meth:`start`), the module and the failure before it are kept; if Enzyme
    fails again, :meth:`undo` gives them back, so what follows sees the failure the rewrite did not mend.

    >>> once = _TriedOnce("typing the float accesses")
    >>> once.start("before", EnzymeError("failed"), "after")
    'after'
    >>> once.active, once.tried
    (True, True)
    >>> module, exc = once.undo("after", EnzymeError("failed again"), "f")
    >>> module, str(exc), once.active, once.tried
    ('before', 'failed', False, True)
    """

    what: str  #: what the rewrite does, for the log
    saved: tuple[str | bytes, EnzymeError] | None = None  #: the module and the failure before, while active
    tried: bool = False

    @property
    def active(self) -> bool:
        """Whether the rewritten module is the one Enzyme is running on."""
        return self.saved is not None

    def start(self, module: str | bytes, exc: EnzymeError, rewritten: str | bytes) -> str | bytes:
        """``rewritten``, the module to try next, with ``module`` and ``exc`` kept for :meth:`undo`."""
        self.saved, self.tried = (module, exc), True
        return rewritten

    def undo(self, module: str | bytes, exc: EnzymeError, name: str) -> tuple[str | bytes, EnzymeError]:
        """The module and failure before the rewrite if it is active (it did not help), else those given."""
        if self.saved is None:
            return module, exc
        _log.debug("%s of %s did not help: without it", self.what, name)
        (module, exc), self.saved = self.saved, None
        return module, exc

    def reset(self) -> None:
        """Forget the rewrite was tried (every attempt is made again from a new module)."""
        self.saved, self.tried = None, False


def run_enzyme(exported: ExportedFunction, module_text: str, host: bool = False,
               report: dict[str, Any] | None = None) -> bytes:
    """Enzyme's output for ``module_text`` (its blocks in dominance order: :func:`_enzyme_input`), retried as
    :func:`_next_attempt` says.

    ``host``: the derivative runs on this machine's CPU; its final optimization targets it
    (:func:`_optimized_for_host`; key the result with :func:`host_target_key`). ``report``: set
    ``report["loose_types"]`` to whether Enzyme succeeded only with loose types (whose derivatives
    :mod:`pyjlad.engines.loose_check` checks before trusting them). A derivative calling pyjlad derivatives from
    ``@njit`` code with a loop that could only repeat (:mod:`pyjlad.endless_loops`) is refused
    (:func:`pyjlad.nested.refuse_endless`) instead of returned."""
    toolchain = locate()
    label = exported.abi.entry
    dump(label, "driver", module_text)
    module, typed, copies, blas_loops = _enzyme_input(toolchain, exported, module_text), False, False, False
    fields = False  # zero fills of stack structs written as stores of their fields (after an untyped fill)
    untyped: str | bytes | None = None  # the module before its copies were typed, while that is the last attempt
    floats = _TriedOnce("typing the float accesses")  # before loose types (_floats_typed)
    looped = _TriedOnce("the float copies as loops")  # after an untyped fill (float_copies_as_loops)
    integers = _TriedOnce("typing the integer accesses first")  # an integer taken active (_integer_taken_active)
    one_shots = (floats, looped, integers)
    first_failure: EnzymeError | None = None  # set when every attempt is made again with more callees inlined
    dump(label, "enzyme.input", module)
    # Branches stay branches in Enzyme's own pre-optimization (see pyjlad.enzyme_copy); no loop-invariant caches
    # (NO_HOISTED_CACHES, on the GPU too); on the CPU, the caches of loops whose early exits are raises or NaN tests
    # allocated once (see pyjlad.loop_caches; a GPU kernel's derivative keeps Enzyme's default, which no GPU here
    # could check).
    base = _base_options(module, host)
    passes, options = PASSES, base
    # A parallel derivative's private rows and LAPACK helpers (pyjlad.private_bodies): their adds into adjoints
    # no other thread touches made plain; and its large fills and copies done by all its threads
    # (pyjlad.openmp_fills).
    # And in every derivative, stack slots Enzyme moved to the heap for a tape field nothing reads put back on the
    # stack (pyjlad.unread_tape_slots: nothing would free them), and the frees of loop caches that a forward
    # derivative of a reverse sweep dropped put back (pyjlad.dropped_cache_frees).
    parallel = _PARALLEL in module_text
    rewrite = _parallel_rewrite if parallel else (
        _private_rewrite if BODY_PREFIX in module_text else _tape_memory_released)
    while True:
        try:
            with timed(_log, "Enzyme on %s (options %s)", exported.name, " ".join(options) or "none"):
                derivative = _differentiate(toolchain, module, passes, exported.name, options, host, rewrite)
            dump(label, "enzyme.output", derivative)
            if report is not None:
                report["loose_types"] = _LOOSE_TYPES in options
            break
        except EnzymeError as raised:
            exc = raised
            for once in one_shots:  # the one being tried did not help: the module and the failure as before it
                module, exc = once.undo(module, exc, exported.name)
            if not integers.tried and not typed and _integer_taken_active(exc.diagnostics):
                # An integer loaded from an array the function fills (an index array clamped twice, np.clip of
                # one): typed, it has no adjoint; loose types would assume its type instead.
                _log.debug("Enzyme took an integer of %s for a float: retrying with its integer accesses typed",
                           exported.name)
                module = integers.start(module, exc, _integers_typed(module))
                dump(label, "enzyme.input-integers-typed-first", module)
                continue
            if _FILL_TYPE_FAILURE in exc.diagnostics and not fields:
                # Numba's zero fill of an array struct's meminfo and parent, which nothing reads back (a column's
                # view inside np.max): its fields' own types, kept whatever fails next (the same memory, typed).
                fields = True
                stored = _fields_stored(module)
                if stored is not None:
                    _log.debug("Enzyme could not type a fill in %s: retrying with stack structs' fills as stores of "
                               "their fields", exported.name)
                    module = stored
                    dump(label, "enzyme.input-fills-as-field-stores", module)
                    continue
            if _FILL_TYPE_FAILURE in exc.diagnostics and not looped.tried:
                # A Hessian-vector product: the forward derivative's own fill of a copy's tangent, untyped.
                _log.debug("Enzyme could not type a fill in %s: retrying with its float copies as loops",
                           exported.name)
                module = looped.start(module, exc, _copies_looped(module))
                dump(label, "enzyme.input-copies-looped", module)
                continue
            if _BLAS_RULE_UNDIFFERENTIABLE in exc.diagnostics and not blas_loops:
                # A second derivative (reverse over forward) of a matrix product: Enzyme's forward-mode BLAS rule
                # calls cblas_?lascl, which its reverse mode cannot differentiate. The products as loops instead.
                _log.debug("Enzyme cannot differentiate its BLAS rules in %s: retrying with the products as loops",
                           exported.name)
                module = blas_as_loops(module.decode() if isinstance(module, bytes) else module)
                blas_loops = True
                dump(label, "enzyme.input-blas-loops", module)
                continue
            if _COPY_TYPE_FAILURE in exc.diagnostics and not copies:
                _log.debug("Enzyme could not type a copy in %s: retrying with float copies typed", exported.name)
                untyped, module, copies = module, _copies_typed(module), True
                dump(label, "enzyme.input-copies-typed", module)
                continue
            if parallel and _untyped_array_copy(exc.diagnostics):
                # With loose types, the retry below, Enzyme takes a copy it cannot type for integers: the adjoint
                # through a copy of floats would be lost. A parallel derivative has the serial one to fall back on
                # (pyjlad.parallel_derivatives), whose copies Enzyme types from the loops it sees inline.
                raise EnzymeError(f"Enzyme could not type a copy of an array in the parallel derivative of "
                                  f"{exported.name}", diagnostics=exc.diagnostics) from None
            if untyped is not None and _TYPE_CONFLICT in exc.diagnostics:
                # The copies' types contradict what Enzyme deduced elsewhere: the attempts as before.
                _log.debug("typing the copies of %s contradicted Enzyme's types: without them", exported.name)
                module, untyped = untyped, None
                continue
            untyped = None
            attempt = _next_attempt(passes, options, exc.diagnostics)
            if not typed and (_store_untyped_with_loose_types(options, exc.diagnostics) or (
                    attempt is None and any(m in exc.diagnostics for m in _TYPE_ANALYSIS_FAILURES))):
                # Every attempt again, the integers in memory typed: the last resort for a type failure, and
                # before the scalarized retry for a store loose types did not type either.
                _log.debug("Enzyme could not type %s's memory: retrying with its integer accesses typed",
                           exported.name)
                module, typed = _integers_typed(module), True
                dump(label, "enzyme.input-integers-typed", module)
                passes, options = PASSES, base
                continue
            if attempt is not None and _LOOSE_TYPES in attempt[1] and _second_order_grows_lists(module):
                # Loose types may take a list's copies for another kind: a Hessian-vector product of a list popped
                # and grown, built so, freed an invalid pointer when run (the process aborted). Refused instead.
                raise EnzymeError(
                    f"pyjlad cannot differentiate {exported.name} this way: it uses a list that grows, and Enzyme "
                    "could not type all of this derivative's memory (in a Hessian-vector product: the copies of the "
                    "list's tangents). This is a known limit of pyjlad: a list's gradient and jvp are typed; for "
                    "this derivative fill a preallocated NumPy array instead of growing a list.",
                    diagnostics=exc.diagnostics) from None
            if attempt is not None and _LOOSE_TYPES in attempt[1] and not floats.tried:
                # Before loose types, which assume what Enzyme could not deduce: the float accesses typed. Where that
                # fails too, the module as it was, and the attempts as before.
                _log.debug("Enzyme could not type %s: retrying with its float accesses typed", exported.name)
                module = floats.start(module, exc, _floats_typed(module))
                dump(label, "enzyme.input-floats-typed", module)
                continue
            if attempt is not None and _LOOSE_TYPES in attempt[1] and not copies:
                # Loose types take a copy Enzyme cannot type for integers, losing the adjoint through it; Enzyme
                # stops at its first failure, which can be another (a phi of Numba's quicksort, before the copy
                # np.median makes of a slice of the sorted array): the copies are typed before loose types.
                _log.debug("retrying %s with loose types: float copies typed first", exported.name)
                untyped, module, copies = module, _copies_typed(module), True
                dump(label, "enzyme.input-copies-typed", module)
            if attempt is not None:
                _log.debug("Enzyme failed on %s (%s); retrying with options %s", exported.name,
                           exc.diagnostics.strip().splitlines()[-1][:200] if exc.diagnostics.strip() else exc,
                           " ".join(attempt[1]))
            if (attempt is None and first_failure is None and not out_of_resources(exc)
                    and more_inlinable(module_text)):
                # Every attempt again with Numba's helpers inlined whatever they call (pyjlad.inline_callees): Enzyme
                # failed on a helper left a call that it differentiates inlined. Not after running out of time or
                # memory, which a second run would only repeat.
                _log.debug("Enzyme failed on %s: retrying with its helpers inlined", exported.name)
                first_failure = exc
                module = _enzyme_input(toolchain, exported, module_text, whatever_they_call=True)
                typed = copies = blas_loops = fields = False
                for once in one_shots:
                    once.reset()
                dump(label, "enzyme.input-helpers-inlined", module)
                passes, options = PASSES, base
                continue
            if attempt is None:
                failure = first_failure or exc  # the function as it is written, if inlining did not help
                if nested_modules_called(exported):
                    raise explain_nested(exported.name, exported.enzyme_module.external_functions, failure) from None
                # In the user's terms: the construct, where it is used, what to write instead.
                raise explain(exported, failure, unknown_externals(exported)) from None
            passes, options = attempt


    if nested_modules_called(exported):  # Enzyme's reverse over reverse of a loop left early never returns
        refuse_endless(exported.name, exported.enzyme_module.external_functions, endless_loops(text_of(derivative)))
    return derivative
