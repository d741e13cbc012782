"""The embedded engine: Enzyme's LLVM plugin run by ``opt``, the result JIT-ed in-process.

Pipeline for one (function, argument types, ``wrt``):

1. :func:`pyjlad.export.export` gives the portable module and its ABI;
2. :func:`pyjlad.engines.driver.reverse_driver` appends the Enzyme driver;
3. ``opt-15 -load-pass-plugin=LLVMEnzyme-15.so -passes=enzyme,default<O2>``
   differentiates and optimizes it in a subprocess (output cached on disk);
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

import threading
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
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from .. import cache
from ..abi import ArrayArg, FunctionABI
from ..errors import EnzymeError, PyjladError, UnsupportedFunctionError
from ..export import ExportedFunction, describe_function, export, numba_argtypes
from ..portable import RUNTIME_CALL_DTOR
from ..toolchain import locate
from .driver import ReverseDriver, reverse_driver

__all__ = ["EmbeddedEngine", "ReverseGradient"]

NAME = "embedded"
#: opt pipeline: differentiate, then optimize the derivative.
PASSES = "enzyme,default<O2>"


@dataclass(frozen=True)
class BuiltGradient:
    """A compiled reverse-mode gradient for one set of argument types."""

    exported: ExportedFunction
    driver: ReverseDriver
    library: Any  # numba CodeLibrary holding the driver


def _load_into_numba(bitcode: bytes, name: str) -> Any:
    module = llvm.parse_bitcode(bitcode)
    module.verify()
    codegen = cpu_target.target_context.codegen()
    library = codegen.create_library(name)
    library.add_llvm_module(module)
    library.finalize()
    return library


def _check_wrt(exported: ExportedFunction, wrt: tuple[int, ...]) -> None:
    abi = exported.abi
    for index in wrt:
        if not 0 <= index < len(abi.args):
            raise UnsupportedFunctionError(
                f"wrt={index} is out of range: {exported.name} takes {len(abi.args)} argument(s)"
            )
        arg = abi.args[index]
        if not arg.differentiable:
            what = "an array of " + arg.dtype if isinstance(arg, ArrayArg) else arg.dtype
            raise UnsupportedFunctionError(
                f"argument {index} of {exported.name} is {what}, which is a constant "
                "(integers and bools have no derivative): pass it as a float (e.g. 2.0 or "
                "x.astype(np.float64)) or remove it from wrt"
            )
    if not exported.abi.result.dtype.startswith("float"):
        raise UnsupportedFunctionError(
            f"{exported.name} returns {exported.abi.result.dtype}; gradients need a real "
            "floating-point scalar result: return a float (e.g. float(...))"
        )


# External functions Enzyme differentiates by itself: libm, LLVM intrinsics and
# Numba's reference-counting/allocation runtime (inactive memory management).
_LIBM = set(
    """sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 exp10
    expm1 log log2 log10 log1p sqrt cbrt pow hypot fabs fmod floor ceil round trunc
    erf erfc tgamma lgamma fmax fmin copysign""".split()
)
_KNOWN_EXTERNALS = _LIBM | {name + "f" for name in _LIBM} | {"malloc", "free", RUNTIME_CALL_DTOR}


def _register_runtime_symbols() -> None:
    """Make the portable runtime's references to Numba's runtime resolvable in the JIT."""
    from numba.core.runtime import _nrt_python

    llvm.add_symbol(RUNTIME_CALL_DTOR, _nrt_python.c_helpers["MemInfo_call_dtor"])


_register_runtime_symbols()


def unknown_externals(exported: ExportedFunction) -> list[str]:
    """External functions of ``exported`` that Enzyme has no derivative rules for."""
    return [
        name for name in exported.module.external_functions
        if name not in _KNOWN_EXTERNALS and not name.startswith(("llvm.", "NRT_"))
    ]


def _run_enzyme(exported: ExportedFunction, module_text: str) -> bytes:
    try:
        return locate().run(module_text, PASSES, what=exported.name)
    except EnzymeError as exc:
        unknown = unknown_externals(exported)
        if unknown:
            hint = (
                f"\n{exported.name} calls functions Enzyme cannot see into: {', '.join(unknown)}. "
                "These are Numba runtime helpers (containers, linear algebra, printing...); "
                "rewrite that part with loops over arrays, or move it out of the differentiated function."
            )
            raise EnzymeError(str(exc) + hint, diagnostics=exc.diagnostics) from None
        raise


def build_reverse(func: Any, argtypes: Sequence[nbtypes.Type], wrt: tuple[int, ...]) -> BuiltGradient:
    """Export, differentiate and JIT the reverse-mode gradient of ``func``."""
    exported = export(func, argtypes)
    _check_wrt(exported, wrt)
    driver = reverse_driver(exported.abi, wrt)
    toolchain = locate()
    module_text = exported.module.text + "\n" + driver.text
    key = cache.cache_key("reverse", PASSES, toolchain.identity, module_text)
    bitcode = cache.get_or_build(key, lambda: _run_enzyme(exported, module_text))
    try:
        library = _load_into_numba(bitcode, driver.symbol)
    except RuntimeError as exc:
        raise EnzymeError(f"the differentiated module of {exported.name} does not load: {exc}") from exc
    return BuiltGradient(exported=exported, driver=driver, library=library)


def _result_numba_type(abi: FunctionABI) -> nbtypes.Type:
    return nbtypes.float32 if abi.result.dtype == "float32" else nbtypes.float64


def _make_caller(builder: Callable[[tuple[nbtypes.Type, ...]], BuiltGradient]) -> Any:
    """An ``@njit`` function ``caller(args, shadows) -> (status, value, *scalar_grads)``."""

    @intrinsic
    def _invoke(typingctx, args_ty, shadows_ty):
        argtypes = tuple(args_ty)
        built = builder(argtypes)
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
        scalar_types = [targets[i] for i in driver.scalar_wrt]
        res_type = _result_numba_type(exported.abi)
        sig = nbtypes.Tuple([nbtypes.int32, res_type, *scalar_types])(args_ty, shadows_ty)

        def codegen(context, builder_, signature, llargs):
            context.add_linking_libs([built.library])
            values = cgutils.unpack_tuple(builder_, llargs[0], len(argtypes))
            values = [
                context.cast(builder_, v, have, want)
                for v, have, want in zip(values, argtypes, targets)
            ]
            flat = list(context.get_arg_packer(targets).as_arguments(builder_, values))
            shadow_values = cgutils.unpack_tuple(builder_, llargs[1], len(driver.array_wrt))
            shadow_ptrs = []
            for value, shadow_ty in zip(shadow_values, tuple(shadows_ty)):
                array = context.make_array(shadow_ty)(context, builder_, value)
                shadow_ptrs.append(builder_.bitcast(array.data, cgutils.voidptr_t))
            res_ll = context.get_value_type(res_type)
            value_slot = cgutils.alloca_once(builder_, res_ll)
            excinfo = cgutils.alloca_once(builder_, cgutils.voidptr_t)
            builder_.store(cgutils.voidptr_t(None), excinfo)
            grad_slots = [
                cgutils.alloca_once(builder_, context.get_value_type(t)) for t in scalar_types
            ]
            arg_tys = [value_slot.type, excinfo.type, *[s.type for s in grad_slots],
                       *[v.type for v in flat], *[p.type for p in shadow_ptrs]]
            fnty = ir.FunctionType(ir.IntType(32), arg_tys)
            fn = cgutils.get_or_insert_function(builder_.module, fnty, driver.symbol)
            status = builder_.call(fn, [value_slot, excinfo, *grad_slots, *flat, *shadow_ptrs])
            out = [status, builder_.load(value_slot), *[builder_.load(s) for s in grad_slots]]
            return context.make_tuple(builder_, signature.return_type, out)

        return sig, codegen

    @numba.njit(nogil=True)
    def caller(args, shadows):
        return _invoke(args, shadows)

    return caller


def _shadow_like(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """A zeroed array addressable with ``x``'s strides; ``True`` if it is a strided view."""
    if x.flags.c_contiguous or x.flags.f_contiguous:
        return np.zeros_like(x, order="K"), False
    itemsize = x.itemsize
    low = sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) + itemsize
    buffer = np.zeros((high - low + itemsize - 1) // itemsize, dtype=x.dtype)
    view = np.ndarray(x.shape, dtype=x.dtype, buffer=buffer, offset=-low, strides=x.strides)
    return view, True


class ReverseGradient:
    """Reverse-mode ``value_and_gradient`` of one function for fixed ``wrt``.

    Calling it returns ``(value, grads)`` with one gradient per ``wrt`` entry.
    Compiled gradients are kept per argument types (by Numba's dispatcher).
    """

    def __init__(self, func: Any, wrt: tuple[int, ...]) -> None:
        self.func = func
        self.wrt = tuple(sorted(set(wrt)))
        self._pending = threading.local()
        self._caller = _make_caller(self._build)

    def _build(self, argtypes: tuple[nbtypes.Type, ...]) -> BuiltGradient:
        try:
            return build_reverse(self.func, argtypes, self.wrt)
        except PyjladError as exc:
            # Numba wraps exceptions raised while typing; keep ours to re-raise it clean.
            self._pending.error = exc
            raise

    def __call__(self, *args: Any) -> tuple[Any, tuple[Any, ...]]:
        wrt = self.wrt
        nargs = len(args)
        for index in wrt:
            if not 0 <= index < nargs:
                raise UnsupportedFunctionError(
                    f"wrt={index} is out of range for a call with {nargs} argument(s)"
                )
        shadows = []
        strided = []
        for index in wrt:
            arg = args[index]
            if isinstance(arg, np.ndarray):
                shadow, is_view = _shadow_like(arg)
                shadows.append(shadow)
                strided.append(is_view)
        self._pending.error = None
        try:
            status, value, *scalar_grads = self._caller(args, tuple(shadows))
        except nberrors.TypingError:
            error = getattr(self._pending, "error", None)
            if error is not None:
                self._pending.error = None
                raise error.with_traceback(None) from None
            numba_argtypes(args)  # raises a clear error for an argument Numba cannot type
            raise
        if status != 0:
            self._reraise(args)
        grads: list[Any] = []
        scalar_iter = iter(scalar_grads)
        shadow_iter = iter(zip(shadows, strided))
        for index in wrt:
            if isinstance(args[index], np.ndarray):
                shadow, is_view = next(shadow_iter)
                grads.append(np.array(shadow) if is_view else shadow)
            else:
                grads.append(float(next(scalar_iter)))
        return float(value), tuple(grads)

    def _reraise(self, args: tuple[Any, ...]) -> None:
        """Run the function itself so that its exception surfaces with its message."""
        target = self.func
        from ..export import as_numba_function

        numba_fn = as_numba_function(target)
        runner = getattr(numba_fn, "_pyfunc", None)
        runner = as_numba_function(runner) if runner is not None else numba_fn
        runner(*args)
        raise RuntimeError(
            f"{describe_function(target)} reported an error while differentiated, "
            "but not when called directly"
        )


class EmbeddedEngine:
    """Engine facade: builds :class:`ReverseGradient` objects."""

    name = NAME

    def reverse(self, func: Any, wrt: tuple[int, ...]) -> ReverseGradient:
        """The reverse-mode value-and-gradient callable of ``func``."""
        return ReverseGradient(func, wrt)

    def status(self) -> tuple[bool, str]:
        """Whether this engine can run here, with details or the fix."""
        try:
            toolchain = locate()
            toolchain.self_test()
        except PyjladError as exc:
            return False, str(exc)
        return True, f"{toolchain.opt_version()}; opt {toolchain.opt}; plugin {toolchain.plugin}"
