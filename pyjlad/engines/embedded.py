"""The embedded engine: Enzyme's LLVM plugin run by ``opt``, the result JIT-ed in-process.

Pipeline for one (function, argument types, ``wrt``):

1. :func:`pyjlad.export.export` gives the portable module and its ABI;
2. :mod:`pyjlad.engines.driver` appends the Enzyme driver for the sweep;
3. ``opt-15 -load-pass-plugin=LLVMEnzyme-15.so -passes=...,enzyme,default<O2>``
   (:data:`PASSES`) differentiates and optimizes it in a subprocess (output
   cached on disk);
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
import json
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import types as nbtypes
from numba.core import cgutils
from numba.core import errors as nberrors
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from .. import cache, config
from ..abi import ArrayArg, FunctionABI
from ..block_order import dominance_ordered
from ..enzyme_copy import NO_SPECULATION_ARGS
from ..errors import (
    ArgumentError,
    DifferentiatedFunctionError,
    EnzymeError,
    OutOfMemoryError,
    PyjladError,
    ToolchainError,
    UnsupportedFunctionError,
)
from ..export import ExportedFunction, as_numba_function, describe_function, export, numba_argtypes
from ..ir.pipeline import dump
from ..lapack import LAPACK_HELPERS
from ..memo import cached_for
from ..objcheck import InvalidObject, check_elf, check_llvm_module
from ..portable import LIBM_FUNCTIONS, RUNTIME_CALL_DTOR, has_recursion, is_inactive_helper
from ..refusals import HELPER_CONSTRUCTS, explain
from ..rules import is_rule_symbol, rule_modules
from ..special import HANDLED as SPECIAL_FUNCTIONS
from ..special import prepare as prepare_special
from ..toolchain import Toolchain, locate
from . import native
from .blas import BLAS_NAME, resolve_blas_symbols
from .driver import ACTIVITIES, OUT_OF_MEMORY, RELEASE, ZEROED, Driver, ad_driver, hvp_driver
from .pool import capacity, failed_bytes, resolve_pool_symbols, use_pool

__all__ = [
    "EmbeddedEngine", "ReverseGradient", "Compiled", "Sweep", "shadow_like", "resolve_activities",
    "reraise_from_function", "compact_overlapping", "overlaps_itself",
]

NAME = "embedded"
#: opt pipeline: expand masked vector memory intrinsics (from Numba's vectorizer;
#: Enzyme has no rules for them) into scalar code; read the custom derivative
#: registrations (``preserve-nvvm`` turns ``__enzyme_register_*`` globals into the
#: metadata the ``enzyme`` pass looks for; see :mod:`pyjlad.rules`), differentiate,
#: optimize the result.
PASSES = "function(scalarize-masked-mem-intrin),preserve-nvvm,enzyme,preserve-nvvm-end,default<O2>"
#: The last retry after a type-analysis failure: vector loads and stores split into
#: scalar ones first (see :func:`_run_enzyme`).
SCALARIZED_PASSES = ("function(scalarize-masked-mem-intrin,scalarizer),preserve-nvvm,enzyme,preserve-nvvm-end,"
                     "default<O2>")


# External functions Enzyme differentiates by itself: libm, LLVM intrinsics and
# Numba's reference-counting/allocation runtime (inactive memory management).
# Numba's special-function helpers get their derivatives from pyjlad.special.
_KNOWN_EXTERNALS = (LIBM_FUNCTIONS | {name + "f" for name in LIBM_FUNCTIONS} | SPECIAL_FUNCTIONS
                    | {"malloc", "free", RUNTIME_CALL_DTOR})


def _register_runtime_symbols() -> None:
    """Make the portable runtime's references to Numba's runtime resolvable in the JIT."""
    from numba.core.runtime import _nrt_python

    llvm.add_symbol(RUNTIME_CALL_DTOR, _nrt_python.c_helpers["MemInfo_call_dtor"])
    libc = ctypes.CDLL(None)
    for symbol, function in ((ZEROED, libc.calloc), (RELEASE, libc.free)):
        llvm.add_symbol(symbol, ctypes.cast(function, ctypes.c_void_p).value)


_register_runtime_symbols()


def unknown_externals(exported: ExportedFunction) -> list[str]:
    """External functions of ``exported`` that Enzyme has no derivative rules for."""
    return [
        name for name in exported.module.external_functions
        if name not in _KNOWN_EXTERNALS and not is_inactive_helper(name) and not BLAS_NAME.match(name)
        and name.split(".")[0] not in LAPACK_HELPERS and not is_rule_symbol(name)
        # Numba runtime functions are handled by pyjlad.portable, except those a refusal names.
        and (not name.startswith(("llvm.", "NRT_")) or name in HELPER_CONSTRUCTS)
    ]


#: What Enzyme is given for a function (part of the cache key): see ExportedFunction.enzyme_module.
#: 2: IR before code generation; 3: @njit callees and Numba's internal helpers copied too, no speculation.
#: 4: no loop unrolling or interleaving.
_ENZYME_INPUT = "unvectorized-copy/4 " + " ".join(NO_SPECULATION_ARGS)

_TYPE_ANALYSIS_FAILURES = ("Cannot deduce type", "cannot handle unknown binary operator")
#: Enzyme's failures on vector code (the loops of Numba's library functions, e.g. ``np.where``'s, are
#: vectorized when Numba first compiles them): forward mode puts the tangent phi of a ``<4 x i1>`` phi
#: after other instructions (a module that fails verification), reverse mode finds no shadow for a
#: vector of pointers (``invertPointerM``). Both differentiate once the vectors are split into scalars.
_VECTOR_CODE_FAILURES = ("PHI nodes not grouped at top of basic block", "cannot find deal with ptr that isnt arg")
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

    return cache.cache_key((Path(__file__).resolve().parent.parent / "lapack.py").read_text())


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


def _differentiate(toolchain: Toolchain, module: str | bytes, passes: str, what: str,
                   options: tuple[str, ...] = ()) -> bytes:
    """Run Enzyme over ``module``; without its min-cut cache planner where that planner fails.

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
    try:
        return toolchain.run(module, passes, what=what, options=options)
    except EnzymeError as exc:
        if _MIN_CUT_FAILURE not in exc.diagnostics:
            raise
    return toolchain.run(module, passes, what=what, options=(*options, _NO_MIN_CUT))


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


