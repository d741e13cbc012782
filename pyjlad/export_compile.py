"""The Numba function pyjlad exports, compiled for the call's argument types.

:func:`as_numba_function` finds the Numba object behind what the user passed (a ``@njit``
dispatcher, a ``@cfunc``, a :class:`~pyjlad.rules.CustomDerivative` or a plain Python function),
:func:`numba_argtypes` types the call's arguments, :func:`compile_result` compiles the function for
them, :func:`serial_dispatcher` replaces a ``parallel=True`` function by a serial copy and
:func:`inspectable_compile_result` compiles afresh what Numba loaded from its disk cache. Each
refuses what pyjlad cannot differentiate with an :class:`~pyjlad.errors.UnsupportedFunctionError`
in the user's terms.
"""

from __future__ import annotations

import inspect
import threading
import types as pytypes
import weakref
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import types as nbtypes
from numba.core import errors as nberrors
from numba.core.ccallback import CFunc
from numba.core.dispatcher import Dispatcher

from .errors import RecompilationWarning, UnsupportedFunctionError
from .frozen_globals import own, recompile_if_changed
from .memo import cached_for
from .user_frames import warn_at_caller

__all__ = [
    "as_numba_function", "compile_result", "copy_options", "describe_function", "inspectable_compile_result", "numba_argtypes",
    "plain_function_dispatcher", "result_type", "serial_dispatcher",
]


def python_function(func: Any) -> Any:
    """The Python function behind ``func`` (a dispatcher's ``py_func``, a cfunc's ``_pyfunc``), or ``func``."""
    return getattr(func, "py_func", None) or getattr(func, "_pyfunc", None) or func


def describe_function(func: Any) -> str:
    """A short human-readable name for ``func`` for error messages."""
    return getattr(python_function(func), "__qualname__", None) or repr(func)


def wrapped_name(func: Any) -> str | None:
    """The name of the user's function a wrapper of pyjlad's stands for (its ``results_of``: the wrapper that
    writes an array result into buffers, :mod:`pyjlad.outputs`), or ``None`` for any other function."""
    return getattr(func, "results_of", None)


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
        if _keyword_only(func.py_func):
            return cached_for(func, ("positional twin",), lambda: _positional_twin(func))
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
    if callable(func) and type(func).__module__.startswith("pyjlad."):
        raise UnsupportedFunctionError(
            f"cannot differentiate {func!r} from Python: it is a derivative pyjlad made, not a Numba function. "
            "For second derivatives use pyjlad.hessian(f, x) or pyjlad.hvp(f, (x,), v); or call it inside an @njit "
            "function and differentiate that (@njit def g(x): return df(x), then pyjlad.jacfwd(g))"
        )
    if not callable(func) or not hasattr(func, "__code__"):
        raise UnsupportedFunctionError(
            f"cannot differentiate {func!r}: pass a Python function, a @numba.njit "
            "dispatcher or a @numba.cfunc"
        )
    dispatcher = _plain_njit(func)
    recompile_if_changed(dispatcher)  # a plain function reads its globals at each call: so do its derivatives
    return as_numba_function(dispatcher)


def plain_function_dispatcher(func: Any) -> Dispatcher | None:
    """pyjlad's ``numba.njit`` of ``func``, a plain Python function (one per function); ``None`` for anything else.

    Numba freezes the global arrays and numbers it reads when it compiles, where ``func`` itself reads them at each
    call: :func:`pyjlad.frozen_globals.recompile_if_changed` compiles it again where they changed.
    """
    if not isinstance(func, pytypes.FunctionType):
        return None
    return _plain_njit(func)


def _plain_njit(func: Any) -> Dispatcher:
    def made() -> Dispatcher:
        _count_function_of_its_code(func)
        dispatcher = numba.njit(func)
        own(dispatcher, func)
        return dispatcher

    return cached_for(func, ("njit",), made)


#: The number of plain functions made from one code object pyjlad compiles before it warns
#: (:class:`~pyjlad.errors.RecompilationWarning`).
FUNCTIONS_OF_ONE_CODE_BEFORE_WARNING = 3

#: Functions compiled per code object; weakly keyed, so that code built with ``exec`` and dropped is not kept.
_functions_of_code: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_functions_of_code_lock = threading.Lock()


