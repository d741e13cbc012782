"""Export a Numba function as a portable LLVM module plus its ABI description.

Accepts a ``@njit`` dispatcher (compiled for the requested argument types), a
``@cfunc`` object (its inner ABI function, never the ``cfunc.`` wrapper: see
Enzyme.jl issue #2505) or a plain Python function (``njit``-compiled on first
use, once per function).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import types as pytypes
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
from numba import types as nbtypes
from numba.core import errors as nberrors
from numba.core.ccallback import CFunc
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from .abi import ArgABI, ArrayArg, FunctionABI, ScalarArg
from .aliasing import mixed_pointer_arguments
from .enzyme_copy import branch_preserving_compile, unvectorized_copy
from .errors import ExportError, UnsupportedFunctionError
from .ir import Module, Parameter
from .ir import parse as parse_module
from .ir.analysis import numba_entry
from .memo import cached_for
from .portable import PortableModule
from .portable_pipeline import make_portable

__all__ = [
    "ExportedFunction", "export", "as_numba_function", "numba_argtypes", "describe_function", "result_type",
]

_LLVM_INT = {8: "i8", 16: "i16", 32: "i32", 64: "i64"}


@dataclass(frozen=True)
class ExportedFunction:
    """A Numba function exported for differentiation.

    Attributes
    ----------
    module : PortableModule
        The portable LLVM module holding the entry function.
    abi : FunctionABI
        How to call the entry.
    argtypes : tuple of numba types
        The Numba argument types the entry was compiled for.
    restype : numba type
        The Numba result type.
    run : callable
        Calls the compiled function (used to re-raise its exceptions in Python).
    name : str
        The function's Python name.
    make_enzyme_module : callable, optional
        Builds :attr:`enzyme_module`.
    """

    module: PortableModule
    abi: FunctionABI
    argtypes: tuple[nbtypes.Type, ...]
    restype: nbtypes.Type
    run: Callable[..., Any]
    name: str
    make_enzyme_module: Callable[[], PortableModule] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def enzyme_module(self) -> PortableModule:
        """The module Enzyme differentiates: :attr:`module` compiled again without Numba's vectorizers,
        as LLVM's optimizer left it (before code generation rewrote it; see ``_ir_before_codegen``).

        Built on first use (a second Numba compile of the function), so a
        process that finds the gradient in the disk cache, keyed by
        :attr:`module`, never builds it.
        """
        return self.make_enzyme_module() if self.make_enzyme_module is not None else self.module


def describe_function(func: Any) -> str:
    """A short human-readable name for ``func`` for error messages."""
    inner = getattr(func, "py_func", None) or getattr(func, "_pyfunc", None) or func
    return getattr(inner, "__qualname__", None) or repr(func)


def as_numba_function(func: Any) -> Dispatcher | CFunc:
    """Return the Numba object to export for ``func``.

    A ``@njit`` dispatcher or ``@cfunc`` is returned as is; a plain Python
    function is wrapped with ``numba.njit`` once (the result is remembered).

    Raises
    ------
    UnsupportedFunctionError
        If ``func`` is not callable, or is a Numba object-mode/GPU function.
    """
    if isinstance(func, CFunc):
        return func
    hook = getattr(type(func), "__pyjlad_dispatcher__", None)
    if hook is not None:  # a pyjlad.custom_derivative: an @njit caller of its symbol
        return as_numba_function(cached_for(func, ("dispatcher",), lambda: hook(func)))
    if isinstance(func, Dispatcher):
        if getattr(func, "_impl_kind", "direct") != "direct" or func.targetoptions.get("forceobj"):
            raise UnsupportedFunctionError(
                f"{describe_function(func)} is compiled in object mode; pyjlad differentiates "
                "nopython-mode code: decorate it with @numba.njit instead"
            )
        return func
    if type(func).__module__.startswith("numba.cuda"):
        raise UnsupportedFunctionError(
            f"{describe_function(func)} is a CUDA kernel; pass the @njit (CPU) version of the function"
        )
    if inspect.ismethod(func):
        raise UnsupportedFunctionError(
            f"cannot differentiate the bound method {describe_function(func)}: Numba compiles functions, "
            "not methods; write a function that takes the object's arrays and floats as arguments"
        )
    if not callable(func) or not hasattr(func, "__code__"):
        raise UnsupportedFunctionError(
            f"cannot differentiate {func!r}: pass a Python function, a @numba.njit "
            "dispatcher or a @numba.cfunc"
        )
    return cached_for(func, ("njit",), lambda: numba.njit(func))


def numba_argtypes(args: Sequence[Any]) -> tuple[nbtypes.Type, ...]:
    """Numba types of call arguments, refusing unsupported ones clearly."""
    out = []
    for index, value in enumerate(args):
        _refuse_unsupported_value(index, value)
        try:
            ty = numba.typeof(value)
        except (ValueError, nberrors.NumbaError) as exc:  # NumbaValueError ("Unsupported array dtype") is no ValueError
            raise UnsupportedFunctionError(
                f"argument {index} ({type(value).__name__}) has no Numba type; pass floats, "
                "ints, bools or NumPy arrays of them"
            ) from exc
        out.append(ty)
    return tuple(out)


def _refuse_unsupported_value(index: int, value: Any) -> None:
    """NumPy values Numba cannot take, refused with what to pass instead."""
    if isinstance(value, np.ma.MaskedArray):
        raise UnsupportedFunctionError(
            f"argument {index} is a masked array, which Numba cannot take: pass x.filled(value) "
            "(or x.data) and, if the function needs it, the mask as a separate bool array"
        )
    dtype = getattr(value, "dtype", None)
    if not isinstance(dtype, np.dtype):
        return
    if dtype == np.float16:
        raise UnsupportedFunctionError(
            f"argument {index} is float16, which Numba does not support: pass x.astype(np.float32)"
        )
    if dtype.kind in "fc" and dtype.itemsize > (8 if dtype.kind == "f" else 16):
        wanted = "x.astype(np.float64)" if dtype.kind == "f" else "x.real and x.imag as float64 arrays"
        raise UnsupportedFunctionError(
            f"argument {index} is {dtype.name} (extended precision), which Numba does not support: pass {wanted}"
        )
    if dtype.kind == "O":
        raise UnsupportedFunctionError(
            f"argument {index} is an array of Python objects (dtype=object): convert it with "
            "x.astype(np.float64)"
        )
    if not dtype.isnative:
        raise UnsupportedFunctionError(
            f"argument {index} has non-native byte order ({dtype.str}): pass "
            "x.astype(x.dtype.newbyteorder('='))"
        )


def _arg_abi(index: int, ty: nbtypes.Type) -> ArgABI:
    if isinstance(ty, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean)):
        return ScalarArg(dtype=_dtype_name(ty), llvm_type="")
    if isinstance(ty, nbtypes.Array) and isinstance(
        ty.dtype, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean)
    ):
        return ArrayArg(dtype=_dtype_name(ty.dtype), ndim=ty.ndim, layout=ty.layout, llvm_element="")
    if isinstance(ty, (nbtypes.Complex,)) or (
        isinstance(ty, nbtypes.Array) and isinstance(ty.dtype, nbtypes.Complex)
    ):
        raise UnsupportedFunctionError(
            f"argument {index} is complex ({ty}); pyjlad differentiates real float64/float32 "
            "code: split complex values into real and imaginary float arrays"
        )
    raise UnsupportedFunctionError(
        f"argument {index} has Numba type {ty}, which pyjlad cannot pass to a differentiated "
        "function; pass floats, ints, bools or NumPy arrays of them (unpack tuples and "
        "containers into separate arguments)"
    )


def _dtype_name(ty: nbtypes.Type) -> str:
    return "bool" if isinstance(ty, nbtypes.Boolean) else str(ty)


def _arity_message(func: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> str:
    """Why ``len(argtypes)`` arguments do not fit ``func``, in terms of its Python signature."""
    name = describe_function(func)
    signature = inspect.signature(func.py_func)
    params = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return (f"{name}{signature} takes *args, which pyjlad cannot compile for a fixed argument list: "
                "name each argument in the def (def f(x, y): ...)")
    return (f"{name}{signature} takes {len(signature.parameters)} argument(s) but was given {len(argtypes)}: "
            "pyjlad passes arguments by position and does not fill in defaults, so pass every argument "
            "(defaults included)")


def _compile_result(func: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> Any:
    name = describe_function(func)
    try:
        func.compile(argtypes)
    except nberrors.NumbaError as exc:
        first = str(exc).strip().splitlines()
        detail = "\n".join(first[:12])
        raise UnsupportedFunctionError(
            f"Numba cannot compile {name} for argument types "
            f"({', '.join(map(str, argtypes))}) in nopython mode. pyjlad differentiates "
            "nopython-mode Numba code: change the function so that numba.njit compiles it "
            f"for these arguments.\nNumba said:\n{detail}"
        ) from None
    except TypeError as exc:
        if "Signature mismatch" in str(exc):
            raise UnsupportedFunctionError(_arity_message(func, argtypes)) from None
        if "compilation disabled" not in str(exc):
            raise
    cres = func.overloads.get(argtypes)
    if cres is None:
        # Explicit signatures: find the overload Numba would dispatch to.
        for sig, candidate in func.overloads.items():
            if len(sig) == len(argtypes) and all(
                func.typingctx.can_convert(a, b) is not None for a, b in zip(argtypes, sig)
            ):
                cres = candidate
                break
    if cres is None:
        raise UnsupportedFunctionError(
            f"{name} has no compiled version for argument types ({', '.join(map(str, argtypes))}) "
            f"and its compilation is disabled; its signatures are {list(func.overloads)}"
        )
    if cres.objectmode:
        raise UnsupportedFunctionError(f"{name} compiled in object mode; use @numba.njit")
    return cres


def _entry_params(module: Module, entry: str) -> list[Parameter]:
    """Every parameter of the portable module's entry (``retptr``, ``excinfo``, then the arguments')."""
    try:
        found = numba_entry(module, entry)
    except (KeyError, ValueError) as exc:
        raise ExportError(f"entry {entry} not found in exported module ({exc})") from None
    return [found.retptr, found.excinfo, *found.arguments]


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name).strip("_") or "f"


def export(func: Any, argtypes: Sequence[nbtypes.Type]) -> ExportedFunction:
    """Export ``func`` compiled for ``argtypes`` as a portable module (remembered per types).

    Parameters
    ----------
    func : callable
        ``@njit`` dispatcher, ``@cfunc`` object or plain Python function.
    argtypes : sequence of numba types
        Argument types to compile for (ignored for a ``@cfunc``, whose
        signature is fixed).

    Returns
    -------
    ExportedFunction

    Raises
    ------
    UnsupportedFunctionError
        If Numba cannot compile the function, or an argument or the result
        has a type pyjlad cannot pass.
    """
    argtypes = tuple(argtypes)
    return cached_for(func, ("export", argtypes), lambda: _export(func, argtypes))


def _uses_parallel(dispatcher: Dispatcher, seen: set[int] | None = None) -> bool:
    """Whether ``dispatcher`` or an ``@njit`` function it references by global name is ``parallel=True``."""
    seen = set() if seen is None else seen
    if id(dispatcher) in seen:
        return False
    seen.add(id(dispatcher))
    if dispatcher.targetoptions.get("parallel"):
        return True
    py = dispatcher.py_func
    return any(
        isinstance(value, Dispatcher) and _uses_parallel(value, seen)
        for value in (py.__globals__.get(name) for name in py.__code__.co_names)
    )


def _serial(dispatcher: Dispatcher) -> Dispatcher:
    """The dispatcher itself, or a serial copy if it (or an ``@njit`` function it calls) is ``parallel=True``.

    Numba's parallel loops call its threading runtime through function pointers
    Enzyme cannot follow; the serial copy (``prange`` runs as ``range``, and
    parallel callees referenced by global name are replaced by their serial
    copies) computes the same function, and its derivative runs serially.
    """
    if not _uses_parallel(dispatcher):
        return dispatcher

    def build() -> Dispatcher:
        py = dispatcher.py_func
        namespace = dict(py.__globals__)
        for name in py.__code__.co_names:
            value = namespace.get(name)
            if isinstance(value, Dispatcher) and _uses_parallel(value):
                namespace[name] = _serial(value)
        clone = pytypes.FunctionType(py.__code__, namespace, py.__name__, py.__defaults__, py.__closure__)
        clone.__qualname__ = py.__qualname__
        options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("parallel", "nopython")}
        return numba.njit(**options)(clone)

    return cached_for(dispatcher, ("serial",), build)


@contextlib.contextmanager
def _ir_before_codegen(captured: list[tuple[Any, str]]) -> Iterator[None]:
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


def _enzyme_ir(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> tuple[Any, str] | None:
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
    machine code (see :func:`_ir_before_codegen`). ``None`` if the copy does not
    compile.
    """
    copy = unvectorized_copy(dispatcher)
    with branch_preserving_compile():
        try:
            return _compile_before_codegen(copy, argtypes)
        except Exception:
            return None


