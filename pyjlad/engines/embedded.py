"""The embedded engine: Enzyme's LLVM plugin run by ``opt``, the result JIT-ed in-process.

Pipeline for one (function, argument types, ``wrt``):

1. :func:`pyjlad.export.export` gives the portable module and its ABI;
2. :mod:`pyjlad.engines.driver` appends the Enzyme driver for the sweep;
3. ``opt-15 -load-pass-plugin=LLVMEnzyme-15.so -passes=...,enzyme,default<O2>``
   (:data:`PASSES`) differentiates and optimizes it in subprocesses (the final
   ``default<O2>`` in a second ``opt`` that targets this machine's CPU:
   :data:`pyjlad.engines.differentiate.HOST_TARGET`; output cached on disk);
4. the bitcode is loaded into Numba's own JIT (LLVM 22 reads LLVM 15
   bitcode), where Numba's runtime symbols (NRT, libm) already resolve, and
   optimized again;
5. a small ``@njit(nogil=True)`` *caller* passes the user's arguments to the
   driver exactly as Numba passes them to its own functions, so calling a
   compiled gradient costs one Numba dispatch and no Python-level marshalling.

The caller is compiled per argument types by Numba's dispatcher; the typing
step of its intrinsic is where steps 1-4 run, so new argument types build a
new gradient and known ones reuse it.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types as nbtypes
from numba.core import cgutils
from numba.core import errors as nberrors
from numba.extending import intrinsic

from .. import cache, config
from ..abi import FunctionABI
from ..activity import Activity
from ..enzyme_copy import NO_SPECULATION_ARGS
from ..errors import EnzymeError, OutOfMemoryError, PyjladError, ToolchainError, UnsupportedFunctionError
from ..export import (
    ExportedFunction,
    as_numba_function,
    describe_function,
    export,
    numba_argtypes,
    wrapped_name,
)
from ..export_compile import plain_function_dispatcher
from ..frozen_globals import follow, recompile_if_changed, refuse_changed
from ..memo import cached_for, forget
from ..nested import NestedSweep, cache_key_parts, remember
from ..parallel_derivatives import (
    cache_tag,
    tangent_shadowed_abi,
    with_parallel_fallback,
    with_runtime_activity,
)
from ..portable import RUNTIME_CALL_DTOR, PortableModule, has_recursion
from ..random_draws import REPLAYING, before_run
from ..rules import calls_custom_rules, calls_reverse_rules
from ..toolchain import locate, opt_route
from . import native
from .base import (  # noqa: F401 - the contract, also importable from here
    ReverseGradient,
    Sweep,
    check_result,
    compact_overlapping,
    overlaps_itself,
    reraise_from_function,
    resolve_activities,
    shadow_like,
)
from .differentiate import (
    NO_HOISTED_CACHES,
    PASSES,
    _lapack_source_hash,
    _special_source_hash,
    custom_rule_modules,
    enzyme_input_key,
    host_target_key,
    run_enzyme,
)
from .driver import OUT_OF_MEMORY, RELEASE, ZEROED, Driver, ad_driver
from .hvp_driver import hvp_driver
from .loose_check import LooseCheck, loose_derivative_check, rerun
from .objects import built_with_loose_types, mark_loose_types
from .objects import load_library as _load_library
from .pool import failed_bytes
from .vector_driver import vector_sweep_driver

__all__ = [
    "EmbeddedEngine", "ReverseGradient", "Compiled", "Sweep", "shadow_like", "resolve_activities",
    "reraise_from_function", "compact_overlapping", "overlaps_itself"]

NAME = "embedded"
def _register_runtime_symbols() -> None:
    """Make the portable runtime's references to Numba's runtime resolvable in the JIT."""
    from numba.core.runtime import _nrt_python

    llvm.add_symbol(RUNTIME_CALL_DTOR, _nrt_python.c_helpers["MemInfo_call_dtor"])
    libc = ctypes.CDLL(None)
    for symbol, function in ((ZEROED, libc.calloc), (RELEASE, libc.free)):
        llvm.add_symbol(symbol, ctypes.cast(function, ctypes.c_void_p).value)


_register_runtime_symbols()


#: What Enzyme is given (cache key; see ExportedFunction.enzyme_module). 2: IR before code generation; 3: @njit
#: callees, Numba's helpers copied, no speculation; 4: no unrolling or interleaving; 5: no non-trivial unswitching;
#: 6: copies of float array elements typed before loose types (a derivative built without that may be wrong);
#: 7: ... also where Enzyme's first failure was not the copy's; 8: ... not joined through constants (np.diff);
#: 9: a derivative built with loose types marked so (checked before it is trusted: pyjlad.engines.loose_check);
#: 10: every function's blocks in dominance order (a Hessian-vector product built without that may be wrong);
#: 11: the entry's temporaries and its caller's memory told apart (pyjlad.memory_scopes);
#: 12: Numba's compiled callees inlined first (pyjlad.inline_callees); 13: caches of loops whose early exits are
#: raises or NaN tests allocated once (pyjlad.loop_caches), arrays read only by BLAS products not written
#: (pyjlad.inferred_readonly); 14: no loop-invariant caches, every loop's trip count its own (pyjlad.trip_counts).
#: 15: stack slots Enzyme moved to the heap for tape fields nothing reads put back on the stack
#: (pyjlad.unread_tape_slots). 16: ... also zeroed ones in a tape returned by value, and unfreed caches allocated
#: once per call; the frees of loop caches a forward derivative of a reverse sweep dropped put back
#: (pyjlad.dropped_cache_frees). 17: taped stack slots whose address leaves their function freed by the reverse
#: pass (pyjlad.taped_slot_frees). 18: the frees of taped blocks a forward derivative of a reverse pass dropped put
#: back (pyjlad.forward_tape_frees). 19: ... a taped slot freed only by a reverse pass that frees another of the
#: tape's blocks.
_ENZYME_INPUT = "unvectorized-copy/19 " + " ".join((*NO_SPECULATION_ARGS, NO_HOISTED_CACHES))

@dataclass(frozen=True)
class Built:
    """A compiled sweep for one set of argument types."""

    exported: ExportedFunction
    driver: Driver
    activities: tuple[Activity, ...]
    library: Any  # numba CodeLibrary holding the driver
    nested: NestedSweep | None = None  # what pyjlad.nested rebuilds the driver from (it holds it weakly)
    loose_types: bool = False  # Enzyme needed loose types: checked before it is trusted (pyjlad.engines.loose_check)


def _derivative_name(exported: ExportedFunction, sweep: Sweep) -> str:
    """The derivative ``sweep`` builds, in the user's terms (for messages)."""
    if sweep.kind == "hvp":
        return f"the Hessian-vector product of {exported.name}"
    return f"the {sweep.mode}-mode derivative of {exported.name}"


