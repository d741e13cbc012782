"""What both engines share: the sweep a transform asks for, activity resolution, shadows, re-raising.

This is the contract between the public API (:mod:`pyjlad.transforms`, :mod:`pyjlad.products`) and
an engine (:mod:`pyjlad.engines.embedded`, :mod:`pyjlad.engines.julia`): a transform describes one
:class:`Sweep`; the engine's ``compile(func, sweep)`` returns a callable ``(args, shadows, seed) ->
(value, result, adjoints)``; shadows are laid out like their primals (:func:`shadow_like`); an error
the differentiated function reports is re-raised by running the function itself
(:func:`reraise_from_function`). :class:`Engine` is the protocol both engines implement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..abi import ArrayArg
from ..errors import (
    ArgumentError,
    DifferentiatedFunctionError,
    UnsupportedFunctionError,
)
from ..export import ExportedFunction, as_numba_function, describe_function
from .driver import ACTIVITIES

__all__ = ["Engine", "ReverseGradient", "Sweep", "compact_overlapping", "overlaps_itself", "reraise_from_function",
           "check_result", "resolve_activities", "shadow_like"]


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

    def __init__(self, func: Any, wrt: tuple[int, ...], compile: Callable[[Any, Sweep], Any]) -> None:
        self.wrt = tuple(sorted(set(wrt)))
        activities = ["const"] * (max(self.wrt) + 1)
        for index in self.wrt:
            activities[index] = "diff"
        self._compiled = compile(func, Sweep("ad", "reverse", tuple(activities), scalar_result=True))

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




class Engine(Protocol):
    """What an engine provides (``pyjlad.engines.get_engine`` returns one)."""

    name: str

    def compile(self, func: Any, sweep: Sweep) -> Any:
        """A callable ``(args, shadows, seed) -> (value, result, adjoints)`` running ``sweep`` of ``func``."""

    def reverse(self, func: Any, wrt: tuple[int, ...]) -> ReverseGradient:
        """The reverse-mode value-and-gradient callable of ``func`` for the arguments ``wrt``."""

    def status(self) -> tuple[bool, str]:
        """Whether the engine can run here, with details or the fix."""
