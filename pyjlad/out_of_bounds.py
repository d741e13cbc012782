"""The error a derivative that wrote into a guard zone of a shadow raises (:mod:`pyjlad.shadow_guards`).

:func:`check_guards` runs after a reverse sweep (``grad``, ``value_and_grad``, ``vjp``, ``hvp``) with the
shadows pyjlad made; where a zone was written it raises :class:`~pyjlad.errors.OutOfBoundsError` naming the
argument (position, name in the ``def``, shape), after running the function once more, compiled with
``boundscheck=True``, on copies of the arguments, so that the message quotes Numba's ``IndexError`` (or says
that none was raised: then the write would be pyjlad's defect).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import numpy as np

from .errors import OutOfBoundsError
from .export_compile import copy_options, describe_function, python_function
from .shadow_guards import overran

__all__ = ["check_guards"]


def check_guards(func: Any, args: tuple[Any, ...], shadows: Iterable[tuple[int, np.ndarray]], *,
                 rerun: bool = True) -> None:
    """Raise :class:`~pyjlad.errors.OutOfBoundsError` if the sweep of ``func`` on ``args`` wrote into a guard
    zone of one of ``shadows`` (pairs of argument index and shadow). ``rerun=False``: ``args`` are not what
    the sweep ran ``func`` on (a checkpointed loop's steps), so no bounds-checked run is quoted."""
    for index, shadow in shadows:
        if overran(shadow):
            raise OutOfBoundsError(_message(func, args, index, rerun))


def _argument(func: Any, args: tuple[Any, ...], index: int) -> str:
    """``argument 1 (x, shape (3, 4))``: the argument's position, name in the ``def`` and shape."""
    try:
        names = list(inspect.signature(python_function(func)).parameters)
    except (TypeError, ValueError):
        names = []
    details = [names[index]] if index < len(names) else []
    if isinstance(args[index], np.ndarray):
        details.append(f"shape {args[index].shape}")
    return f"argument {index} ({', '.join(details)})" if details else f"argument {index}"


def _bounds_checked_error(func: Any, args: tuple[Any, ...]) -> str | None:
    """Numba's ``IndexError`` from ``func`` compiled with ``boundscheck=True`` and run on copies of ``args``,
    or ``None`` where it raises none (or cannot be compiled so)."""
    import numba
    from numba.core.registry import CPUDispatcher

    if not isinstance(func, CPUDispatcher):
        return None
    checked = numba.njit(**{**copy_options(func, ("nopython",)), "boundscheck": True})(func.py_func)
    try:
        checked(*(np.array(a, copy=True, order="K") if isinstance(a, np.ndarray) else a for a in args))
    except IndexError as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - only a hint for the message: any other failure leaves it out
        return None
    return None


def _message(func: Any, args: tuple[Any, ...], index: int, rerun: bool) -> str:
    name = describe_function(func)
    checked = _bounds_checked_error(func, args) if rerun else None
    found = ("" if not rerun else
             f"Compiled with boundscheck=True and run on copies of the arguments, {name} raises IndexError: "
             f"{checked}. " if checked is not None else
             f"Compiled with boundscheck=True, {name} raises no IndexError on these arguments, so the write may "
             "be a defect of pyjlad's: please report it with the function. ")
    return (f"{name} reads its {_argument(func, args, index)} outside its elements (such as x[i + 1] at the "
            "last i): its derivative added into the memory next to that argument's derivative, and its own "
            f"value is undefined (Numba reads whatever memory lies there). {found}Numba checks indices only "
            "when asked: with @njit(boundscheck=True), or NUMBA_BOUNDSCHECK=1 set, the read raises IndexError.")