def build(func: Any, argtypes: Sequence[nbtypes.Type], sweep: Sweep, *, oom_guard: bool = True) -> Built:
    """Export, differentiate and JIT ``sweep`` of ``func`` for ``argtypes`` (``oom_guard``: see ``ad_driver``);
    a reverse/forward driver is remembered, so a function calling it from @njit code differentiates through it
    (:mod:`pyjlad.nested`)."""
    exported = export(func, argtypes)
    if sweep.interleaved:  # f compiled now for pyjlad's strided views: the caller's contiguous f may hold older values
        refuse_changed(as_numba_function(func), tuple(argtypes), exported.name, stands_for_contiguous=True)
    activities = resolve_activities(exported, sweep)  # first: an int named in wrt is the clearer error
    check_result(exported, sweep)
    noalias = not calls_custom_rules(exported.module.external_functions)  # see the driver
    abi = tangent_shadowed_abi(exported, sweep)  # constant arrays' shadows in parallel forward sweeps
    if sweep.width > 1:  # vector mode (pyjlad.engines.vector_driver)
        driver, nested = vector_sweep_driver(exported, sweep, activities, noalias), None
    elif sweep.kind == "hvp":
        driver, nested = hvp_driver(abi, sweep.wrt, noalias=noalias, salt=exported.module.text,
                                    over_reverse=calls_reverse_rules(exported.module.external_functions)), None
    else:
        driver = ad_driver(abi, sweep.mode, activities, noalias=noalias, salt=exported.module.text,
                           oom_guard=oom_guard, value=sweep.value)
        nested = remember(driver.symbol, NestedSweep(exported, sweep.mode, activities, noalias, sweep.value))
    toolchain = locate()
    # Keyed by the function as the user compiled it (free to get); Enzyme differentiates its
    # unvectorized copy (exported.enzyme_module), built only on a miss. LAPACK modules are
    # identified by their source (compiled only on a miss); rules by their IR.
    def load(source: Callable[[], PortableModule] | None) -> Any:  # the parallel copy (pyjlad.parallel_derivatives)
        key = cache.cache_key(sweep.kind, sweep.mode, PASSES, _ENZYME_INPUT, enzyme_input_key(), native.MODULE_FORM,
                              _special_source_hash(),
                              toolchain.identity, host_target_key(), *([cache_tag()] if source else []),
                              *(["aggregate-shadows/argmemonly-dropped"] if driver.aggregate_shadows else []),
                              exported.module.text, driver.text, *custom_rule_modules(exported),
                              *[f"{h}.{k}:{_lapack_source_hash()}" for h, k in exported.module.links],
                              *cache_key_parts(exported.module.external_functions))
        def module() -> str:  # the parallel copy's derivative calls need runtime activity (see its module)
            return with_runtime_activity(driver.module(source().text)) if source else driver.module(
                exported.enzyme_module.text)

        def derivative() -> bytes:
            report: dict[str, Any] = {}
            bitcode = native.drop_invariant_groups(run_enzyme(exported, module(), host=True, report=report))
            return mark_loose_types(bitcode) if report["loose_types"] else bitcode

        library = _load_library(key, derivative, driver.symbol, _derivative_name(exported, sweep))
        return library, built_with_loose_types(library)
    try:
        library, loose = with_parallel_fallback(exported, sweep, load)
    except (EnzymeError, ToolchainError):
        raise  # Enzyme's own failure (diagnostics kept), or the toolchain's, already in words
    except RuntimeError as exc:
        raise EnzymeError(f"the differentiated module of {exported.name} does not load: {exc}") from exc
    return Built(exported=exported, driver=driver, activities=activities, library=library, nested=nested,
                 loose_types=loose)


