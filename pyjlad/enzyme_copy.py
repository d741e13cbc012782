"""The copy of a Numba function that Enzyme differentiates: every branch kept a branch.

LLVM's optimizer turns short ``if``/``else`` code into straight-line code that
computes both sides and picks one with a ``select``: SimplifyCFG folds a
two-entry phi (``math.log(x) if x > 0 else x``, ``x ** 1.5 if x > 0 else -x``,
``1 / x if x != 0 else 0``) and the loop vectorizer if-converts every branch of
a vectorized loop (Numba's ``np.cbrt``: ``-pow(-x, 1/3) if x < 0 else
pow(x, 1/3)``). The numbers are the same; the derivative is not. Enzyme
v0.0.289 differentiates a ``select`` by differentiating both operands, the
untaken one with a zero adjoint, and has no strong zero: the untaken side's
partial is ``0 * inf`` or ``0 * nan`` wherever it is singular (``pow(-x, 1/3)``
at ``x > 0``, ``log(0)``, ``1 / 0``), so the gradient is NaN although the
program never evaluates that side. Forward mode is unaffected (the select picks
the taken tangent).

pyjlad therefore compiles, for Enzyme only, a copy of the function
(:func:`unvectorized_copy`) under :func:`branch_preserving_compile`:

* without Numba's loop and SLP vectorizers;
* without SimplifyCFG's speculation (the folding thresholds at zero, no
  "one expensive instruction" allowance), so a branch whose arm has any cost
  stays a branch and Enzyme differentiates only the side that ran;
* without loop unrolling and interleaving: Enzyme v0.0.289 loses adjoints in
  unrolled loop nests (a 1-D max pool whose outer loop LLVM unrolled by 4 and
  whose inner loop has an unrolled body and a remainder loop: every window but
  the first got a zero reverse-mode derivative on an AMD Zen 3 host, while the
  rolled loops differentiate right), and each unrolled copy of a loop body
  caches its own values. The derivative is unrolled after Enzyme, by ``opt``'s
  ``default<O2>`` and Numba's optimizer when it is loaded. Loops with a small
  constant trip count (the two rounds of Numba's ``x ** 2``) are fully unrolled
  by ``opt`` just before Enzyme (``loop-unroll-full`` in
  :data:`pyjlad.engines.differentiate.PASSES`): left rolled, each became an
  inner loop whose every value and branch Enzyme cached per round, 102 MiB of
  tape for the loop Rosenbrock over 10^6 elements; unrolled, none;
* without non-trivial loop unswitching (:data:`NO_UNSWITCHING`): O3 copies a
  loop for each value of a branch condition that is invariant in it, such as
  ``i > 0`` of a stencil's inner loop, and Enzyme then caches the values of
  each copy in a tape of its own, each sized for every iteration of the
  enclosing loops although only one copy runs per iteration: two Laplacians
  per step for the heat stencil of the benchmarks (2 x 50 MiB) instead of one;
* with the element indices of Numba's array expressions and ufunc loops
  computed as ``select(shape > 1, loop index, 0)`` (:func:`_selected_indices`)
  instead of kept in a variable that is updated only where the array is not
  broadcast along that axis: the same numbers, but that update is a
  loop-carried value Enzyme cannot recompute (O3 unswitched it away), so it
  cached every index of every element, four per element of ``u * u`` for a
  2-D ``u``; as a ``select`` of a loop-invariant condition it recomputes them;
* with every ``@njit`` function it calls (by global name or closure, at any
  depth) replaced by such a copy, and with an empty cache of Numba's internal
  helpers (``context.compile_internal``): Numba links a function's callees
  as they were first compiled in the process, i.e. vectorized and if-converted
  for the user's own call, and re-optimizing a vectorized loop cannot undo it;
* with caches of their own for NumPy's functions and methods Numba implements by ``@overload`` (``np.prod``,
  ``x.prod()``, ``np.nanprod``, ...: :func:`_copy_side_overloads`) compiled for fast-math code: Numba compiles
  each such implementation once per argument types and flags and links it into every later caller, the copy
  included, so the copy got the user's vectorized code. Under ``fastmath`` that is a reduction vectorized in
  lanes, whose reverse-mode
  derivative Enzyme v0.0.289 got **wrong** (``np.prod`` of ``[1, 2, 3, 4]``: ``[24, 12, 16, 9]`` for ``[24,
  12, 8, 6]``, no error, until 2026-12-06; found by a user-style probe; ``tests/test_fastmath_overloads.py``).

The user's function and its callees keep their own (vectorized) code: the
settings are restored afterwards, under Numba's compiler lock, which every
compile takes. ``opt`` runs Enzyme with the same speculation limits
(:data:`NO_SPECULATION_ARGS`): Enzyme's pre-optimization of the function runs
SimplifyCFG too. They hold for the optimization of the derivative after it as
well (one ``opt`` process); its loops are still vectorized. The price: a
guarded loop's gradient keeps its branch (``math.log(x) if x > 0 else x``
over 10**6 elements: about 40 ms instead of 20 ms on the development
machine); ``-enzyme-preopt=false`` instead of the limits measured as fast and
as right on that loop, but changes Enzyme's preprocessing of every function.
"""