def _count_function_of_its_code(func: Any) -> None:
    """Count ``func``, a plain function pyjlad compiles, against its code; warn once where that code reaches
    :data:`FUNCTIONS_OF_ONE_CODE_BEFORE_WARNING` function objects (each compiled, and differentiated, anew)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return
    with _functions_of_code_lock:
        count = _functions_of_code[code] = _functions_of_code.get(code, 0) + 1
    if count == FUNCTIONS_OF_ONE_CODE_BEFORE_WARNING:
        warn_at_caller(
            f"pyjlad has compiled {count} functions made from the same code ({describe_function(func)}, "
            f"{code.co_filename}:{code.co_firstlineno}), each with derivatives built afresh: a function made anew "
            "at each call (a lambda or closure written at the call) costs a compile and an Enzyme build every "
            "time, and memory Numba never releases; pass the data it captures as an argument instead "
            "(pyjlad.gradient(loss, w, X), not pyjlad.gradient(lambda w: loss(w, X), w))",
            RecompilationWarning)


def _keyword_only(py: Any) -> bool:
    """Whether ``py`` has keyword-only parameters after a bare ``*`` (not ``*args``, refused elsewhere)."""
    code = getattr(py, "__code__", None)
    return bool(code is not None and code.co_kwonlyargcount and not code.co_flags & inspect.CO_VARARGS)


def _positional_twin(func: Dispatcher) -> Dispatcher:
    """``func`` with its keyword-only parameters made ordinary ones, in the same order with the same defaults
    (the same code; Numba's options but ``cache``).

    Numba binds a keyword-only parameter when Python calls the function, but not in ``@njit`` code (``g(x,
    scale=s)`` there is "missing a required argument: 'x'"), where pyjlad's wrappers call it, nor passed by
    position, as pyjlad's sweeps pass every argument.

    Examples
    --------
    >>> import numba
    >>> def f(x, *, scale=2.0):
    ...     return x * scale
    >>> twin = _positional_twin(numba.njit(f))
    >>> twin(3.0), twin(3.0, 0.5), twin(3.0, scale=0.5)
    (6.0, 1.5, 1.5)
    """
    py = func.py_func
    code = py.__code__
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    given = py.__kwdefaults__ or {}
    defaults = tuple(py.__defaults__ or ())
    missing = [name for name in kwonly if name not in given]
    if missing and (defaults or any(name in given for name in kwonly[:kwonly.index(missing[-1])])):
        raise UnsupportedFunctionError(
            f"{describe_function(func)}{inspect.signature(py)}: pyjlad passes keyword-only parameters by position, "
            f"and {', '.join(missing)} has no default after parameters that have one; give it a default or make "
            "it an ordinary parameter"
        )
    twin = pytypes.FunctionType(code.replace(co_argcount=code.co_argcount + len(kwonly), co_kwonlyargcount=0),
                                py.__globals__, py.__name__, (*defaults, *(given[n] for n in kwonly if n in given))
                                or None, py.__closure__)
    twin.__qualname__, twin.__module__, twin.__doc__ = py.__qualname__, py.__module__, py.__doc__
    options = {k: v for k, v in func.targetoptions.items() if k not in ("nopython", "cache")}
    return numba.njit(**options)(twin)


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


def _takes_star_args(func: Dispatcher) -> bool:
    """Whether ``func``'s Python function has a ``*args`` parameter."""
    py_func = getattr(func, "py_func", None)
    return py_func is not None and any(p.kind is inspect.Parameter.VAR_POSITIONAL
                                       for p in inspect.signature(py_func).parameters.values())


def _arity_message(func: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> str:
    """Why ``len(argtypes)`` arguments do not fit ``func``, in terms of its Python signature."""
    name = describe_function(func)
    signature = inspect.signature(func.py_func)
    if _takes_star_args(func):
        return (f"{name}{signature} takes *args, which pyjlad cannot compile for a fixed argument list: "
                "name each argument in the def (def f(x, y): ...)")
    omitted = [p.name for p in list(signature.parameters.values())[len(argtypes):]]
    advice = f"pass {', '.join(omitted)} too" if omitted else "pass only the arguments it takes"
    return (f"{name}{signature} takes {len(signature.parameters)} argument(s) but was given {len(argtypes)}: "
            f"{advice}")


def _readonly_hint(argtypes: tuple[nbtypes.Type, ...]) -> str:
    """What to try where an argument is a read-only array (Numba 0.68 fails with an ``AttributeError``
    compiling a write into one, ``x *= 2.0``, instead of its "readonly array" error)."""
    readonly = [i for i, t in enumerate(argtypes) if isinstance(t, nbtypes.Array) and not t.mutable]
    if not readonly:
        return ""
    return (f" Argument(s) {', '.join(map(str, readonly))} are read-only arrays (writeable=False; JAX's arrays are): "
            "where the function writes into one, pass a writable copy (np.array(x)) or write into a copy inside it")


def compile_result(func: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> Any:
    """Numba's compile result of ``func`` for ``argtypes`` (or the overload it would dispatch them to).

    Raises
    ------
    UnsupportedFunctionError
        If Numba cannot compile it in nopython mode, the argument count does not fit, or its
        compilation is disabled and no signature fits.
    """
    name = describe_function(func)
    if _takes_star_args(func):  # Numba would take one argument for the whole tuple: refused before it does
        raise UnsupportedFunctionError(_arity_message(func, argtypes))
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
    except (AttributeError, AssertionError, KeyError, IndexError) as exc:  # a failure inside Numba itself
        raise UnsupportedFunctionError(
            f"Numba failed while compiling {name} for argument types ({', '.join(map(str, argtypes))}) "
            f"({type(exc).__name__}: {exc}, an error inside Numba, which a call of {name} itself gives too)."
            f"{_readonly_hint(argtypes)}"
        ) from None
    except (TypeError, RuntimeError) as exc:  # RuntimeError("compilation disabled"): explicit signatures only
        if isinstance(exc, TypeError) and "Signature mismatch" in str(exc):
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


def result_type(func: Any, argtypes: Sequence[nbtypes.Type]) -> nbtypes.Type:
    """The Numba result type of ``func`` for ``argtypes`` (compiling it if needed)."""
    target = as_numba_function(func)
    if isinstance(target, CFunc):
        return target._sig.return_type
    return compile_result(target, tuple(argtypes)).signature.return_type


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


def copy_options(dispatcher: Dispatcher, dropped: tuple[str, ...]) -> dict[str, Any]:
    """The ``@njit`` options of a copy pyjlad compiles of ``dispatcher``: its own, less ``dropped``, and no debug
    information.

    Numba's debug information (``debug=True``, or ``NUMBA_DEBUGINFO=1``, which ``NUMBA_ENABLE_PROFILING=1`` for
    perf and VTune turns on) marks every function it compiles ``noinline``; LLVM then merged an out-of-line
    callee's result and its exception pointer into one ``select`` (``np.zeros`` in a function with a slice
    assignment), two pointers Enzyme's type analysis cannot give one type, and the derivative failed. A
    derivative never reads debug information. The function's own ``boundscheck`` is kept.

    >>> copy_options(numba.njit(debug=True, boundscheck=True, fastmath=True)(lambda x: x), ("fastmath", "nopython"))
    {'debug': False, 'boundscheck': True}
    """
    return {**{k: v for k, v in dispatcher.targetoptions.items() if k not in dropped}, "debug": False}


def _clone(dispatcher: Dispatcher, dropped: tuple[str, ...], namespace: dict[str, Any] | None = None) -> Dispatcher:
    """A fresh ``@njit`` function of ``dispatcher``'s code (its globals ``namespace``), without the options
    ``dropped``."""
    py = dispatcher.py_func
    clone = pytypes.FunctionType(py.__code__, py.__globals__ if namespace is None else namespace, py.__name__,
                                 py.__defaults__, py.__closure__)
    clone.__qualname__ = py.__qualname__
    return numba.njit(**copy_options(dispatcher, dropped))(clone)


def serial_dispatcher(dispatcher: Dispatcher) -> Dispatcher:
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
                namespace[name] = serial_dispatcher(value)
        return _clone(dispatcher, ("parallel", "nopython"), namespace)

    return cached_for(dispatcher, ("serial",), build)


def inspectable_compile_result(dispatcher: Dispatcher, argtypes: tuple[nbtypes.Type, ...]) -> Any:
    """:func:`compile_result`, compiled afresh (by a copy) where Numba loaded it from its disk cache.

    A function Numba loads from its disk cache (``cache=True``, a later process) has machine code but no
    IR ("Inspection disabled for cached code"), and pyjlad found no entry function in its module. The
    copy compiles once per process; the user's function keeps its cache.
    """
    cres = compile_result(dispatcher, argtypes)
    if not getattr(cres.library, "_disable_inspection", False):
        return cres
    copy = cached_for(dispatcher, ("fresh-compile",), lambda: _clone(dispatcher, ("nopython",)))
    return compile_result(copy, tuple(cres.signature.args))