def _value_type(abi: FunctionABI) -> nbtypes.Type:
    return nbtypes.float32 if abi.result.dtype == "float32" else nbtypes.float64


def _make_caller(builder: Callable[[], Callable[[tuple[nbtypes.Type, ...]], Built] | None]) -> Callable[[int, int], Any]:
    """A factory of ``@njit`` functions ``caller(*args, *shadows, seed) -> (status, value, dret, *adjoints)``.

    ``factory(nargs, nshadows)`` makes the caller for that many arguments and shadows.
    ``builder`` is a weak reference to the build method: Numba keeps intrinsics for the
    life of the process, and a strong one would keep the user's function alive with them.
    """

    loaded: list[Any] = []

    @intrinsic
    def _invoke(typingctx, args_ty, shadows_ty, seed_ty):
        argtypes = tuple(args_ty)
        build_for = builder()
        if build_for is None:
            raise UnsupportedFunctionError("this compiled sweep was released")
        built = build_for(argtypes)
        exported, driver = built.exported, built.driver
        targets = exported.argtypes
        if len(argtypes) != len(targets):
            raise UnsupportedFunctionError(
                f"{exported.name} takes {len(targets)} argument(s), got {len(argtypes)}"
            )
        for index, (have, want) in enumerate(zip(argtypes, targets)):
            if have != want and typingctx.can_convert(have, want) is None:
                raise UnsupportedFunctionError(
                    f"argument {index} has type {have}, but {exported.name} takes {want}"
                )
        shadow_types = tuple(shadows_ty)
        if len(shadow_types) != len(driver.shadow_args):
            raise UnsupportedFunctionError(
                f"expected {len(driver.shadow_args)} shadow(s), got {len(shadow_types)}"
            )
        adjoint_types = [targets[i] for i in driver.active_scalars]
        value_type = _value_type(exported.abi)
        sig = nbtypes.Tuple([nbtypes.int32, value_type, value_type, *adjoint_types])(
            args_ty, shadows_ty, seed_ty
        )

        # Called through its address rather than linked in: linking would copy the
        # whole differentiated module into the caller, to be optimized and
        # compiled a second time (most of a warm process's first call).
        address = built.library.get_pointer_to_function(driver.symbol)
        loaded.append(built.library)  # the caller holds the address: keep the library alive with it

        def codegen(context, builder_, signature, llargs):
            values = cgutils.unpack_tuple(builder_, llargs[0], len(argtypes))
            values = [
                context.cast(builder_, v, have, want)
                for v, have, want in zip(values, argtypes, targets)
            ]
            flat = list(context.get_arg_packer(targets).as_arguments(builder_, values))
            shadows = []
            for value, shadow_ty, index in zip(
                cgutils.unpack_tuple(builder_, llargs[1], len(shadow_types)), shadow_types,
                driver.shadow_args,
            ):
                if isinstance(shadow_ty, nbtypes.Array):
                    array = context.make_array(shadow_ty)(context, builder_, value)
                    shadows.append(builder_.bitcast(array.data, cgutils.voidptr_t))
                else:
                    shadows.append(context.cast(builder_, value, shadow_ty, targets[index]))
            value_ll = context.get_value_type(value_type)
            value_slot = cgutils.alloca_once(builder_, value_ll)
            dret_slot = cgutils.alloca_once(builder_, value_ll)
            builder_.store(value_ll(0.0), value_slot)
            builder_.store(context.cast(builder_, llargs[2], seed_ty, value_type), dret_slot)
            excinfo = cgutils.alloca_once(builder_, cgutils.voidptr_t)
            builder_.store(cgutils.voidptr_t(None), excinfo)
            adjoint_slots = [
                cgutils.alloca_once(builder_, context.get_value_type(t)) for t in adjoint_types
            ]
            call_args = [value_slot, dret_slot, excinfo, *adjoint_slots, *flat, *shadows]
            fnty = ir.FunctionType(ir.IntType(32), [a.type for a in call_args])
            fn = builder_.inttoptr(ir.Constant(ir.IntType(64), address), fnty.as_pointer())
            status = builder_.call(fn, call_args)
            out = [status, builder_.load(value_slot), builder_.load(dret_slot),
                   *[builder_.load(s) for s in adjoint_slots]]
            return context.make_tuple(builder_, signature.return_type, out)

        return sig, codegen

    def flat_caller(nargs: int, nshadows: int) -> Any:
        # Positional parameters rather than tuples: Numba's dispatcher types
        # scalars and arrays in C, tuples in Python (about 0.5 us more per call).
        args = [f"a{i}" for i in range(nargs)]
        shadows = [f"s{i}" for i in range(nshadows)]
        namespace = {"_invoke": _invoke}
        exec(  # noqa: S102 - generated from integers only
            f"def caller({', '.join([*args, *shadows, 'seed'])}):\n"
            f"    return _invoke(({''.join(a + ', ' for a in args)}), ({''.join(s + ', ' for s in shadows)}), seed)\n",
            namespace,
        )
        return numba.njit(nogil=True)(namespace["caller"])

    return flat_caller