from __future__ import annotations

import contextlib
import types as pytypes
import weakref
from collections.abc import Iterator
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as llvmir
import numba
from numba.core import codegen, config
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher
from numba.core.registry import cpu_target
from numba.core.typing import templates
from numba.np import npyimpl

from .export_compile import copy_options
from .frozen_globals import filled, fingerprint
from .memo import cached_for
from .smooth_logaddexp import smooth_ties

__all__ = ["unvectorized_copy", "branch_preserving_compile", "NO_SPECULATION", "NO_SPECULATION_ARGS", "NO_UNSWITCHING"]

#: SimplifyCFG's speculation limits: (option, value for Enzyme's copy, LLVM's default).
NO_SPECULATION = (
    ("two-entry-phi-node-folding-threshold", "0", "4"),  # if/else diamond -> select
    ("phi-node-folding-threshold", "0", "2"),  # one-sided if -> select
    ("speculate-one-expensive-inst", "false", "true"),  # an expensive call over the budget
)
#: The same limits as ``opt`` arguments: Enzyme's own pre-optimization (``-enzyme-preopt``) runs
#: SimplifyCFG on the function before differentiating it, and would fold the branches back into selects.
NO_SPECULATION_ARGS = tuple(f"-{name}={value}" for name, value, _ in NO_SPECULATION)
#: Non-trivial loop unswitching (O3) off for Enzyme's copy: (option, value for the copy, LLVM's default).
#: No candidate costs less than 1, so none is unswitched (0 trips an assertion of LLVM's).
NO_UNSWITCHING = (("unswitch-threshold", "1", "50"),)
_COPY_KEY = ("unvectorized",)
#: Options a copy does not take: the disk cache (the copy never shares the user's), ``parallel``
#: (pyjlad differentiates the serial function) and ``nopython`` (implied by ``njit``).
_DROPPED_OPTIONS = ("nopython", "cache", "parallel")


def _rolled_pass_builder(tm: Any, opt: int = 2, loop_vectorize: bool = False,
                         slp_vectorize: bool = False) -> Any:
    """Numba's pass builder for Enzyme's copy: no vectorizers, no loop unrolling or interleaving.

    Stands in for ``numba.core.llvm_bindings.create_pass_builder`` (same
    signature) while :func:`branch_preserving_compile` holds the compiler lock.
    """
    options = llvm.create_pipeline_tuning_options()
    options.speed_level = opt
    options.loop_vectorization = options.slp_vectorization = False
    options.loop_unrolling = options.loop_interleaving = False
    return llvm.create_pass_builder(tm, options)


def _selected_indices(self: Any, loop_indices: list[Any], name: str) -> None:
    """``numba.np.npyimpl._ArrayIndexingHelper.update_indices`` for Enzyme's copy: a ``select`` per index.

    Numba keeps each array operand's index in a stack slot that starts at 0 and is
    set to the loop's index only where the operand's extent along that axis exceeds 1
    (a broadcast axis keeps 0). The extent is the same throughout the loop nest, so
    storing ``select(extent > 1, loop index, 0)`` every time leaves the same values in
    the slot, without a value carried from one iteration to the next.
    """
    builder = self.array.builder
    intp = self.array.context.get_value_type(numba.types.intp)
    one, zero = llvmir.Constant(intp, 1), llvmir.Constant(intp, 0)
    indices = loop_indices[len(loop_indices) - len(self.indices):]
    for src, dst, extent in zip(indices, self.indices, self.array.shape, strict=False):
        builder.store(builder.select(builder.icmp_unsigned(">", extent, one), src, zero), dst)


def _set_llvm_options(values: dict[str, str]) -> None:
    for name, value in values.items():
        llvm.set_option("pyjlad", f"-{name}={value}")


#: The copy's own caches of each ``@overload`` template (its implementations and their compiled overloads).
_COPY_SIDE: weakref.WeakKeyDictionary[type, tuple[dict, dict]] = weakref.WeakKeyDictionary()


def _overload_templates() -> list[type]:
    """Every template class Numba made for an ``@overload`` (functions and, through them, methods)."""
    found, todo = [], [templates._OverloadFunctionTemplate]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def _fast_math(cache_key: Any) -> bool:
    """Whether an ``@overload`` template's cache key ``(context, args, kws, flags)`` is for a fast-math compile."""
    flags = cache_key[3] if isinstance(cache_key, tuple) and len(cache_key) == 4 else None
    return bool(getattr(flags, "fastmath", False))