#: Enzyme v0.0.289's forward mode reached a value's use before its definition (see :mod:`pyjlad.block_order`).
_BLOCK_ORDER_FAILURE = "forwardModeInvertedPointerFallback"


def _enzyme_input(toolchain: Toolchain, exported: ExportedFunction, module_text: str,
                  dominance: bool = False) -> str | bytes:
    """The module Enzyme gets: ``module_text`` linked with the modules it needs, blocks in dominance order
    if ``dominance``."""
    # Derivatives of the special functions Enzyme cannot differentiate (lgamma, gamma, ...).
    texts = [prepare_special(m) for m in (module_text, *linked_modules(exported))]
    if dominance:
        texts = [dominance_ordered(t) for t in texts]
    return toolchain.link(texts, what=exported.name) if len(texts) > 1 else texts[0]


def _run_enzyme(exported: ExportedFunction, module_text: str) -> bytes:
    """Enzyme's output for ``module_text``, retried as :func:`_next_attempt` says and, once, with the blocks
    in dominance order where Enzyme's forward mode met a use before its definition."""
    toolchain = locate()
    label = exported.abi.entry
    dump(label, "driver", module_text)
    module, reordered = _enzyme_input(toolchain, exported, module_text), False
    dump(label, "enzyme.input", module)
    # Branches stay branches in Enzyme's own pre-optimization (see pyjlad.enzyme_copy).
    passes, options = PASSES, NO_SPECULATION_ARGS
    while True:
        try:
            derivative = _differentiate(toolchain, module, passes, exported.name, options)
            dump(label, "enzyme.output", derivative)
            return derivative
        except EnzymeError as exc:
            if _BLOCK_ORDER_FAILURE in exc.diagnostics and not reordered:
                module, reordered = _enzyme_input(toolchain, exported, module_text, dominance=True), True
                dump(label, "enzyme.input-blocks-in-dominance-order", module)
                continue
            attempt = _next_attempt(passes, options, exc.diagnostics)
            if attempt is None:
                # In the user's terms: the construct, where it is used, what to write instead.
                raise explain(exported, exc, unknown_externals(exported)) from None
            passes, options = attempt


