"""What both engines share: activity resolution, the result check, re-raising, ``ReverseGradient``.

This is the contract between the public API (:mod:`pyjlad.transforms`, :mod:`pyjlad.products`) and
an engine (:mod:`pyjlad.engines.embedded`, :mod:`pyjlad.engines.julia`): a transform describes one
:class:`~pyjlad.sweep.Sweep`; the engine's ``compile(func, sweep)`` returns a callable ``(args, shadows,
seed) -> (value, result, adjoints)``; shadows are laid out like their primals (:func:`shadow_like`); the
requested activities become Enzyme's own for the argument types (:func:`resolve_activities`); an
error the differentiated function reports is re-raised by running the function itself
(:func:`reraise_from_function`). :class:`Engine` is the protocol both engines implement. The sweep and
shadow helpers live in :mod:`pyjlad.sweep` (below the engines) and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..abi import ArrayArg
from ..activity import Activity
from ..errors import DifferentiatedFunctionError, UnsupportedFunctionError
from ..export import ExportedFunction, as_numba_function, describe_function
from ..out_of_bounds import check_guards
from ..sweep import Sweep, compact_overlapping, overlaps_itself, shadow_like
from ..written_aliases import refuse_written_aliases

__all__ = ["Engine", "ReverseGradient", "Sweep", "compact_overlapping", "overlaps_itself", "reraise_from_function",
           "check_result", "resolve_activities", "shadow_like"]


def _refuse_constant(exported: ExportedFunction, index: int) -> None:
    arg = exported.abi.args[index]
    what = "an array of " + arg.dtype if isinstance(arg, ArrayArg) else arg.dtype
    raise UnsupportedFunctionError(
        f"argument {index} of {exported.name} is {what}, which is a constant "
        "(integers and bools have no derivative): pass it as a float (e.g. 2.0 or "
        "x.astype(np.float64)) or do not differentiate with respect to it"
    )


def resolve_activities(exported: ExportedFunction, sweep: Sweep) -> tuple[Activity, ...]:
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
        act = requested[index] if index < len(requested) else Activity.CONST
        if sweep.kind == "hvp" and index == sweep.wrt:
            act = Activity.DIFF
        if act is Activity.CONST:
            out.append(act)
            continue
        if not arg.differentiable:
            _refuse_constant(exported, index)
        is_array = isinstance(arg, ArrayArg)
        act = act.concrete_for(is_array, sweep.mode)
        if act is Activity.ACTIVE and (is_array or sweep.mode == "forward"):
            raise UnsupportedFunctionError(
                f"argument {index} of {exported.name}: Active applies to float scalars in reverse "
                "mode; use Duplicated for arrays and for forward-mode tangents"
            )
        if act.shadowed and not is_array and sweep.mode == "reverse":
            raise UnsupportedFunctionError(
                f"argument {index} of {exported.name} is a float scalar, passed by value: in "
                "reverse mode mark it Active (its adjoint is returned), not Duplicated"
            )
        out.append(act)
    return tuple(out)


def check_result(exported: ExportedFunction, sweep: Sweep) -> None:
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
    (in increasing argument order); ``value`` is ``None`` where ``value=False`` (see :attr:`Sweep.value`).
    """

    def __init__(self, func: Any, wrt: tuple[int, ...], compile: Callable[[Any, Sweep], Any],
                 value: bool = True) -> None:
        self.wrt = tuple(sorted(set(wrt)))
        activities = [Activity.CONST] * (max(self.wrt) + 1)
        for index in self.wrt:
            activities[index] = Activity.DIFF
        self._value = value
        self._func = func
        self._compiled = compile(func, Sweep("ad", "reverse", tuple(activities), scalar_result=True, value=value))

    def __call__(self, *args: Any) -> tuple[Any, tuple[Any, ...]]:
        wrt = self.wrt
        nargs = len(args)
        if wrt[-1] >= nargs:
            raise UnsupportedFunctionError(
                f"wrt={wrt[-1]} is out of range for a call with {nargs} argument(s)"
            )
        if not any(isinstance(args[index], np.ndarray) for index in wrt):
            # Scalars only (the per-call fast path): adjoints come back in wrt order.
            if nargs > len(wrt):  # constant arguments, maybe arrays (pyjlad.written_aliases)
                refuse_written_aliases(self._func, args, "gradient")
            value, _, adjoints = self._compiled(args, (), 1.0)
            return float(value) if self._value else None, tuple(map(float, adjoints))
        refuse_written_aliases(self._func, args, "gradient")
        args = compact_overlapping(args, wrt)
        shadows = []
        views = []
        indices = []
        for index in wrt:
            arg = args[index]
            if isinstance(arg, np.ndarray):
                shadow, is_view = shadow_like(arg)
                shadows.append(shadow)
                views.append(is_view)
                indices.append(index)
        value, _, adjoints = self._compiled(args, tuple(shadows), 1.0)
        check_guards(self._func, args, zip(indices, shadows))
        grads: list[Any] = []
        adjoint_iter = iter(adjoints)
        shadow_iter = iter(zip(shadows, views))
        for index in wrt:
            if isinstance(args[index], np.ndarray):
                shadow, is_view = next(shadow_iter)
                grads.append(np.array(shadow) if is_view else shadow)
            else:
                grads.append(float(next(adjoint_iter)))
        return float(value) if self._value else None, tuple(grads)


class Engine(Protocol):
    """What an engine provides (``pyjlad.engines.get_engine`` returns one)."""

    name: str

    def compile(self, func: Any, sweep: Sweep) -> Any:
        """A callable ``(args, shadows, seed) -> (value, result, adjoints)`` running ``sweep`` of ``func``."""

    def reverse(self, func: Any, wrt: tuple[int, ...], value: bool = True) -> ReverseGradient:
        """The reverse-mode value-and-gradient callable of ``func`` for the arguments ``wrt``
        (``value=False``: the caller discards the value, see :attr:`Sweep.value`)."""

    def status(self) -> tuple[bool, str]:
        """Whether the engine can run here, with details or the fix."""
