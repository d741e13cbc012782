"""Export a Numba function as a portable LLVM module plus its ABI description.

Accepts a ``@njit`` dispatcher (compiled for the requested argument types), a
``@cfunc`` object (its inner ABI function, never the ``cfunc.`` wrapper: see
Enzyme.jl issue #2505) or a plain Python function (``njit``-compiled on first
use, once per function).

This module assembles the :class:`ExportedFunction`; the parts are in
:mod:`pyjlad.export_compile` (the Numba function, its argument types and its
compile result; :func:`as_numba_function`, :func:`describe_function`,
:func:`numba_argtypes` and :func:`result_type` are importable from here too),
:mod:`pyjlad.export_ir` (the IR before code generation, the copy compiled for
Enzyme) and :mod:`pyjlad.export_abi` (the ABI description).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from numba import types as nbtypes
from numba.core.ccallback import CFunc
from numba.core.compiler_lock import global_compiler_lock

from .abi import FunctionABI
from .aliasing import mixed_pointer_arguments
from .errors import ExportError, UnsupportedFunctionError
from .export_abi import arg_abi, data_parameters, filled_args, never_written_data, result_abi
from .export_compile import (
    as_numba_function,
    describe_function,
    inspectable_compile_result,
    numba_argtypes,
    result_type,
    serial_dispatcher,
    wrapped_name,
)
from .export_ir import enzyme_ir
from .export_recursion import resolve_recursion
from .frozen_globals import refuse_changed
from .inferred_readonly import readonly_parameters
from .ir import Module, Parameter
from .ir import parse as parse_module
from .ir.analysis import numba_entry
from .ir.names import c_identifier
from .log import get_logger, timed
from .memo import cached_for
from .parallel_derivatives import PARALLEL_TWIN, parallel_module
from .portable import PortableModule
from .portable_pipeline import make_portable
from .refusals import refuse_objmode

__all__ = [
    "ExportedFunction", "export", "as_numba_function", "numba_argtypes", "describe_function", "wrapped_name", "result_type",
]


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
    make_parallel_module : callable, optional
        For a ``parallel=True`` function: ``(module, "")`` of its copy with parallel loops Enzyme
        differentiates in parallel, or ``(None, why not)`` (:mod:`pyjlad.parallel_derivatives`).
    """

    module: PortableModule
    abi: FunctionABI
    argtypes: tuple[nbtypes.Type, ...]
    restype: nbtypes.Type
    run: Callable[..., Any]
    name: str
    make_enzyme_module: Callable[[], PortableModule] | None = field(default=None, repr=False, compare=False)
    make_parallel_module: Callable[..., tuple[PortableModule | None, str]] | None = field(
        default=None, repr=False, compare=False)

    @property
    def enzyme_module(self) -> PortableModule:
        """The module Enzyme differentiates: :attr:`module` compiled again without Numba's vectorizers,
        as LLVM's optimizer left it (before code generation rewrote it; see
        :func:`pyjlad.export_ir.ir_before_codegen`).

        Built on first use (a second Numba compile of the function), so a
        process that finds the gradient in the disk cache, keyed by
        :attr:`module`, never builds it. Remembered per instance, built under Numba's compiler lock taken first
        (see :func:`export`; a ``functools.cached_property``'s lock, one for every instance in Python 3.11, made
        two threads wait for each other for ever).
        """
        make = self.make_enzyme_module
        return cached_for(self, ("enzyme module",), lambda: make() if make is not None else self.module,
                          build_under=global_compiler_lock)


def _entry_params(module: Module, entry: str) -> list[Parameter]:
    """Every parameter of the portable module's entry (``retptr``, ``excinfo``, then the arguments')."""
    try:
        found = numba_entry(module, entry)
    except (KeyError, ValueError) as exc:
        raise ExportError(f"entry {entry} not found in exported module ({exc})") from None
    return [found.retptr, found.excinfo, *found.arguments]


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
    # Numba's compiler lock before the entry's own: a thread compiling an @njit caller of a pyjlad derivative holds
    # it while its typing exports the derivative's function; one that took the entry first and then waited for
    # Numba's lock (every export compiles) would wait for it for ever (two threads, a user-style probe). Taken only
    # where the export is not remembered yet (the Julia engine exports on every sweep).
    return cached_for(func, ("export", argtypes), lambda: _timed_export(func, argtypes),
                      build_under=global_compiler_lock)


_log = get_logger(__name__)


def _timed_export(func: Any, argtypes: tuple[nbtypes.Type, ...]) -> ExportedFunction:
    with timed(_log, "exported %s for %s", getattr(func, "__name__", func), argtypes):
        return _export(func, argtypes)