@dataclass(frozen=True)
class Sweep:
    """What to differentiate: one reverse/forward sweep, or a Hessian-vector product.

    Attributes
    ----------
    kind : str
        ``"ad"`` (one sweep of ``mode``) or ``"hvp"`` (reverse over forward; forward over reverse through custom rules).
    mode : str
        ``"reverse"`` or ``"forward"`` (``kind="ad"``).
    activities : tuple of str
        Per argument (missing trailing entries are ``"const"``): ``"const"``,
        ``"diff"`` (an adjoint for a scalar in reverse mode, a shadow otherwise)
        or ``"diff_noneed"`` (as ``"diff"``, primal not needed); the concrete
        Enzyme activities ``"active"``, ``"dup"``, ``"dupnoneed"`` also work.
    wrt : int
        The argument of a Hessian-vector product (``kind="hvp"``).
    scalar_result : bool
        Whether the function must return a float (gradients): a function that
        returns nothing is refused instead of giving zeros.
    """

    kind: str = "ad"
    mode: str = "reverse"
    activities: tuple[str, ...] = ()
    wrt: int = -1
    scalar_result: bool = False


@dataclass(frozen=True)
class Built:
    """A compiled sweep for one set of argument types."""

    exported: ExportedFunction
    driver: Driver
    activities: tuple[str, ...]
    library: Any  # numba CodeLibrary holding the driver


def _prepare_module(bitcode: bytes, name: str) -> tuple[bytes, list[str]]:
    """``bitcode`` as the JIT gets it, with its declarations: only ``name`` visible, allocations pooled.

    Parsed in an LLVM context of its own (no lock shared with Numba's compiler needed).
    """
    module = llvm.parse_bitcode(bitcode, context=llvm.create_context())
    module.verify()
    # Only the driver is looked up from outside: every other definition (the exported entry
    # `pyjlad_<name>`, Numba's functions) becomes internal, so two libraries that define the
    # same name for different code (two functions called f) never resolve to each other's.
    for function in module.functions:
        if not function.is_declaration and function.name != name:
            function.linkage = "internal"
    for variable in module.global_variables:
        if not variable.is_declaration and not variable.name.startswith("enzyme_"):
            variable.linkage = "internal"
    use_pool(module)
    declared = [f.name for f in module.functions if f.is_declaration]
    return module.as_bitcode(), declared


def _compile_object(compiler: native.NativeCompiler, bitcode: bytes, name: str, what: str) -> bytes:
    """The object entry (see :func:`_pack_object`) of ``bitcode``, compiled by ``compiler``'s child process.

    Raises
    ------
    EnzymeError
        If LLVM crashes or fails on the module (in the child: this process lives on).
    """
    prepared, declared = _prepare_module(bitcode, name)
    obj, shared = compiler.compile(prepared, name, what)
    return _pack_object(name, declared, obj, shared)


_OBJECT_FORMAT = "pyjlad-object/5"  # 5: out-of-memory exit; every definition but the driver internal


def _object_key(key: str) -> str:
    """Cache key of the machine code compiled from entry ``key`` on this CPU with this Numba."""
    return cache.cache_key(_OBJECT_FORMAT, key, f"pool={capacity() > 0}", numba.__version__,
                           llvm.llvm_version_info.__repr__(), llvm.get_host_cpu_name(),
                           llvm.get_host_cpu_features().flatten())


