"""``autodiff``: one sweep of Enzyme, each argument annotated with its activity.

For users who think in Enzyme's terms, ``pyjlad.autodiff`` mirrors Enzyme.jl's ``autodiff``; the
annotations (:class:`~pyjlad.activity.Const`, :class:`~pyjlad.activity.Active`,
:class:`~pyjlad.activity.Duplicated`, :class:`~pyjlad.activity.DuplicatedNoNeed`) and what they mean
are in :mod:`pyjlad.activity`. (Not a module named ``autodiff``: the package's ``autodiff`` attribute
is the function.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .activity import MODES, Active, Activity, Const, Duplicated, Mode
from .engines import compiled_sweep
from .errors import ArgumentError, ArgumentTypeError
from .export import numba_argtypes, result_type
from .sweep import Sweep, overlaps_itself, shadow_like

__all__ = ["autodiff"]


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
    if name not in MODES:
        raise ArgumentError(f"mode must be pyjlad.Reverse or pyjlad.Forward, got {mode!r}")
    primals, activities, shadows, write_back = [], [], [], []
    for index, arg in enumerate(args):
        activity = Activity.of(arg)
        if activity is Activity.ACTIVE and not isinstance(arg.val, (float, np.floating)):
            raise ArgumentTypeError(
                f"argument {index}: Active wraps a float scalar; use Duplicated(x, dx) for arrays"
            )
        activities.append(activity)
        primals.append(arg.val if isinstance(arg, (Const, Active, Duplicated)) else arg)
        if activity.shadowed:
            shadows.append(_shadow_for(index, arg, write_back))
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
    derivs = tuple(float(next(adjoint_iter)) if a is Activity.ACTIVE else None for a in activities)
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
    if not dx.flags.writeable:
        raise ArgumentError(
            f"argument {index}: the shadow is read-only (writeable=False); Enzyme adds derivatives into it (reverse "
            "mode) or writes the tangent there (forward): pass a writable array, e.g. np.zeros_like(x)"
        )
    if dx.strides == x.strides:
        return dx
    shadow, _ = shadow_like(x, dx)
    write_back.append((dx, shadow))
    return shadow