class Compiled:
    """One differentiated sweep of one function, compiled per argument types on demand.

    ``compiled(args, shadows, seed)`` returns ``(value, dret, adjoints)``: the
    primal result, the output tangent (forward) or the seed (reverse), and the
    adjoints of the ``active`` scalars. Shadows are updated in place. An
    exception raised by the function is re-raised as the function raises it.
    """

    def __init__(self, func: Any, sweep: Sweep) -> None:
        self.func = func
        self.sweep = sweep
        self._recursive = False  # set when a build of func recurses: then run on a deep stack
        self._pending = threading.local()
        self._make = _make_caller(weakref.WeakMethod(self._build))
        self._callers: dict[tuple[int, int], Any] = {}
        self._lock = threading.Lock()
        self._refused: EnzymeError | None = None  # a loose-typed derivative that failed its check
        self._kinds: set[tuple[type, ...]] = set()  # the Python types of the calls compiled for (__call__)
        follow(func, self)  # reset when Numba compiles func again with other frozen arrays (f.recompile())
        # A plain Python function: its njit compiled again at each call where its globals changed (then this resets).
        self._plain_njit = plain_function_dispatcher(func)

    def reset(self) -> None:
        """Forget every build: the next call of each argument types exports and differentiates ``func`` again
        (:mod:`pyjlad.frozen_globals`). Replaces the tables without taking the lock, which a build holds while
        Numba compiles. A new caller factory too: Numba remembers what an intrinsic typed, per argument types."""
        self._make = _make_caller(weakref.WeakMethod(self._build))
        self._callers = {}
        self._kinds = set()
        self._refused = None
        self._recursive = False
        forget(self)

    def _caller(self, nargs: int, nshadows: int) -> Any:
        with self._lock:
            caller = self._callers.get((nargs, nshadows))
            if caller is None:
                caller = self._callers[nargs, nshadows] = self._make(nargs, nshadows)
                # Compiled only by _compile_for: the Enzyme build runs before Numba compiles
                # the caller, not inside it under Numba's global compiler lock. (What
                # Dispatcher.disable_compile sets, which refuses a dispatcher with no signature yet.)
                caller._can_compile = False
            return caller

    def _build_once(self, argtypes: tuple[nbtypes.Type, ...]) -> Built:
        built = cached_for(self, ("built", argtypes), lambda: build(self.func, argtypes, self.sweep))
        if not self._recursive and has_recursion(built.exported.module.text):
            self._recursive = True
        return built

    def _build(self, argtypes: tuple[nbtypes.Type, ...]) -> Built:
        try:
            return self._build_once(argtypes)
        except PyjladError as exc:
            # Numba wraps exceptions raised while typing; keep ours to re-raise it clean.
            self._pending.error = exc
            raise

    def _compile_for(self, caller: Any, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: Any) -> Built:
        """Build the sweep for these argument types (export, Enzyme; no Numba lock held across
        ``opt``), then compile the caller for them (its typing finds the build done)."""
        argtypes = numba_argtypes(args)
        build_error = None
        try:
            built = self._build_once(argtypes)
        except PyjladError as exc:
            build_error = exc
        if build_error is not None:
            raise build_error.with_traceback(None)
        signature = (*argtypes, *map(numba.typeof, shadows), numba.typeof(seed))
        with self._lock:
            caller._can_compile = True
            try:
                caller.compile(signature)
            finally:
                caller._can_compile = False
        return built

    def _first_call(self, caller: Any, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: Any,
                    kinds: tuple[type, ...]) -> LooseCheck | None:
        """Compile the caller for these argument types (:meth:`_compile_for`) and note their Python types
        (``kinds``) as called; the loose-types check to run around this call, where it applies."""
        check = self._loose_check(self._compile_for(caller, args, shadows, seed))
        self._kinds.add(kinds)
        if check is not None and check.applies(args, shadows, seed):
            check.before(args, shadows)
            return check
        return None

    def _loose_check(self, built: Built) -> LooseCheck | None:
        """The check of ``built`` if it is a loose-typed derivative the check can judge (see loose_check)."""
        if not built.loose_types:
            return None
        if self.sweep.width > 1:
            # Not checked: the vector sweeps (pyjlad.vector_sweeps) take this for a sweep Enzyme cannot build
            # and go one direction at a time, whose sweeps are checked.
            name = wrapped_name(self.func) or describe_function(self.func)
            raise EnzymeError(f"the vector-mode derivative of {name} needed loose types; "
                              "it is not checked, so not used")
        primal = as_numba_function(self.func)
        if self._recursive:  # (its calls nest as deep as the derivative's: on a deep stack too)
            primal = functools.partial(on_deep_stack, primal)
        return loose_derivative_check(self.sweep, built.exported, built.driver, primal,
                                      name=wrapped_name(self.func))

    def __call__(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float = 1.0):
        if self._plain_njit is not None:
            recompile_if_changed(self._plain_njit)
        if REPLAYING[0]:  # inside a transform running a function that draws random numbers (pyjlad.random_draws)
            before_run()
        if self._refused is not None:
            raise self._refused.with_traceback(None)
        self._pending.error = None
        caller = self._callers.get((len(args), len(shadows))) or self._caller(len(args), len(shadows))
        call = caller if not self._recursive else functools.partial(on_deep_stack, caller)
        check = None
        kinds = (*map(type, args), *map(type, shadows))
        try:
            if kinds not in self._kinds:
                # Types not called with before: compiled for exactly these first. Numba's dispatcher, its
                # compiling disabled, would otherwise convert a scalar to a type compiled before (a float
                # to an int, a float64 to a float32) and call that derivative without a word.
                check = self._first_call(caller, args, shadows, seed, kinds)
                call = caller if not self._recursive else functools.partial(on_deep_stack, caller)
            try:
                status, value, dret, *adjoints = call(*args, *shadows, seed)
            except TypeError as exc:
                if "No matching definition" not in str(exc):
                    raise
                check = self._first_call(caller, args, shadows, seed, kinds)
                call = caller if not self._recursive else functools.partial(on_deep_stack, caller)
                status, value, dret, *adjoints = call(*args, *shadows, seed)
        except NotImplementedError:
            numba_argtypes(args)  # Numba's bare NotImplementedError for a dtype it lacks (float16)
            raise
        except nberrors.TypingError:
            error = getattr(self._pending, "error", None)
            if error is not None:
                self._pending.error = None
                raise error.with_traceback(None) from None
            numba_argtypes(args)  # raises a clear error for an argument Numba cannot type
            raise
        if status != 0:
            if status == OUT_OF_MEMORY:
                raise OutOfMemoryError(
                    f"out of memory while differentiating {describe_function(self.func)}: an allocation of "
                    f"{failed_bytes():,} bytes (Enzyme's tape, a shadow or a temporary) failed; use smaller "
                    "inputs or free memory (the memory the sweep had taken before the failure is not returned)"
                )
            reraise_from_function(self.func, args)
        if check is not None:  # the first call for these types of a loose-typed derivative (see loose_check)
            try:
                check.after(shadows, adjoints, seed, again=rerun(call, shadows, seed), dret=dret)
            except EnzymeError as exc:
                self._refused = exc
                raise
        return value, dret, adjoints