def _pack_object(name: str, declared: list[str], obj: bytes, shared: bytes) -> bytes:
    """An object entry: the library ``name``'s ELF object and linking bitcode (what Numba's
    ``serialize_using_object_code`` gives) with the module's declarations."""
    header = json.dumps({"format": _OBJECT_FORMAT, "name": name, "kind": "object", "declared": declared,
                         "sizes": [len(obj), len(shared)]}).encode()
    return len(header).to_bytes(8, "little") + header + obj + shared


def _split_object(payload: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    """The header, ELF object and linking bitcode of an object entry (raises InvalidObject)."""
    size = int.from_bytes(payload[:8], "little")
    try:
        header = json.loads(payload[8:8 + size])
        n_obj, n_shared = header["sizes"]
        name, kind, declared = header["name"], header["kind"], header["declared"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidObject(f"unreadable object-entry header ({exc})") from None
    if header.get("format") != _OBJECT_FORMAT:
        raise InvalidObject(f"object format {header.get('format')!r}, expected {_OBJECT_FORMAT!r}")
    if not (isinstance(name, str) and kind == "object" and isinstance(declared, list)
            and all(isinstance(d, str) for d in declared)):
        raise InvalidObject("malformed object-entry header")
    body = payload[8 + size:]
    if not (isinstance(n_obj, int) and isinstance(n_shared, int) and n_obj >= 0 and n_shared >= 0
            and len(body) == n_obj + n_shared):
        raise InvalidObject(f"object entry of {len(body)} bytes, its header says {n_obj} + {n_shared}")
    return header, body[:n_obj], body[n_obj:]


def _check_object(payload: bytes) -> None:
    """Check an object entry before it is stored or loaded: an ELF object for this machine, and bitcode."""
    _, obj, shared = _split_object(payload)
    check_elf(obj)
    if shared[:4] != b"BC\xc0\xde" or len(shared) % 4:
        raise InvalidObject(f"the linking module ({len(shared)} bytes) is not LLVM bitcode")


def _unpack_object(payload: bytes) -> Any:
    header, obj, shared = _split_object(payload)
    resolve_blas_symbols(header["declared"])
    resolve_pool_symbols(header["declared"])
    codegen = cpu_target.target_context.codegen()
    return codegen.unserialize_library((header["name"], header["kind"], (obj, shared)))


def _load_library(key: str, build_bitcode: Callable[[], bytes], name: str, what: str) -> Any:
    """The JIT-compiled library of cache entry ``key`` (``what``: the derivative, in the user's terms).

    A second process loads the machine code compiled the first time (no
    Enzyme run, no LLVM optimization or code generation); otherwise the bitcode
    (cached, or built by ``build_bitcode``) is optimized and compiled by Numba's
    pipeline in a child process (:mod:`pyjlad.engines.native`: an LLVM crash
    cannot kill this one), its machine code loaded here and stored for the next
    process.
    """
    object_key = _object_key(key)
    payload = cache.get(object_key, check=_check_object)  # checked: a damaged ELF object could crash the JIT
    if payload is not None:
        try:
            with global_compiler_lock:  # Numba's code generator is not thread-safe
                return _unpack_object(payload)
        except (ValueError, KeyError, RuntimeError):
            pass  # an unreadable entry: rebuilt below, and replaced
    with native.start() as compiler:  # started first: the interpreter starts while Enzyme runs
        try:
            # Enzyme runs here, with no Numba lock held; its output is parsed before it is stored or used.
            bitcode = cache.get_or_build(key, build_bitcode, check=check_llvm_module)
        except InvalidObject as exc:
            raise EnzymeError(
                f"opt reported success twice but its output for {name} is not a valid LLVM module ({exc}); "
                f"the toolchain is broken: reinstall it with python -m pyjlad toolchain install --force",
                diagnostics=str(exc),
            ) from None
        payload = _compile_object(compiler, bitcode, name, what)
    try:
        _check_object(payload)
    except InvalidObject as exc:
        raise EnzymeError(f"the machine code compiled for {what} is not a valid object ({exc})",
                          diagnostics=str(exc)) from None
    with global_compiler_lock:
        library = _unpack_object(payload)
    try:
        cache.put(object_key, payload, check=_check_object)
    except (OSError, RuntimeError, InvalidObject):
        pass  # the machine code is an optimization (a lock held too long, say); the bitcode entry is enough
    return library


def _refuse_constant(exported: ExportedFunction, index: int) -> None:
    arg = exported.abi.args[index]
    what = "an array of " + arg.dtype if isinstance(arg, ArrayArg) else arg.dtype
    raise UnsupportedFunctionError(
        f"argument {index} of {exported.name} is {what}, which is a constant "
        "(integers and bools have no derivative): pass it as a float (e.g. 2.0 or "
        "x.astype(np.float64)) or do not differentiate with respect to it"
    )


def resolve_activities(exported: ExportedFunction, sweep: Sweep) -> tuple[str, ...]:
    """Concrete Enzyme activities for ``sweep`` on ``exported``'s argument types."""
    abi = exported.abi
    nargs = len(abi.args)
    requested = sweep.activities if sweep.kind == "ad" else ()
    if len(requested) > nargs:
        raise UnsupportedFunctionError(
            f"{exported.name} takes {nargs} argument(s) but {len(requested)} activities were given"
        )
    if sweep.kind == "hvp" and not 0 <= sweep.wrt < nargs:
        raise UnsupportedFunctionError(
            f"wrt={sweep.wrt} is out of range: {exported.name} takes {nargs} argument(s)"
        )
    out = []
    for index, arg in enumerate(abi.args):
        act = requested[index] if index < len(requested) else "const"
        if sweep.kind == "hvp" and index == sweep.wrt:
            act = "diff"
        if act == "const":
            out.append("const")
            continue
        if not arg.differentiable:
            _refuse_constant(exported, index)
        is_array = isinstance(arg, ArrayArg)
        if act in ("diff", "diff_noneed"):
            if not is_array and sweep.mode == "reverse":
                act = "active"
            else:
                act = "dup" if act == "diff" else "dupnoneed"
        if act == "active" and (is_array or sweep.mode == "forward"):
            raise UnsupportedFunctionError(
                f"argument {index} of {exported.name}: Active applies to float scalars in reverse "
                "mode; use Duplicated for arrays and for forward-mode tangents"
            )
        if act in ("dup", "dupnoneed") and not is_array and sweep.mode == "reverse":
            raise UnsupportedFunctionError(
                f"argument {index} of {exported.name} is a float scalar, passed by value: in "
                "reverse mode mark it Active (its adjoint is returned), not Duplicated"
            )
        if act not in ACTIVITIES:
            raise ArgumentError(f"unknown activity {act!r}")
        out.append(act)
    return tuple(out)


def _check_result(exported: ExportedFunction, sweep: Sweep) -> None:
    dtype = exported.abi.result.dtype
    if dtype.startswith("float") or (dtype == "none" and sweep.kind == "ad" and not sweep.scalar_result):
        return
    if dtype == "none":
        what = "a Hessian" if sweep.kind == "hvp" else "a gradient"
        raise UnsupportedFunctionError(
            f"{exported.name} returns nothing (None); {what} needs a real scalar result: return the "
            "value to differentiate, or use pyjlad.vjp/jvp/jacobian for a function that writes its "
            "result into an array argument"
        )
    raise UnsupportedFunctionError(
        f"{exported.name} returns {dtype}; gradients need a real "
        "floating-point scalar result: return a float (e.g. float(...))"
    )


def _derivative_name(exported: ExportedFunction, sweep: Sweep) -> str:
    """The derivative ``sweep`` builds, in the user's terms (for messages)."""
    if sweep.kind == "hvp":
        return f"the Hessian-vector product of {exported.name}"
    return f"the {sweep.mode}-mode derivative of {exported.name}"


def build(func: Any, argtypes: Sequence[nbtypes.Type], sweep: Sweep) -> Built:
    """Export, differentiate and JIT ``sweep`` of ``func`` for ``argtypes``."""
    exported = export(func, argtypes)
    activities = resolve_activities(exported, sweep)  # first: an int named in wrt is the clearer error
    _check_result(exported, sweep)
    noalias = not any(is_rule_symbol(name) for name in exported.module.external_functions)  # see the driver
    if sweep.kind == "hvp":
        driver = hvp_driver(exported.abi, sweep.wrt, noalias=noalias, salt=exported.module.text)
    else:
        driver = ad_driver(exported.abi, sweep.mode, activities, noalias=noalias, salt=exported.module.text)
    toolchain = locate()
    # Keyed by the function as the user compiled it (free to get); Enzyme differentiates its
    # unvectorized copy (exported.enzyme_module), built only on a miss. LAPACK modules are
    # identified by their source (compiled only on a miss); rules by their IR.
    key = cache.cache_key(sweep.kind, sweep.mode, PASSES, _ENZYME_INPUT, native.MODULE_FORM, _special_source_hash(),
                          toolchain.identity,
                          exported.module.text, driver.text, *custom_rule_modules(exported),
                          *[f"{h}.{k}:{_lapack_source_hash()}" for h, k in exported.module.links])
    try:
        library = _load_library(
            key, lambda: native.drop_invariant_groups(_run_enzyme(exported, driver.module(exported.enzyme_module.text))),
            driver.symbol,
            _derivative_name(exported, sweep))
    except (EnzymeError, ToolchainError):
        raise  # Enzyme's own failure (diagnostics kept), or the toolchain's, already in words
    except RuntimeError as exc:
        raise EnzymeError(f"the differentiated module of {exported.name} does not load: {exc}") from exc
    return Built(exported=exported, driver=driver, activities=activities, library=library)


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


def overlaps_itself(x: np.ndarray) -> bool:
    """Whether two elements of ``x`` share memory (``np.broadcast_to``'s zero strides, ``as_strided``).

    Examples
    --------
    >>> import numpy as np
    >>> overlaps_itself(np.broadcast_to(np.ones(1), (3,))), overlaps_itself(np.ones((2, 3))[:, ::2])
    (True, False)
    """
    extent = x.itemsize  # bytes covered by the dimensions seen so far (a sufficient test)
    for stride, n in sorted((abs(s), n) for n, s in zip(x.shape, x.strides) if n > 1):
        if stride < extent:
            return True
        extent += stride * (n - 1)
    return False


def compact_overlapping(args: tuple[Any, ...], indices: Sequence[int]) -> tuple[Any, ...]:
    """``args`` with each array at ``indices`` whose elements share memory replaced by a C-ordered copy.

    Each element of such an array is a separate input to differentiate (as JAX sees a
    broadcast array), but Enzyme would accumulate all their adjoints into one shared
    shadow element. Such arrays are read-only views, so the function cannot have
    meant to write them.
    """
    out = list(args)
    for index in indices:
        x = out[index]
        if isinstance(x, np.ndarray) and overlaps_itself(x):
            out[index] = np.ascontiguousarray(x)
    return tuple(out)


def shadow_like(x: np.ndarray, fill: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """A zeroed (or ``fill``-ed) array addressable with ``x``'s strides.

    Enzyme indexes shadow memory exactly as the primal, so a shadow of a
    strided view is itself a view with the same strides over a fresh buffer.
    Returns the shadow and whether it is such a view.
    """
    if x.flags.c_contiguous:
        # np.zeros, not np.zeros_like: the latter costs ~2 us more per call (Python-level
        # empty_like + copyto), a quarter of a small gradient's time.
        shadow = np.zeros(x.shape, x.dtype)
        is_view = False
    elif x.flags.f_contiguous:
        shadow = np.zeros(x.shape, x.dtype, order="F")
        is_view = False
    else:
        itemsize = x.itemsize
        low = sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides))
        high = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) + itemsize
        buffer = np.zeros((high - low + itemsize - 1) // itemsize, dtype=x.dtype)
        shadow = np.ndarray(x.shape, dtype=x.dtype, buffer=buffer, offset=-low, strides=x.strides)
        is_view = True
    if fill is not None:
        shadow[...] = fill
    return shadow, is_view


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

    def _compile_for(self, caller: Any, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: Any) -> None:
        """Build the sweep for these argument types (export, Enzyme; no Numba lock held across
        ``opt``), then compile the caller for them (its typing finds the build done)."""
        argtypes = numba_argtypes(args)
        build_error = None
        try:
            self._build_once(argtypes)
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

    def __call__(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float = 1.0):
        self._pending.error = None
        caller = self._callers.get((len(args), len(shadows))) or self._caller(len(args), len(shadows))
        call = caller if not self._recursive else functools.partial(on_deep_stack, caller)
        try:
            try:
                status, value, dret, *adjoints = call(*args, *shadows, seed)
            except TypeError as exc:
                if "No matching definition" not in str(exc):
                    raise
                self._compile_for(caller, args, shadows, seed)
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


def reraise_from_function(func: Any, args: tuple[Any, ...]) -> None:
    """Run ``func`` itself so that the exception it raised while differentiated surfaces
    with its own type and message (Numba reports only a status to the caller)."""
    numba_fn = as_numba_function(func)
    runner = getattr(numba_fn, "_pyfunc", None)
    runner = as_numba_function(runner) if runner is not None else numba_fn
    # On copies: the function's own writes to its array arguments happened once already.
    runner(*(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args))
    raise DifferentiatedFunctionError(
        f"{describe_function(func)} reported an error while differentiated, but not when called directly"
    )


class ReverseGradient:
    """Reverse-mode ``value_and_gradient`` of one scalar function for fixed ``wrt``.

    Calling it returns ``(value, grads)`` with one gradient per ``wrt`` entry
    (in increasing argument order).
    """

    def __init__(self, func: Any, wrt: tuple[int, ...], compile: Callable[[Any, Sweep], Any] | None = None) -> None:
        self.wrt = tuple(sorted(set(wrt)))
        activities = ["const"] * (max(self.wrt) + 1)
        for index in self.wrt:
            activities[index] = "diff"
        self._compiled = (compile or Compiled)(func, Sweep("ad", "reverse", tuple(activities), scalar_result=True))

    def __call__(self, *args: Any) -> tuple[Any, tuple[Any, ...]]:
        wrt = self.wrt
        nargs = len(args)
        if wrt[-1] >= nargs:
            raise UnsupportedFunctionError(
                f"wrt={wrt[-1]} is out of range for a call with {nargs} argument(s)"
            )
        if not any(isinstance(args[index], np.ndarray) for index in wrt):
            # Scalars only (the per-call fast path): adjoints come back in wrt order.
            value, _, adjoints = self._compiled(args, (), 1.0)
            return float(value), tuple(map(float, adjoints))
        args = compact_overlapping(args, wrt)
        shadows = []
        views = []
        for index in wrt:
            arg = args[index]
            if isinstance(arg, np.ndarray):
                shadow, is_view = shadow_like(arg)
                shadows.append(shadow)
                views.append(is_view)
        value, _, adjoints = self._compiled(args, tuple(shadows), 1.0)
        grads: list[Any] = []
        adjoint_iter = iter(adjoints)
        shadow_iter = iter(zip(shadows, views))
        for index in wrt:
            if isinstance(args[index], np.ndarray):
                shadow, is_view = next(shadow_iter)
                grads.append(np.array(shadow) if is_view else shadow)
            else:
                grads.append(float(next(adjoint_iter)))
        return float(value), tuple(grads)


class EmbeddedEngine:
    """Engine facade: compiles sweeps and gradients."""

    name = NAME

    def reverse(self, func: Any, wrt: tuple[int, ...]) -> ReverseGradient:
        """The reverse-mode value-and-gradient callable of ``func``."""
        return ReverseGradient(func, wrt)

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
        return True, f"{toolchain.opt_version()}; opt {toolchain.opt}; plugin {toolchain.plugin}"
