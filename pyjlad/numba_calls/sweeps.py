"""One Enzyme sweep called from ``@njit`` code: the primitive the callable products are written with.

A :class:`RawSweep` wraps one compiled sweep (:func:`pyjlad.engines.compiled_sweep`
with the embedded engine: a reverse or forward sweep, or a Hessian-vector
product) of a Numba function. Referenced as a global from generated ``@njit``
code, ``raw((a0, a1, ...), (s0, s1, ...), seed)`` builds the sweep for the
argument types Numba inferred, declares its driver in the caller's module,
links its library into the caller (so LLVM may inline it) and calls it:

- ``args``: the function's arguments; arrays C-contiguous and writable (the
  generated code copies those that are not);
- ``shadows``: one per entry of the driver's ``shadow_args``, in that order:
  a C-contiguous array (its shadow, read or written in place) for an array,
  the tangent value for a forward-mode scalar;
- ``seed``: the result's cotangent (reverse) or ignored (forward);

and returns ``(value, dret, adjoints)``: the result as float64, the output
tangent (forward; the seed otherwise) as float64, and a tuple of the adjoints
of the scalar arguments the sweep makes ``ACTIVE`` (the driver's
``active_scalars``), each as its argument's type. An exception raised by the
function is raised in the caller, as a Numba function raises it.
"""

from __future__ import annotations

import functools
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.core.typing import signature
from numba.extending import models, register_model, typeof_impl

from ..errors import PyjladError
from ..export import describe_function
from ..memo import cached_for
from .derivatives import _build_for_numba, _declared, _excinfo_ptr_type, _raise_on_failure, resolve_symbols
from .planned import Plan, PlannedCallable

__all__ = ["RawSweep", "RawSweepType", "raw_sweep"]


class RawSweep:
    """One compiled sweep (``compiled``, an embedded engine's ``Compiled``) callable from ``@njit`` code."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __repr__(self) -> str:
        sweep = self.compiled.sweep
        return f"RawSweep({describe_function(self.compiled.func)}, {sweep.kind}/{sweep.mode})"


def raw_sweep(func: Any, sweep: Any) -> RawSweep:
    """The :class:`RawSweep` of ``sweep`` of the Numba function ``func`` (one per function and sweep)."""
    from ..engines import compiled_sweep

    compiled = compiled_sweep(func, sweep, "embedded")
    return cached_for(compiled, ("raw-sweep",), lambda: RawSweep(compiled))


class RawSweepType(PlannedCallable):
    """The Numba type of one :class:`RawSweep`."""

    def __init__(self, raw: RawSweep) -> None:
        self.raw = raw
        super().__init__(name=f"{raw!r}<{id(raw):x}>")

    @property
    def key(self) -> Any:
        return self.raw

    def make_plan(self, context: Any, args: tuple[types.Type, ...]) -> Plan:
        """Build the sweep for ``args``: the call's signature and lowering."""
        built, sig = _plan(self.raw, args)
        return sig, _make_impl(built, sig, self.raw.compiled.func), built


@typeof_impl.register(RawSweep)
def _typeof_raw(value: RawSweep, c: Any) -> RawSweepType:
    return cached_for(value, ("numba-type",), lambda: RawSweepType(value))


register_model(RawSweepType)(models.OpaqueModel)