_stack_lock = threading.Lock()


def _deep_stack_bytes() -> int:
    return config.stack_bytes()


def on_deep_stack(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a new thread with a large stack (1 GiB of address space by default,
    committed only as used): a recursive function's sweep nests as deep as the function
    does, with bigger frames, and the main thread's 8 MiB would overflow into a segfault."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            outcome["error"] = exc

    with _stack_lock:
        previous = threading.stack_size(_deep_stack_bytes())
        try:
            thread = threading.Thread(target=run, name="pyjlad-deep-stack")
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class EmbeddedEngine:
    """Engine facade: compiles sweeps and gradients."""

    name = NAME

    def reverse(self, func: Any, wrt: tuple[int, ...], value: bool = True) -> ReverseGradient:
        """The reverse-mode value-and-gradient callable of ``func`` (``value=False``: see ``Sweep.value``)."""
        return ReverseGradient(func, wrt, compile=Compiled, value=value)

    def compile(self, func: Any, sweep: Sweep) -> Compiled:
        """A compiled-on-demand sweep of ``func`` (see :class:`Compiled`)."""
        return Compiled(func, sweep)

    def status(self) -> tuple[bool, str]:
        """Whether this engine can run here, with details or the fix."""
        try:
            toolchain = locate()
            toolchain.self_test()
        except PyjladError as exc:
            return False, str(exc)
        return True, (f"{toolchain.opt_version()}; opt {toolchain.opt} ({opt_route(toolchain.opt)}); "
                      f"plugin {toolchain.plugin}")
