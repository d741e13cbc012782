"""Derivatives called from ``@njit`` code: ``pyjlad.grad(f)`` and ``pyjlad.value_and_grad(f)`` as Numba callables.

A derivative passed to, or referenced as a global or closure variable by, an ``@njit``
function has the Numba type :class:`DerivativeType`. Typing a call compiles the
derivative for the argument types Numba inferred at that call site (export,
Enzyme, machine code: :func:`pyjlad.engines.embedded.build`, cached as for a
Python call); lowering declares the Enzyme driver in the caller's module, calls
it directly, and links the derivative's library into the caller
(``context.add_linking_libs``) so LLVM may inline it. No Python object is
touched on the call.

Inside Numba a derivative returns what it returns in Python: for ``grad``, a
``float64`` for a float argument and a new C-ordered array (the argument's
shape and dtype) for a float array argument, a tuple of those for a tuple
``wrt``; for ``value_and_grad``, ``(value, gradient)``. Arrays that are not
C-contiguous (or are read-only) are copied before the sweep, as the Python
path does for overlapping views.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.core.typing import signature
from numba.extending import NativeValue, models, register_model, typeof_impl, unbox

from ..engines.base import ReverseGradient
from ..engines.driver import OUT_OF_MEMORY
from ..errors import PyjladError, UncheckedDerivativeWarning
from ..export import describe_function, wrapped_name
from ..memo import cached_for
from ..nested import keep_calls
from ..transforms import _Grad, _ValueAndGrad
from ..user_frames import warn_at_caller
from .planned import Plan, PlannedCallable

__all__ = ["DerivativeType"]

_KIND = {_ValueAndGrad: "value_and_grad", _Grad: "grad"}


def _kind(derivative: _ValueAndGrad) -> str:
    return _KIND[type(derivative)]


def _describe(derivative: _ValueAndGrad) -> str:
    f, wrt, _ = derivative._spec
    return f"pyjlad.{_kind(derivative)}({getattr(f, '__name__', f)!s}, wrt={wrt!r})"


def _parameters(f: Any) -> list[str] | None:
    """The parameter names of ``f`` (a dispatcher's Python function), or None if unknown."""
    try:
        return list(inspect.signature(getattr(f, "py_func", f)).parameters)
    except (TypeError, ValueError):
        return None


def _accepts(derivative: _ValueAndGrad) -> str:
    """What the derivative accepts inside ``@njit`` code, in the user's terms."""
    f = derivative.__wrapped__
    name = getattr(f, "__name__", "f")
    params = _parameters(f)
    wrt = derivative._rev.wrt
    if params is None:
        takes = f"the arguments of {name}"
        named = ", ".join(f"argument {i}" for i in wrt)
    else:
        takes = f"the {len(params)} argument(s) of {name}({', '.join(params)})"
        named = ", ".join(params[i] if i < len(params) else f"argument {i}" for i in wrt)
    return (f"{_describe(derivative)} accepts {takes}, positionally, with {named} a float64/float32 scalar or "
            "a float64/float32 array (any dimensions and layout) and the others of any type "
            f"{name} takes")


def resolve_symbols(names: tuple[str, ...]) -> None:
    """Make the symbols ``names`` a linked derivative declares resolvable in Numba's JIT
    (what loading the derivative's own library does: :mod:`pyjlad.engines.objects`)."""
    from ..engines import embedded  # noqa: F401 - registers pyjlad's runtime symbols on import
    from ..engines.blas import resolve_blas_symbols
    from ..engines.pool import resolve_pool_symbols

    resolve_blas_symbols(list(names))
    resolve_pool_symbols(list(names))


def _declared(library: Any) -> tuple[str, ...]:
    """The functions ``library``'s linking module declares but does not define."""
    module = library._get_module_for_linking()
    return tuple(sorted(f.name for f in module.functions if f.is_declaration))


class _CallPlan:
    """How one call site's argument types are passed to one built sweep."""

    def __init__(self, argtypes: tuple[types.Type, ...], targets: tuple[types.Type, ...], built: Any,
                 wrt: tuple[int, ...], func: Any) -> None:
        self.func = func  # the function differentiated (an exception it raised is re-raised by calling it)
        self.argtypes = argtypes
        self.targets = targets
        self.built = built
        self.wrt = wrt
        self.declared = _declared(built.library)


class DerivativeType(PlannedCallable):
    """The Numba type of one ``pyjlad.grad``/``pyjlad.value_and_grad`` callable."""

    def __init__(self, derivative: _ValueAndGrad) -> None:
        self.derivative = derivative
        self._key = (_kind(derivative), derivative._rev, derivative._order, derivative._single)
        super().__init__(name=f"{_describe(derivative)}<{id(derivative._rev):x}>")

    @property
    def key(self) -> Any:
        return self._key

    def keywords_refused(self) -> str:
        return (f"{_describe(self.derivative)} takes positional arguments only inside @njit code; "
                f"{_accepts(self.derivative)}")

    def make_plan(self, context: Any, args: tuple[types.Type, ...]) -> Plan:
        """Build the derivative for ``args``: the call's signature and lowering."""
        plan = _plan(self.derivative, args)
        return signature(_return_type(self.derivative, plan), *args), _make_impl(self.derivative, plan), plan


@typeof_impl.register(_ValueAndGrad)
def _typeof_derivative(value: _ValueAndGrad, c: Any) -> DerivativeType:
    # Remembered with the compiled sweep: Numba types an argument on every call from Python.
    key = ("numba-type", _kind(value), value._order, value._single)
    return cached_for(value._rev, key, lambda: DerivativeType(value))


register_model(DerivativeType)(models.OpaqueModel)


@unbox(DerivativeType)
def _unbox_derivative(typ: DerivativeType, obj: Any, c: Any) -> NativeValue:
    # The type identifies the derivative: the Python object carries no data the call needs.
    return NativeValue(c.context.get_dummy_value())


def _needs_copy(arg: types.Type) -> bool:
    return isinstance(arg, types.Array) and (arg.layout != "C" or not arg.mutable)


def _check_wrt_arg(derivative: _ValueAndGrad, index: int, arg: types.Type) -> None:
    if isinstance(arg, types.Float) and arg.bitwidth in (32, 64):
        return
    if isinstance(arg, types.Array) and isinstance(arg.dtype, types.Float) and arg.dtype.bitwidth in (32, 64):
        return
    raise TypingError(f"argument {index} of {_describe(derivative)} has type {arg}, which has no derivative; "
                      f"{_accepts(derivative)}")


def _check_count(derivative: _ValueAndGrad, args: tuple[types.Type, ...]) -> None:
    """Refuse a call with more or fewer arguments than the function's plain positional parameters."""
    f = getattr(derivative.__wrapped__, "py_func", derivative.__wrapped__)
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return
    if len(params) != len(args):
        raise TypingError(f"{_describe(derivative)} called with {len(args)} argument(s) inside @njit code; "
                          f"{_accepts(derivative)}")


def _allocates(library: Any) -> bool:
    """Whether ``library``'s code takes memory from the pool, whose failure exits through the driver's guard."""
    from ..engines.pool import POOL_CALLOC, POOL_MALLOC, POOL_REALLOC

    return bool({POOL_MALLOC, POOL_CALLOC, POOL_REALLOC} & set(_declared(library)))


def _build_for_numba(compiled: Any, targets: tuple[types.Type, ...]) -> Any:
    """The sweep for ``targets``, built for being linked into @njit callers.

    A sweep that takes no memory from the pool is built without the driver's
    out-of-memory guard (``setjmp``, which stops LLVM from inlining the driver
    and costs about 35 ns a call): with no pool allocation it can never fire.
    Otherwise the guarded build the Python path uses.
    """
    from ..engines.embedded import build

    def unguarded() -> Any:
        return build(compiled.func, targets, compiled.sweep, oom_guard=False)

    built = cached_for(compiled, ("built-unguarded", targets), unguarded)
    if _allocates(built.library):
        built = compiled._build_once(targets)
    _warn_unchecked(compiled, built, targets)
    return built


def _warn_unchecked(compiled: Any, built: Any, targets: tuple[types.Type, ...]) -> None:
    """An :class:`~pyjlad.errors.UncheckedDerivativeWarning` where ``built`` needed loose types, once per sweep
    (``compiled``) and argument types (``targets``)."""
    if not built.loose_types:
        return
    sweep = compiled.sweep
    name = wrapped_name(compiled.func) or describe_function(compiled.func)
    what = f"{sweep.mode}-mode derivative" if sweep.kind == "ad" else "Hessian-vector product"

    def warn() -> bool:
        warn_at_caller(
            f"the {what} of {name} for ({', '.join(map(str, targets))}), called from @njit code, needed loose types "
            "(Enzyme could not deduce what some of the function's memory holds) and is not checked there against "
            f"finite differences, as it is on a first call from Python: call the same transform of {name} once "
            "from Python (a wrong derivative is then refused)", UncheckedDerivativeWarning)
        return True

    cached_for(compiled, ("unchecked warning", targets), warn)  # (remembered: issued once)


def _plan(derivative: _ValueAndGrad, args: tuple[types.Type, ...]) -> _CallPlan:
    """Check ``args``, then build the sweep for them (Enzyme runs here, on a cache miss)."""
    rev = derivative._rev
    compiled = getattr(rev, "_compiled", None)
    if not isinstance(rev, ReverseGradient) or not hasattr(compiled, "_build_once"):
        raise TypingError(f"{_describe(derivative)} was made with an engine whose derivatives cannot be called "
                          "from @njit code: use the default engine (engine='embedded')")
    if derivative._order is not None and len(set(derivative._order)) != len(derivative._order):
        raise TypingError(f"{_describe(derivative)} names an argument twice in wrt, which is not supported "
                          "inside @njit code: name each argument once")
    if rev.wrt[-1] >= len(args):
        raise TypingError(f"{_describe(derivative)} called with {len(args)} argument(s) inside @njit code, "
                          f"but wrt names argument {rev.wrt[-1]}; {_accepts(derivative)}")
    _check_count(derivative, args)
    for index in rev.wrt:
        _check_wrt_arg(derivative, index, args[index])
    targets = tuple(a.copy(layout="C", readonly=False) if i in rev.wrt and _needs_copy(a) else a
                    for i, a in enumerate(args))
    try:
        built = _build_for_numba(compiled, targets)
    except PyjladError as exc:
        raise TypingError(f"{_describe(derivative)} cannot be compiled for arguments ({', '.join(map(str, args))}): "
                          f"{exc}; {_accepts(derivative)}") from None
    if len(built.exported.argtypes) != len(targets):
        raise TypingError(f"{_describe(derivative)} called with {len(args)} argument(s); "
                          f"{built.exported.name} takes {len(built.exported.argtypes)}")
    return _CallPlan(args, targets, built, rev.wrt, compiled.func)


def _gradient_type(arg: types.Type) -> types.Type:
    if isinstance(arg, types.Array):
        return types.Array(arg.dtype, arg.ndim, "C")
    return types.float64


def _return_type(derivative: _ValueAndGrad, plan: _CallPlan) -> types.Type:
    grads = [_gradient_type(plan.targets[i]) for i in plan.wrt]
    if derivative._single:
        out: types.Type = grads[0]
    else:
        order = derivative._order or tuple(range(len(grads)))
        out = types.Tuple([grads[k] for k in order])
    if isinstance(derivative, _Grad):
        return out
    return types.Tuple([types.float64, out])


def _contiguous_copy(a: Any) -> Any:
    return a.copy()


def _zeros_like(a: Any) -> Any:
    return np.zeros(a.shape, a.dtype)


def _copy_into(view: Any, copy: Any) -> None:
    view[...] = copy


def _pass_arguments(context: Any, builder: Any, plan: _CallPlan, llargs: Any) -> tuple[list[Any], list[Any]]:
    """The arguments as the sweep takes them (arrays to differentiate made C-contiguous copies
    where they are not) and the copies, ``(index, copy's type, copy)``, to write back and release after the call."""
    values, copies = [], []
    for index, (value, have, want) in enumerate(zip(llargs, plan.argtypes, plan.targets)):
        if isinstance(have, types.Array) and have != want:
            value = context.compile_internal(builder, _contiguous_copy, signature(want, have), [value])
            copies.append((index, want, value))
        elif have != want:
            value = context.cast(builder, value, have, want)
        values.append(value)
    return values, copies


def _write_back(context: Any, builder: Any, plan: _CallPlan, llargs: Any, copies: list[Any]) -> None:
    """Write each copy of an array the function writes (:attr:`pyjlad.abi.ArrayArg.writes`) back into the
    caller's view, as a call of the function would have written it, then release every copy. Until 2026-12-06
    a derivative called from ``@njit`` code on a strided view (``df(b[::2])``, a column) lost the function's
    own writes into it, while the same call from Python kept them."""
    args = plan.built.exported.abi.args
    for index, copy_type, copy in copies:
        if index < len(args) and getattr(args[index], "writes", False):
            have = plan.argtypes[index]
            context.compile_internal(builder, _copy_into, signature(types.none, have, copy_type), [llargs[index], copy])
        context.nrt.decref(builder, copy_type, copy)


def _zeroed_shadows(context: Any, builder: Any, plan: _CallPlan, values: list[Any]) -> dict[int, Any]:
    """A new zeroed array (the gradient to be) for each array argument differentiated."""
    shadows = {}
    for index in plan.built.driver.shadow_args:
        target = plan.targets[index]
        shadows[index] = context.compile_internal(builder, _zeros_like, signature(target, target), [values[index]])
    return shadows


def _call_driver(context: Any, builder: Any, plan: _CallPlan, values: list[Any], shadows: dict[int, Any],
                 result_type: types.Type) -> tuple[Any, Any, Any, list[Any]]:
    """Call the driver, declared in the caller's module and linked in: ``(status, excinfo slot,
    value slot, adjoint slots)``. Its calling convention is :mod:`pyjlad.engines.driver`'s."""
    driver = plan.built.driver
    flat = list(context.get_arg_packer(plan.targets).as_arguments(builder, values))
    shadow_ptrs = [context.make_array(plan.targets[i])(context, builder, shadows[i]).data
                   for i in driver.shadow_args]
    value_ll = context.get_value_type(result_type)
    value_slot = cgutils.alloca_once_value(builder, value_ll(0.0))
    seed_slot = cgutils.alloca_once_value(builder, value_ll(1.0))
    excinfo = cgutils.alloca_once(builder, _excinfo_ptr_type())
    builder.store(cgutils.get_null_value(excinfo.type.pointee), excinfo)
    adjoint_slots = [cgutils.alloca_once(builder, context.get_value_type(plan.targets[i]))
                     for i in driver.active_scalars]
    call_args = [value_slot, seed_slot, excinfo, *adjoint_slots, *flat, *shadow_ptrs]
    fnty = ir.FunctionType(ir.IntType(32), [a.type for a in call_args])
    fn = cgutils.get_or_insert_function(builder.module, fnty, driver.symbol)
    context.add_linking_libs([plan.built.library])
    # Run when a caller compiled with cache=True is loaded by a new process: the linked
    # derivative's external symbols (pyjlad's runtime, the pool, BLAS) must resolve first.
    context.active_code_library._reload_init.add(functools.partial(resolve_symbols, plan.declared))
    # Not inlined in the copy pyjlad compiles to differentiate the caller (pyjlad.nested).
    attrs = ("noinline",) if keep_calls() else ()
    return builder.call(fn, call_args, attrs=attrs), excinfo, value_slot, adjoint_slots


def _results(context: Any, builder: Any, derivative: _ValueAndGrad, plan: _CallPlan, sig: Any,
             value: Any, adjoints: list[Any], shadows: dict[int, Any]) -> Any:
    """What the Python callable returns: the gradient(s) in ``wrt`` order, with the value for value_and_grad."""
    grads = dict(shadows)
    for index, adjoint in zip(plan.built.driver.active_scalars, adjoints):
        grads[index] = context.cast(builder, adjoint, plan.targets[index], types.float64)
    ordered = [grads[i] for i in plan.wrt]
    grad_type = sig.return_type if isinstance(derivative, _Grad) else sig.return_type.types[1]
    if derivative._single:
        out = ordered[0]
    else:
        order = derivative._order or tuple(range(len(ordered)))
        out = context.make_tuple(builder, grad_type, [ordered[k] for k in order])
    if isinstance(derivative, _Grad):
        return out
    return context.make_tuple(builder, sig.return_type, [value, out])


def _make_impl(derivative: _ValueAndGrad, plan: _CallPlan) -> Callable[..., Any]:
    """The lowering of a call with ``plan``'s argument types."""
    exported = plan.built.exported
    result_type = types.float32 if exported.abi.result.dtype == "float32" else types.float64

    def impl(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        values, copies = _pass_arguments(context, builder, plan, llargs)
        shadows = _zeroed_shadows(context, builder, plan, values)
        status, excinfo, value_slot, adjoint_slots = _call_driver(context, builder, plan, values, shadows,
                                                                  result_type)
        _write_back(context, builder, plan, llargs, copies)
        _raise_on_failure(context, builder, status, excinfo, exported.name,
                          rerun=(plan.func, plan.argtypes, list(llargs)),
                          release=[(plan.targets[i], shadow) for i, shadow in shadows.items()])
        value = context.cast(builder, builder.load(value_slot), result_type, types.float64)
        adjoints = [builder.load(slot) for slot in adjoint_slots]
        return _results(context, builder, derivative, plan, sig, value, adjoints, shadows)

    return impl


def _excinfo_ptr_type() -> ir.Type:
    from numba.core.callconv import excinfo_ptr_t

    return excinfo_ptr_t


def _raise_on_failure(context: Any, builder: Any, status: Any, excinfo: Any, name: str,
                      rerun: tuple[Any, tuple[types.Type, ...], list[Any]] | None = None,
                      release: list[tuple[types.Type, Any]] = ()) -> None:
    """Propagate an exception the differentiated function raised; ``MemoryError`` when the sweep ran out.

    ``release``: ``(type, value)`` of the arrays made for the call's results (the gradients to be), released before
    the exception propagates. Until 2026-12-06 a derivative called from ``@njit`` code that stopped at an
    exception lost its gradient arrays (8 bytes per element and a header per failed call; found by a user-style
    probe).

    With ``rerun`` (the function, its argument types, the call's values): the exception the function itself
    raises when called again with these arguments, as the Python path re-raises it
    (:func:`pyjlad.engines.base.reraise_from_function`). The sweep's own exception record is not read
    then: one Numba builds at run time (``raise ValueError("negative", x[i])``) holds a block the sweep
    allocated and the conversion function of the derivative's module, and propagated as it was it reached
    the caller garbled (``EOFError``, a crash or a hang; a constant message reached it intact)."""
    failed = builder.icmp_signed("!=", status, status.type(0))
    with cgutils.if_unlikely(builder, failed):
        for kind, value in release:
            context.nrt.decref(builder, kind, value)
        out_of_memory = builder.icmp_signed("==", status, status.type(OUT_OF_MEMORY))
        with builder.if_else(out_of_memory) as (oom, other):
            with oom:
                context.call_conv.return_user_exc(
                    builder, MemoryError,
                    (f"out of memory while differentiating {name}: an allocation of the sweep failed",))
            with other:
                if rerun is not None and _raise_from_function(context, builder, *rerun, name):
                    return
                result = context.call_conv._get_return_status(builder, status, builder.load(excinfo))
                context.call_conv.return_status_propagate(builder, result)


def _raise_from_function(context: Any, builder: Any, func: Any, argtypes: tuple[types.Type, ...],
                         values: list[Any], name: str) -> bool:
    """Emit a call of ``func`` (an ``@njit`` function) with ``values``, whose exception Numba propagates, then
    a ``RuntimeError`` for a call that returns; ``False`` (nothing emitted) where ``func`` is no dispatcher."""
    from numba.core.dispatcher import Dispatcher

    from ..export import as_numba_function

    func = as_numba_function(func)  # (the positional twin of a function with keyword-only parameters)
    if not isinstance(func, Dispatcher):
        return False
    fnty = context.typing_context.resolve_value_type(func)
    sig = fnty.get_call_type(context.typing_context, tuple(argtypes), {})
    result = context.get_function(fnty, sig)(builder, values)
    context.nrt.decref(builder, sig.return_type, result)
    context.call_conv.return_user_exc(
        builder, RuntimeError,
        (f"the derivative of {name} stopped at an exception, but {name} called again with the same arguments "
         "returned (does it draw random numbers, or write into an argument it reads?)",))
    return True