def _export(func: Any, argtypes: tuple[nbtypes.Type, ...]) -> ExportedFunction:
    """Export ``func`` for ``argtypes`` (uncached: see :func:`export`)."""
    target = as_numba_function(func)
    name = describe_function(target)
    enzyme_module: Callable[[], PortableModule] | None = None
    parallel: Callable[[], tuple[PortableModule | None, str]] | None = None
    if isinstance(target, CFunc):
        sig = target._sig
        argtypes = tuple(sig.args)
        restype = sig.return_type
        ir = target._library.get_llvm_str()
        mangled = target.native_name.split(".", 1)[1]
        if getattr(target._library, "_disable_inspection", False):  # loaded from Numba's disk cache: no IR
            fresh = target._compile_uncached()
            ir, mangled = fresh.library.get_llvm_str(), fresh.fndesc.mangled_name
        pyfunc = target._pyfunc
        run = as_numba_function(pyfunc)
    else:
        argtypes = tuple(argtypes)
        cres = inspectable_compile_result(serial_dispatcher(target), argtypes)
        refuse_objmode(target, argtypes, describe_function(target))
        argtypes = tuple(cres.signature.args)
        # An array Numba froze into the user's f, changed since: a derivative of the new values would disagree
        # with f (pyjlad.frozen_globals).
        refuse_changed(target, argtypes, wrapped_name(target) or name)
        restype = cres.signature.return_type
        ir = resolve_recursion(cres.library.get_llvm_str(), cres, describe_function(target))
        mangled = cres.fndesc.mangled_name
        run = target
        serial = serial_dispatcher(target)

        def enzyme_module() -> PortableModule:
            # The copy is compiled now, from the values of now (pyjlad.frozen_globals): refused where f froze others.
            refuse_changed(target, argtypes, wrapped_name(target) or name)
            fresh = enzyme_ir(serial, argtypes)
            if fresh is None:
                return module
            return make_portable(fresh[1], fresh[0].fndesc.mangled_name, name=entry, dump_as="enzyme-copy")

        if target.targetoptions.get("parallel"):
            def parallel(form: str = "reverse") -> tuple[PortableModule | None, str]:
                refuse_changed(target, argtypes, wrapped_name(target) or name)
                return cached_for(target, ("parallel-module", argtypes, form),
                                  lambda: parallel_module(target, argtypes, entry, form=form,
                                                          never_written=never_written_data(abi.args)))
        elif getattr(target, PARALLEL_TWIN, None):  # the results wrapper of a parallel function (pyjlad.outputs)
            def parallel(form: str = "reverse") -> tuple[PortableModule | None, str]:
                return cached_for(target, ("parallel-module", argtypes, form),
                                  lambda: parallel_module(getattr(target, PARALLEL_TWIN)(), argtypes, entry,
                                                          form=form, never_written=never_written_data(abi.args)))

    args_abi = [arg_abi(i, t) for i, t in enumerate(argtypes)]
    if isinstance(restype, nbtypes.Generator):
        raise UnsupportedFunctionError(
            f"{name} is a generator (it yields): pyjlad differentiates a function that returns a real scalar; "
            "accumulate what it yields into a variable and return that (or np.sum of an array of them)"
        )
    if not isinstance(restype, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean, nbtypes.NoneType)):
        raise UnsupportedFunctionError(
            f"{name} returns {restype}; pyjlad needs a function that returns a real scalar: "
            "reduce array results to a scalar (for example with np.sum) or return a float "
            "(pyjlad.jvp, pyjlad.vjp and pyjlad.jacobian accept array and tuple results; for a function "
            "returning (value, aux), use grad/value_and_grad with has_aux=True)"
        )
    entry = "pyjlad_" + c_identifier(name.split(".")[-1])
    module = make_portable(ir, mangled, name=entry)
    parsed = parse_module(module.text)
    params = _entry_params(parsed, entry)
    expected = sum(len(a.param_roles) for a in args_abi)
    if len(params) != 2 + expected:
        raise ExportError(
            f"{name}: Numba's entry has {len(params) - 2} parameters after retptr/excinfo, "
            f"the ABI description expects {expected}; argument types {argtypes} are not supported"
        )
    decls = params[2:]
    aliased = mixed_pointer_arguments(parsed, entry, data_parameters(args_abi, decls))
    readonly = readonly_parameters(module.text, entry)
    abi = FunctionABI(entry=entry, args=tuple(filled_args(args_abi, decls, aliased, readonly)), result=result_abi(restype),
                      param_types=tuple(p.type for p in decls))
    return ExportedFunction(module=module, abi=abi, argtypes=argtypes, restype=restype, run=run, name=name,
                            make_enzyme_module=enzyme_module, make_parallel_module=parallel)