@contextlib.contextmanager
def _copy_side_overloads() -> Iterator[None]:
    """Inside the block, every ``@overload`` template keeps its implementations in the copy's own caches
    (:data:`_COPY_SIDE`): those for fast-math compiles are compiled, once, with the copy's settings, not linked from
    the user's compile; the others are the user's (shared: compiled without fast-math, no reduction is vectorized,
    and their code is what every derivative so far was built from)."""
    swapped = []
    for cls in _overload_templates():
        own = cls.__dict__
        impl_cache, compiled = own.get("_impl_cache"), own.get("_compiled_overloads")
        if not isinstance(impl_cache, dict) or not isinstance(compiled, dict):
            continue
        mine_impl, mine_compiled = _COPY_SIDE.setdefault(cls, ({}, {}))
        for key, value in impl_cache.items():
            if not _fast_math(key):
                mine_impl.setdefault(key, value)
        for key, value in compiled.items():
            mine_compiled.setdefault(key, value)
        swapped.append((cls, impl_cache, compiled))
        cls._impl_cache, cls._compiled_overloads = mine_impl, mine_compiled
    try:
        yield
    finally:
        for cls, impl_cache, compiled in swapped:
            cls._impl_cache, cls._compiled_overloads = impl_cache, compiled


@contextlib.contextmanager
def branch_preserving_compile() -> Iterator[None]:
    """Compile (inside the block) with no vectorizers, no loop unrolling or unswitching, no speculation and no cached
    internal helpers.

    Holds Numba's compiler lock for the block, so no other compile (the user's
    own, in another thread) sees these settings.
    """
    context = cpu_target.target_context
    with global_compiler_lock:
        saved = config.LOOP_VECTORIZE, config.SLP_VECTORIZE
        saved_internal = context.cached_internal_func
        config.LOOP_VECTORIZE = config.SLP_VECTORIZE = 0
        context.cached_internal_func = {}
        builder = codegen.create_pass_builder
        codegen.create_pass_builder = _rolled_pass_builder
        update_indices = npyimpl._ArrayIndexingHelper.update_indices
        npyimpl._ArrayIndexingHelper.update_indices = _selected_indices
        _set_llvm_options({name: value for name, value, _ in (*NO_SPECULATION, *NO_UNSWITCHING)})
        try:
            with _copy_side_overloads(), smooth_ties():
                yield
        finally:
            _set_llvm_options({name: default for name, _, default in (*NO_SPECULATION, *NO_UNSWITCHING)})
            npyimpl._ArrayIndexingHelper.update_indices = update_indices
            codegen.create_pass_builder = builder
            context.cached_internal_func = saved_internal
            config.LOOP_VECTORIZE, config.SLP_VECTORIZE = saved


def _substitute(value: Any, building: dict[int, Dispatcher]) -> Any:
    """``value``'s copy if it is an ``@njit`` dispatcher, else ``value``."""
    if isinstance(value, Dispatcher):
        return unvectorized_copy(value, building)
    return value


def unvectorized_copy(dispatcher: Dispatcher, building: dict[int, Dispatcher] | None = None, *,
                      keep_parallel: bool = False) -> Dispatcher:
    """A fresh ``@njit`` copy of ``dispatcher`` whose ``@njit`` callees are such copies too (one per function).

    Compile it under :func:`branch_preserving_compile`. Callees are found by
    the global names and closure variables of the function's code; a callee
    reached otherwise (an attribute of a module) keeps its own compiled code.

    Parameters
    ----------
    dispatcher : numba Dispatcher
        The function.
    building : dict, optional
        The copies being built by the calls up the stack (recursive functions).
    keep_parallel : bool
        Keep the function's own ``parallel=True`` (its callees' copies are serial): the copy
        :mod:`pyjlad.parallel_derivatives` differentiates.

    Returns
    -------
    numba Dispatcher
        The copy (not yet compiled).
    """
    building = {} if building is None else building
    if id(dispatcher) in building:
        return building[id(dispatcher)]

    def build() -> Dispatcher:
        py = dispatcher.py_func
        namespace = dict(py.__globals__)
        cells = py.__closure__
        clone = pytypes.FunctionType(py.__code__, namespace, py.__name__, py.__defaults__, cells)
        clone.__qualname__ = py.__qualname__
        dropped = tuple(o for o in _DROPPED_OPTIONS if not (keep_parallel and o == "parallel"))
        options = copy_options(dispatcher, dropped)
        copy = numba.njit(**options)(clone)
        building[id(dispatcher)] = copy
        for name in py.__code__.co_names:
            if isinstance(namespace.get(name), Dispatcher):
                namespace[name] = _substitute(namespace[name], building)
        if cells and any(isinstance(c.cell_contents, Dispatcher) for c in cells if filled(c)):
            cells = tuple(pytypes.CellType(_substitute(c.cell_contents, building)) if filled(c) else c
                          for c in cells)
            clone = pytypes.FunctionType(py.__code__, namespace, py.__name__, py.__defaults__, cells)
            clone.__qualname__ = py.__qualname__
            copy = numba.njit(**options)(clone)
            building[id(dispatcher)] = copy
        return copy

    # Keyed by what the function's globals hold now: Numba compiles a new signature with the values of then (the
    # copy's namespace is taken when it is built), and so must the copy.
    key = (*_COPY_KEY, "parallel") if keep_parallel else _COPY_KEY
    return cached_for(dispatcher, (*key, fingerprint(dispatcher.py_func)), build)