def _compile_before_codegen(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> tuple[Any, str] | None:
    """Compile ``dispatcher`` for ``argtypes``: its compile result and its IR before code generation.

    The IR is taken as LLVM's optimizer left it (see :func:`_ir_before_codegen`),
    or read back from the library if ``dispatcher`` was compiled for
    ``argtypes`` already. ``None`` if no compile result matches ``argtypes``.
    """
    captured: list[tuple[Any, str]] = []
    with _ir_before_codegen(captured):
        dispatcher.compile(argtypes)
    cres = dispatcher.overloads.get(tuple(argtypes))
    if cres is None:
        return None
    text = next((ir for library, ir in captured if library is cres.library), None)
    return cres, text if text is not None else cres.library.get_llvm_str()


def result_type(func: Any, argtypes: Sequence[nbtypes.Type]) -> nbtypes.Type:
    """The Numba result type of ``func`` for ``argtypes`` (compiling it if needed)."""
    target = as_numba_function(func)
    if isinstance(target, CFunc):
        return target._sig.return_type
    return _compile_result(target, tuple(argtypes)).signature.return_type


def _export(func: Any, argtypes: tuple[nbtypes.Type, ...]) -> ExportedFunction:
    target = as_numba_function(func)
    name = describe_function(target)
    enzyme_module: Callable[[], PortableModule] | None = None
    if isinstance(target, CFunc):
        sig = target._sig
        argtypes = tuple(sig.args)
        restype = sig.return_type
        ir = target._library.get_llvm_str()
        mangled = target.native_name.split(".", 1)[1]
        pyfunc = target._pyfunc
        run = as_numba_function(pyfunc)
    else:
        argtypes = tuple(argtypes)
        cres = _compile_result(_serial(target), argtypes)
        argtypes = tuple(cres.signature.args)
        restype = cres.signature.return_type
        ir = cres.library.get_llvm_str()
        mangled = cres.fndesc.mangled_name
        run = target
        serial = _serial(target)

        def enzyme_module() -> PortableModule:
            fresh = _enzyme_ir(serial, argtypes)
            if fresh is None:
                return module
            return make_portable(fresh[1], fresh[0].fndesc.mangled_name, name=entry, dump_as="enzyme-copy")

    args_abi = [_arg_abi(i, t) for i, t in enumerate(argtypes)]
    if not isinstance(restype, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean, nbtypes.NoneType)):
        raise UnsupportedFunctionError(
            f"{name} returns {restype}; pyjlad needs a function that returns a real scalar: "
            "reduce array results to a scalar (for example with np.sum) or return a float "
            "(pyjlad.jvp, pyjlad.vjp and pyjlad.jacobian accept array and tuple results)"
        )
    entry = "pyjlad_" + _sanitize(name.split(".")[-1])
    module = make_portable(ir, mangled, name=entry)
    parsed = parse_module(module.text)
    param_decls = _entry_params(parsed, entry)
    param_types = [p.type for p in param_decls]
    expected = sum(len(a.param_roles) for a in args_abi)
    if len(param_types) != 2 + expected:
        raise ExportError(
            f"{name}: Numba's entry has {len(param_types) - 2} parameters after retptr/excinfo, "
            f"the ABI description expects {expected}; argument types {argtypes} are not supported"
        )
    llvm_params = param_types[2:]
    decls = param_decls[2:]
    data_params: dict[str, int] = {}  # the float arrays' data pointers, for the aliasing analysis
    position = 0
    for index, arg in enumerate(args_abi):
        if isinstance(arg, ArrayArg) and arg.differentiable:
            data_params[decls[position + arg.param_roles.index("data")].name or ""] = index
        position += len(arg.param_roles)
    aliased = mixed_pointer_arguments(parsed, entry, data_params)
    filled: list[ArgABI] = []
    position = 0
    for index, arg in enumerate(args_abi):
        n = len(arg.param_roles)
        chunk = llvm_params[position:position + n]
        if isinstance(arg, ArrayArg):
            writes = not decls[position + arg.param_roles.index("data")].readonly
            filled.append(ArrayArg(arg.dtype, arg.ndim, arg.layout, _llvm_type_of(arg.dtype), writes,
                                   aliased=index in aliased))
        else:
            filled.append(ScalarArg(arg.dtype, chunk[0]))
        position += n
    if isinstance(restype, nbtypes.NoneType):
        result = ScalarArg("none", "void")
    else:
        result = ScalarArg(_dtype_name(restype), _llvm_type_of(_dtype_name(restype)))
    abi = FunctionABI(entry=entry, args=tuple(filled), result=result, param_types=tuple(llvm_params))
    return ExportedFunction(module=module, abi=abi, argtypes=argtypes, restype=restype, run=run, name=name,
                            make_enzyme_module=enzyme_module)


def _llvm_type_of(dtype: str) -> str:
    if dtype == "float64":
        return "double"
    if dtype == "float32":
        return "float"
    if dtype == "bool":
        return "i8"
    bits = int(re.sub(r"\D", "", dtype) or 64)
    return _LLVM_INT.get(bits, "i64")
