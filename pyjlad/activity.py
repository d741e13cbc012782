"""Enzyme's own vocabulary: modes, activity annotations and ``autodiff``.

For users who think in Enzyme's terms, ``pyjlad.autodiff`` mirrors Enzyme.jl's
``autodiff``. Each argument is wrapped in an annotation that maps one-to-one
onto Enzyme's activity markers:

=========================  ===================  ==============================================
pyjlad                     Enzyme (LLVM)        meaning
=========================  ===================  ==============================================
``Const(x)`` or bare ``x``  ``enzyme_const``     not differentiated
``Active(x)``              ``enzyme_out``        reverse mode, float scalar: its adjoint is returned
``Duplicated(x, dx)``      ``enzyme_dup``        array: ``dx`` is shadow memory; reverse mode
                                                 *accumulates* adjoints into it (``dx += ...``),
                                                 forward mode *writes* tangents of what ``f``
                                                 writes; forward-mode float scalar: ``dx`` is
                                                 its tangent
``DuplicatedNoNeed(x, dx)`` ``enzyme_dupnoneed``  as ``Duplicated``; ``x``'s primal output is
                                                 not needed
=========================  ===================  ==============================================

The result of ``f`` is differentiated when it is a float (reverse mode seeds it
with 1; forward mode returns its tangent); a function returning nothing is
seeded, and reports tangents, through its ``Duplicated`` arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .engines.base import Sweep, overlaps_itself, shadow_like
from .errors import ArgumentError, ArgumentTypeError
from .export import numba_argtypes, result_type
from .products import compiled_sweep

__all__ = ["Reverse", "Forward", "Const", "Active", "Duplicated", "DuplicatedNoNeed", "autodiff", "Mode"]


@dataclass(frozen=True)
class Mode:
    """A differentiation mode: :data:`Reverse` or :data:`Forward`."""

    name: str

    def __repr__(self) -> str:
        return self.name.capitalize()


#: Reverse mode (``__enzyme_autodiff``).
Reverse = Mode("reverse")
#: Forward mode (``__enzyme_fwddiff``).
Forward = Mode("forward")


@dataclass(frozen=True)
class Const:
    """An argument that is not differentiated (``enzyme_const``)."""

    val: Any


@dataclass(frozen=True)
class Active:
    """A float scalar whose adjoint reverse mode returns (``enzyme_out``)."""

    val: Any


@dataclass(frozen=True)
class Duplicated:
    """An argument with its shadow ``dval`` (``enzyme_dup``).

    For an array, ``dval`` is an array of the same shape and dtype, updated in
    place; for a float scalar in forward mode, ``dval`` is its tangent.
    """

    val: Any
    dval: Any


@dataclass(frozen=True)
class DuplicatedNoNeed(Duplicated):
    """As :class:`Duplicated`, telling Enzyme the primal output is not needed (``enzyme_dupnoneed``)."""


def autodiff(mode: Mode | str, f: Any, *args: Any, engine: str | None = None) -> tuple[Any, Any]:
    """Differentiate ``f`` once, with Enzyme's activities.

    Parameters
    ----------
    mode : Mode or str
        :data:`Reverse` / ``"reverse"`` or :data:`Forward` / ``"forward"``.
    f : callable
        A ``@numba.njit`` function, ``@numba.cfunc`` or plain Python function
        returning a float or nothing.
    *args
        Arguments, each bare (constant) or wrapped in :class:`Const`,
        :class:`Active`, :class:`Duplicated` or :class:`DuplicatedNoNeed`.

    Returns
    -------
    Reverse: ``(derivatives, value)``
        One entry per argument: the adjoint (a float) for :class:`Active`
        arguments, ``None`` for the others (whose shadows were updated in
        place); and ``f``'s result (``None`` if it returns nothing).
    Forward: ``(tangent, value)``
        The tangent of ``f``'s float result (``None`` if it returns nothing;
        tangents of written arrays are in their shadows) and ``f``'s result.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from pyjlad import Active, Duplicated, Reverse, Forward
    >>> x, dx = np.array([1.0, 2.0]), np.zeros(2)
    >>> pyjlad.autodiff(Reverse, lambda x, c: c * np.sum(x * x), Duplicated(x, dx), Active(3.0))
    ((None, 5.0), 15.0)
    >>> dx.tolist()
    [6.0, 12.0]
    >>> pyjlad.autodiff(Forward, lambda a: a ** 3, Duplicated(2.0, 1.0))
    (12.0, 8.0)
    """
    name = mode.name if isinstance(mode, Mode) else str(mode)
    if name not in ("reverse", "forward"):
        raise ArgumentError(f"mode must be pyjlad.Reverse or pyjlad.Forward, got {mode!r}")
    primals, activities, shadows, write_back = [], [], [], []
    for index, arg in enumerate(args):
        if isinstance(arg, Active):
            if not isinstance(arg.val, (float, np.floating)):
                raise ArgumentTypeError(
                    f"argument {index}: Active wraps a float scalar; use Duplicated(x, dx) for arrays"
                )
            activities.append("active")
            primals.append(arg.val)
        elif isinstance(arg, Duplicated):
            activities.append("dupnoneed" if isinstance(arg, DuplicatedNoNeed) else "dup")
            primals.append(arg.val)
            shadows.append(_shadow_for(index, arg, write_back))
        else:
            activities.append("const")
            primals.append(arg.val if isinstance(arg, Const) else arg)
    primals_t = tuple(primals)
    returns_none = result_type(f, numba_argtypes(primals_t)).__class__.__name__ == "NoneType"
    compiled = compiled_sweep(f, Sweep("ad", name, tuple(activities)), engine)
    value, tangent, adjoints = compiled(primals_t, tuple(shadows), 1.0)
    for target, shadow in write_back:
        target[...] = shadow
    result = None if returns_none else float(value)
    if name == "forward":
        return (None if returns_none else float(tangent)), result
    adjoint_iter = iter(adjoints)
    derivs = tuple(float(next(adjoint_iter)) if a == "active" else None for a in activities)
    return derivs, result


def _shadow_for(index: int, arg: Duplicated, write_back: list) -> Any:
    x, dx = arg.val, arg.dval
    if not isinstance(x, np.ndarray):
        if np.ndim(dx) != 0:
            raise ArgumentError(f"argument {index}: the tangent of a scalar must be a scalar")
        return float(dx)
    if not isinstance(dx, np.ndarray) or dx.shape != x.shape or dx.dtype != x.dtype:
        raise ArgumentError(
            f"argument {index}: the shadow must be an ndarray of shape {x.shape} and dtype {x.dtype}, "
            f"like the argument; got {type(dx).__name__}"
            f"{f' of shape {dx.shape} and dtype {dx.dtype}' if isinstance(dx, np.ndarray) else ''}"
        )
    if overlaps_itself(x):
        raise ArgumentError(
            f"argument {index}: elements of the array share memory (zero strides, as from np.broadcast_to); "
            "Enzyme would add all their derivatives into one shadow element: pass np.ascontiguousarray(x)"
        )
    if np.shares_memory(x, dx):
        raise ArgumentError(
            f"argument {index}: the shadow shares memory with the argument itself; Enzyme writes "
            "derivatives into the shadow, which would overwrite the argument: pass a separate array "
            "(e.g. Duplicated(x, np.zeros_like(x)))"
        )
    if dx.strides == x.strides and dx.flags.writeable:
        return dx
    shadow, _ = shadow_like(x, dx)
    write_back.append((dx, shadow))
    return shadow