def _plan(raw: RawSweep, args: tuple[types.Type, ...]) -> tuple[Any, Any]:
    """Build the sweep for ``args`` = ``(args tuple, shadows tuple, seed)``; the call's signature."""
    if len(args) != 3 or not all(isinstance(a, types.BaseTuple) for a in args[:2]):
        raise TypingError(f"{raw!r} takes (args tuple, shadows tuple, seed)")
    targets = tuple(args[0])
    for index, arg in enumerate(targets):
        if isinstance(arg, types.Array) and (arg.layout != "C" or not arg.mutable):
            raise TypingError(f"{raw!r}: argument {index} ({arg}) must be a C-contiguous writable array")
    try:
        built = _build_for_numba(raw.compiled, targets)
    except PyjladError as exc:
        raise TypingError(f"{describe_function(raw.compiled.func)} cannot be differentiated for arguments "
                          f"({', '.join(map(str, targets))}): {exc}") from None
    driver = built.driver
    shadows = tuple(args[1])
    if len(shadows) != len(driver.shadow_args):
        raise TypingError(f"{raw!r} takes {len(driver.shadow_args)} shadow(s), got {len(shadows)}")
    for shadow, index in zip(shadows, driver.shadow_args):
        if raw.compiled.sweep.kind == "ad" and isinstance(targets[index], types.Array) != isinstance(shadow, types.Array):
            raise TypingError(f"{raw!r}: the shadow of argument {index} is {shadow}; the argument is {targets[index]}")
    adjoints = types.Tuple([built.exported.argtypes[i] for i in driver.active_scalars])
    sig = signature(types.Tuple([types.float64, types.float64, adjoints]), *args)
    return built, sig


def _shadow_values(context: Any, builder: Any, built: Any, shadow_types: tuple[types.Type, ...],
                   shadows: list[Any]) -> list[Any]:
    """The shadows as the driver takes them: an array's data pointer, a scalar tangent as its argument's type."""
    out = []
    for value, shadow_type, index in zip(shadows, shadow_types, built.driver.shadow_args):
        if isinstance(shadow_type, types.Array):
            out.append(context.make_array(shadow_type)(context, builder, value).data)
        else:
            out.append(context.cast(builder, value, shadow_type, built.exported.argtypes[index]))
    return out


def _make_impl(built: Any, sig: Any, func: Any) -> Any:
    """The lowering of one call: the driver declared in the caller's module, its library linked in."""
    exported, driver = built.exported, built.driver
    result_type = types.float32 if exported.abi.result.dtype == "float32" else types.float64
    arg_types, shadow_types, seed_type = sig.args
    declared = _declared(built.library)

    def impl(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        values = cgutils.unpack_tuple(builder, llargs[0], len(arg_types))
        flat = list(context.get_arg_packer(tuple(arg_types)).as_arguments(builder, values))
        shadows = _shadow_values(context, builder, built, tuple(shadow_types),
                                 cgutils.unpack_tuple(builder, llargs[1], len(shadow_types)))
        value_ll = context.get_value_type(result_type)
        value_slot = cgutils.alloca_once_value(builder, value_ll(0.0))
        seed = context.cast(builder, llargs[2], seed_type, result_type)
        dret_slot = cgutils.alloca_once_value(builder, seed)
        excinfo = cgutils.alloca_once(builder, _excinfo_ptr_type())
        builder.store(cgutils.get_null_value(excinfo.type.pointee), excinfo)
        adjoint_types = [exported.argtypes[i] for i in driver.active_scalars]
        adjoint_slots = [cgutils.alloca_once(builder, context.get_value_type(t)) for t in adjoint_types]
        call_args = [value_slot, dret_slot, excinfo, *adjoint_slots, *flat, *shadows]
        fnty = ir.FunctionType(ir.IntType(32), [a.type for a in call_args])
        fn = cgutils.get_or_insert_function(builder.module, fnty, driver.symbol)
        context.add_linking_libs([built.library])
        context.active_code_library._reload_init.add(functools.partial(resolve_symbols, declared))
        status = builder.call(fn, call_args)
        _raise_on_failure(context, builder, status, excinfo, exported.name,
                          rerun=(func, tuple(arg_types), values))
        value = context.cast(builder, builder.load(value_slot), result_type, types.float64)
        dret = context.cast(builder, builder.load(dret_slot), result_type, types.float64)
        adjoints = context.make_tuple(builder, sig.return_type.types[2], [builder.load(s) for s in adjoint_slots])
        return context.make_tuple(builder, sig.return_type, [value, dret, adjoints])

    return impl
