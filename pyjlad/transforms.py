"""The public transforms: ``gradient``, ``value_and_gradient``, ``grad``, ``value_and_grad``.

Modelled on JAX: ``grad(f)`` returns a plain callable, and ``f`` itself is left
untouched. ``wrt`` names the argument(s) to differentiate: an ``int`` gives one
gradient, a tuple of ``int`` gives a tuple of gradients in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .engines import default_engine_name, get_engine
from .errors import ArgumentTypeError, UnsupportedFunctionError
from .memo import cached_for

__all__ = ["gradient", "value_and_gradient", "grad", "value_and_grad"]

Wrt = int | tuple[int, ...]
_MAX_ARGUMENTS = 1 << 16  # far beyond any real signature; bounds the per-argument bookkeeping

def _normalize_wrt(wrt: Wrt) -> tuple[tuple[int, ...], bool]:
    """Return (sorted unique indices, whether a single int was given)."""
    single = isinstance(wrt, int) and not isinstance(wrt, bool)
    items = (wrt,) if single else wrt
    if not isinstance(items, tuple) or not items:
        raise ArgumentTypeError(f"wrt must be an int or a non-empty tuple of ints, got {wrt!r}")
    for index in items:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ArgumentTypeError(f"wrt must contain argument positions (ints), got {index!r}")
        if index < 0:
            raise UnsupportedFunctionError(f"wrt must be non-negative argument positions, got {index}")
        if index > _MAX_ARGUMENTS:
            raise UnsupportedFunctionError(f"wrt={index} is out of range: no function takes that many arguments")
    return tuple(sorted(set(items))), single


def _reverse(f: Callable[..., Any], wrt: tuple[int, ...], engine: str | None) -> Any:
    """The cached reverse-mode value-and-gradient callable of ``f``."""
    name = engine or default_engine_name()
    return cached_for(f, ("gradient", wrt, name), lambda: get_engine(name).reverse(f, wrt))


_NAMES = {"_ValueAndGrad": "value_and_grad", "_Grad": "grad"}


class _ValueAndGrad:
    """Callable returned by :func:`value_and_grad` (and used by :func:`grad`)."""

    __slots__ = ("_rev", "_order", "_single", "__wrapped__", "_spec")

    def __init__(self, f: Callable[..., Any], wrt: Wrt, engine: str | None) -> None:
        self._spec = (f, wrt, engine)
        unique, single = _normalize_wrt(wrt)
        requested = (wrt,) if single else wrt
        self._rev = _reverse(f, unique, engine)
        self._order = None if requested == unique else tuple(unique.index(i) for i in requested)
        self._single = single
        self.__wrapped__ = f

    def __reduce__(self):
        # Pickled as "this transform of this function": the receiving process
        # rebuilds it (Numba pickles dispatchers; the disk cache spares Enzyme).
        return (type(self), self._spec)

    def __repr__(self) -> str:
        f, wrt, _ = self._spec
        return f"<pyjlad.{_NAMES[type(self).__name__]} of {getattr(f, '__name__', f)!s}, wrt={wrt!r}>"

    def _ordered(self, grads: tuple[Any, ...]) -> Any:
        """The gradients in the order ``wrt`` named them; a position named twice gets its own copy."""
        if self._single:
            return grads[0]
        if self._order is None:
            return grads
        seen: set[int] = set()
        out = []
        for k in self._order:
            out.append(grads[k].copy() if k in seen and hasattr(grads[k], "copy") else grads[k])
            seen.add(k)
        return tuple(out)

    def __call__(self, *args: Any) -> tuple[float, Any]:
        value, grads = self._rev(*args)
        return value, self._ordered(grads)


class _Grad(_ValueAndGrad):
    """Callable returned by :func:`grad`."""

    __slots__ = ()

    def __call__(self, *args: Any) -> Any:
        return self._ordered(self._rev(*args)[1])


def value_and_grad(f: Callable[..., Any], wrt: Wrt = 0, *, engine: str | None = None) -> Callable[..., Any]:
    """Return a function computing ``(f(*args), gradient)`` in one reverse sweep.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` dispatcher, ``@numba.cfunc`` or plain Python function
        (compiled with ``numba.njit``) returning a real scalar.
    wrt : int or tuple of int
        Argument position(s) to differentiate.
    engine : str, optional
        Engine name (default ``$PYJLAD_ENGINE`` or ``"embedded"``).

    Returns
    -------
    callable
        ``vg(*args) -> (value, gradient)``; usable as ``scipy.optimize.minimize(vg, x0, jac=True)``.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> vg = pyjlad.value_and_grad(lambda x: np.sum(x * x))
    >>> value, g = vg(np.array([1.0, 2.0]))
    >>> value, g.tolist()
    (5.0, [2.0, 4.0])
    """
    return _ValueAndGrad(f, wrt, engine)


def grad(f: Callable[..., Any], wrt: Wrt = 0, *, engine: str | None = None) -> Callable[..., Any]:
    """Return a function computing the gradient of ``f``.

    The returned callable is the fast path: compiled gradients are kept per
    argument types, so calls after the first do no compilation.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` dispatcher, ``@numba.cfunc`` or plain Python function
        returning a real scalar.
    wrt : int or tuple of int
        Argument position(s) to differentiate.
    engine : str, optional
        Engine name.

    Returns
    -------
    callable
        ``df(*args)``: a float for a float argument, an ndarray of the
        argument's shape and dtype for an array argument; a tuple of those if
        ``wrt`` is a tuple.

    Examples
    --------
    >>> import math, pyjlad
    >>> df = pyjlad.grad(lambda x, y: math.sin(x) * y, wrt=(0, 1))
    >>> df(0.0, 2.0)
    (2.0, 0.0)
    """
    return _Grad(f, wrt, engine)


def gradient(f: Callable[..., Any], *args: Any, wrt: Wrt = 0, engine: str | None = None) -> Any:
    """Gradient of the scalar function ``f`` at ``args``.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` dispatcher, ``@numba.cfunc`` or plain Python function
        returning a real scalar.
    *args
        Arguments to ``f``: floats, ints, bools and NumPy arrays (1-3
        dimensions, float64/float32 to differentiate; any strides). Inputs are
        never modified by pyjlad.
    wrt : int or tuple of int
        Argument position(s) to differentiate (integers and bools are constants
        and cannot be named).
    engine : str, optional
        Engine name.

    Returns
    -------
    float or ndarray or tuple
        As :func:`grad`.

    Raises
    ------
    TypeError
        If ``wrt`` names an integer/bool argument, an argument has an
        unsupported type, ``f`` does not return a real scalar, or Numba cannot
        compile ``f`` (the message says what to change).

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> @njit
    ... def f(x):
    ...     s = 0.0
    ...     for i in range(x.shape[0]):
    ...         s += x[i] ** 3
    ...     return s
    >>> pyjlad.gradient(f, np.array([1.0, 2.0])).tolist()
    [3.0, 12.0]
    """
    return _Grad(f, wrt, engine)(*args)


def value_and_gradient(f: Callable[..., Any], *args: Any, wrt: Wrt = 0, engine: str | None = None) -> tuple[float, Any]:
    """``(f(*args), gradient(f, *args, wrt=wrt))`` computed in one reverse sweep.

    Examples
    --------
    >>> import pyjlad
    >>> pyjlad.value_and_gradient(lambda a, b: a * b, 2.0, 3.0, wrt=(0, 1))
    (6.0, (3.0, 2.0))
    """
    return _ValueAndGrad(f, wrt, engine)(*args)
