"""The public transforms: ``gradient``, ``value_and_gradient``, ``grad``, ``value_and_grad``.

Modelled on JAX: ``grad(f)`` returns a plain callable, and ``f`` itself is left
untouched. ``wrt`` names the argument(s) to differentiate: an ``int`` gives one
gradient, a tuple of ``int`` gives a tuple of gradients in the same order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from numba.core.errors import TypingError
from numba.extending import typeof_impl

from .engines import default_engine_name, get_engine
from .errors import ArgumentTypeError, PyjladError, UnsupportedFunctionError
from .export import as_numba_function, describe_function, numba_argtypes, result_type
from .export_compile import python_function
from .memo import cached_for
from .pytrees import (
    CONTAINERS as _CONTAINERS,
)
from .pytrees import (
    check_aux_result,
    differentiated_leaves,
    flatten_call,
    flattened_function,
    has_container,
    resolve_wrt,
)

__all__ = ["gradient", "value_and_gradient", "grad", "value_and_grad"]

Wrt = int | tuple[int, ...]
_MAX_ARGUMENTS = 1 << 16  # far beyond any real signature; bounds the per-argument bookkeeping


def _choose_wrt(wrt: Wrt | None, argnums: Wrt | None) -> Wrt:
    """``wrt``, or its JAX name ``argnums``; position 0 if neither is given."""
    if wrt is not None and argnums is not None:
        raise ArgumentTypeError(
            f"give wrt or argnums (JAX's name for the same thing), not both: got wrt={wrt!r} and argnums={argnums!r}"
        )
    chosen = argnums if argnums is not None else wrt
    return 0 if chosen is None else chosen


def _normalize_wrt(wrt: Wrt) -> tuple[tuple[int, ...], bool]:
    """Return (the positions as given, whether a single int was given); negative ones count from the end."""
    single = isinstance(wrt, int) and not isinstance(wrt, bool)
    items = (wrt,) if single else wrt
    if not isinstance(items, tuple) or not items:
        raise ArgumentTypeError(f"wrt must be an int or a non-empty tuple of ints, got {wrt!r}")
    for index in items:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ArgumentTypeError(f"wrt must contain argument positions (ints), got {index!r}")
        if not -_MAX_ARGUMENTS <= index <= _MAX_ARGUMENTS:
            raise UnsupportedFunctionError(f"wrt={index} is out of range: no function takes that many arguments")
    return items, single


def _reverse(f: Callable[..., Any], wrt: tuple[int, ...], engine: str | None, value: bool = True) -> Any:
    """The cached reverse-mode value-and-gradient callable of ``f`` (``value=False``: its value is ``None``,
    and Enzyme may leave out what only computes it)."""
    name = engine or default_engine_name()
    key = ("gradient", wrt, name) if value else ("gradient", wrt, name, "no value")
    return cached_for(f, key, lambda: get_engine(name).reverse(f, wrt, value))


_NAMES = {"_ValueAndGrad": "value_and_grad", "_Grad": "grad", "_ValueAndGradArgs": "value_and_grad",
          "_GradArgs": "grad"}


def _parameter_count(f: Any) -> int:
    """How many positional parameters ``f``'s Python function has; -1 if unknown or ``*args``
    (then every plain call is taken to give them all)."""
    try:  # (a function with keyword-only parameters: of the twin pyjlad differentiates, see as_numba_function)
        py = python_function(as_numba_function(f))
    except PyjladError:
        py = python_function(f)
    try:
        params = inspect.signature(py).parameters.values()
    except (TypeError, ValueError):
        return -1
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return -1
    return len(params)


def _copy_leaf(value: Any) -> Any:
    return value.copy() if isinstance(value, np.ndarray) else value


class _ValueAndGrad:
    """Callable returned by :func:`value_and_grad` (and used by :func:`grad`).

    A call with plain arguments (floats, ints, bools, arrays) and ``wrt`` of non-negative positions goes
    straight to the compiled sweep (``_rev``); tuples, NamedTuples and keyword arguments are flattened
    first (:mod:`pyjlad.pytrees`).
    """

    __slots__ = ("_rev", "_order", "_single", "__wrapped__", "_spec", "_requested", "_has_aux", "_nparams",
                 "_plain")
    #: Whether the caller gets the function's value (``grad`` does not: see ``pyjlad.sweep.Sweep.value``).
    _WANTS_VALUE = True

    def __init__(self, f: Callable[..., Any], wrt: Wrt, engine: str | None, has_aux: bool = False) -> None:
        self._spec = (f, wrt, engine)
        requested, single = _normalize_wrt(wrt)
        if not isinstance(has_aux, bool):
            raise ArgumentTypeError(f"has_aux must be True or False, got {has_aux!r}")
        self._requested = requested
        self._single = single
        self._has_aux = has_aux
        self._order = None
        self._nparams = _parameter_count(f)
        # Whether calls with plain arguments go straight to one compiled sweep (``_rev``).
        self._plain = not has_aux and min(requested) >= 0
        self.__wrapped__ = f
        if self._plain:
            unique = tuple(sorted(set(requested)))
            self._rev = _reverse(f, unique, engine, self._WANTS_VALUE)
            self._order = None if requested == unique else tuple(unique.index(i) for i in requested)

    def __reduce__(self):
        # Pickled as "this transform of this function": the receiving process
        # rebuilds it (Numba pickles dispatchers; the disk cache spares Enzyme).
        return (type(self), (*self._spec, self._has_aux))

    def __repr__(self) -> str:
        f, wrt, _ = self._spec
        aux = ", has_aux=True" if self._has_aux else ""
        return f"<pyjlad.{_NAMES[type(self).__name__]} of {getattr(f, '__name__', f)!s}, wrt={wrt!r}{aux}>"

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

    def _describe(self) -> str:
        return describe_function(self.__wrapped__)

    def _sweep(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[float, Any, Any]:
        """``(value, gradients in wrt's order and structure, aux)`` for any supported call."""
        f, _, engine = self._spec
        positions = resolve_wrt(self._requested, len(args), len(kwargs))
        call = flatten_call(f, args, kwargs)
        unique = tuple(sorted(set(positions)))
        leaf_wrt = differentiated_leaves(call, unique, self._describe)
        aux = None
        if self._has_aux:
            primal = flattened_function(f, call, has_aux=False)
            check_aux_result(result_type(primal, numba_argtypes(call.leaves)), self._describe)
            copies = tuple(_copy_leaf(x) for x in call.leaves)  # before the sweep, which may write them
            _, grads = _reverse(flattened_function(f, call, has_aux=True), leaf_wrt, engine, False)(*call.leaves)
            value, aux = primal(*copies)
            value = float(value)
        elif kwargs or has_container(args) or (self._nparams >= 0 and len(args) != self._nparams):
            value, grads = _reverse(flattened_function(f, call, has_aux=False), leaf_wrt, engine,
                                    self._WANTS_VALUE)(*call.leaves)
        else:
            value, grads = _reverse(f, unique, engine, self._WANTS_VALUE)(*args)
            leaf_wrt = unique  # the arguments are their own leaves
        by_leaf = dict(zip(leaf_wrt, grads))
        out, seen = [], set()
        for position in positions:
            leaves = by_leaf if position not in seen else {k: _copy_leaf(v) for k, v in by_leaf.items()}
            out.append(call.rebuild(position, leaves))
            seen.add(position)
        return value, out[0] if self._single else tuple(out), aux

    def _direct(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether this call can go straight to the compiled sweep: plain arguments, every parameter given
        (``__call__`` inlines this test for the usual case, a function of known arity)."""
        if kwargs or not self._plain or (len(args) != self._nparams and self._nparams >= 0):
            return False
        return not has_container(args)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if self._direct(args, kwargs):
            value, grads = self._rev(*args)
            return value, self._ordered(grads)
        value, grads, aux = self._sweep(args, kwargs)
        return ((value, aux), grads) if self._has_aux else (value, grads)

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        # The per-call fast path: a few attribute reads and one isinstance per argument.
        if kwargs or len(args) != self._nparams or not self._plain:
            return self._call(args, kwargs)
        for value in args:
            if isinstance(value, _CONTAINERS):
                return self._call(args, kwargs)
        value, grads = self._rev(*args)
        return value, self._ordered(grads)


class _Grad(_ValueAndGrad):
    """Callable returned by :func:`grad`."""

    __slots__ = ()
    _WANTS_VALUE = False

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._direct(args, kwargs):
            return self._ordered(self._rev(*args)[1])
        _, grads, aux = self._sweep(args, kwargs)
        return (grads, aux) if self._has_aux else grads

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != self._nparams or not self._plain:
            return self._call(args, kwargs)
        for value in args:
            if isinstance(value, _CONTAINERS):
                return self._call(args, kwargs)
        return self._ordered(self._rev(*args)[1])


class _ValueAndGradArgs(_ValueAndGrad):
    """:func:`value_and_grad` with ``has_aux`` or a negative ``wrt``: every call is flattened (no ``_rev``)."""

    __slots__ = ()


class _GradArgs(_Grad):
    """:func:`grad` with ``has_aux`` or a negative ``wrt``: every call is flattened (no ``_rev``)."""

    __slots__ = ()


@typeof_impl.register(_ValueAndGradArgs)
@typeof_impl.register(_GradArgs)
def _typeof_unsupported(value: _ValueAndGrad, c: Any) -> Any:
    f, wrt, _ = value._spec
    raise TypingError(
        f"{value!r} cannot be called from @njit code: derivatives called there take non-negative wrt positions "
        "and no has_aux; call it from Python, or use wrt=<position counted from 0> without has_aux "
        f"(wrt={wrt!r}{', has_aux=True' if value._has_aux else ''} given)"
    )


def _transform(kind: type[_ValueAndGrad], f: Callable[..., Any], wrt: Wrt | None, argnums: Wrt | None,
               has_aux: bool, engine: str | None) -> _ValueAndGrad:
    """The transform object of ``kind`` (its flattening variant where ``has_aux`` or a negative position asks)."""
    chosen = _choose_wrt(wrt, argnums)
    requested, _ = _normalize_wrt(chosen)
    if has_aux is True or min(requested) < 0:
        kind = _GradArgs if issubclass(kind, _Grad) else _ValueAndGradArgs
    return kind(f, chosen, engine, has_aux)


def value_and_grad(f: Callable[..., Any], wrt: Wrt | None = None, *, argnums: Wrt | None = None,
                   has_aux: bool = False, engine: str | None = None) -> Callable[..., Any]:
    """Return a function computing ``(f(*args), gradient)`` in one reverse sweep.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` dispatcher, ``@numba.cfunc`` or plain Python function
        (compiled with ``numba.njit``) returning a real scalar.
    wrt : int or tuple of int, optional
        Argument position(s) to differentiate (default 0); a negative position
        counts from the end of the call's positional arguments.
    argnums : int or tuple of int, optional
        JAX's name for ``wrt`` (give one of them).
    has_aux : bool
        ``f`` returns ``(value, aux)``: only ``value`` is differentiated, and
        ``aux`` (a float, array or tuple) is returned beside the gradient, as
        in JAX. ``aux`` comes from a second, plain call of ``f`` on copies of
        the arguments (``f`` must be deterministic).
    engine : str, optional
        Engine name (default ``$PYJLAD_ENGINE`` or ``"embedded"``).

    Returns
    -------
    callable
        ``vg(*args, **kwargs) -> (value, gradient)``; usable as ``scipy.optimize.minimize(vg, x0, jac=True)``.
        With ``has_aux``: ``((value, aux), gradient)``. Keyword arguments are passed to ``f`` and never
        differentiated; tuple and NamedTuple arguments get gradients of the same structure (``None`` for
        their int and bool entries).

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> vg = pyjlad.value_and_grad(lambda x: np.sum(x * x))
    >>> value, g = vg(np.array([1.0, 2.0]))
    >>> value, g.tolist()
    (5.0, [2.0, 4.0])
    """
    return _transform(_ValueAndGrad, f, wrt, argnums, has_aux, engine)


def grad(f: Callable[..., Any], wrt: Wrt | None = None, *, argnums: Wrt | None = None,
         has_aux: bool = False, engine: str | None = None) -> Callable[..., Any]:
    """Return a function computing the gradient of ``f``.

    The returned callable is the fast path: compiled gradients are kept per
    argument types, so calls after the first do no compilation. Its sweep does not
    compute ``f``'s value: Enzyme leaves out what only computes it (a loop summing the
    loss's terms), so it is a derivative of its own, not :func:`value_and_grad`'s.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` dispatcher, ``@numba.cfunc`` or plain Python function
        returning a real scalar.
    wrt : int or tuple of int, optional
        Argument position(s) to differentiate (default 0); a negative position
        counts from the end of the call's positional arguments.
    argnums : int or tuple of int, optional
        JAX's name for ``wrt`` (give one of them).
    has_aux : bool
        ``f`` returns ``(value, aux)``: only ``value`` is differentiated, and
        ``aux`` (a float, array or tuple) is returned beside the gradient, as
        in JAX. ``aux`` comes from a second, plain call of ``f`` on copies of
        the arguments (``f`` must be deterministic).
    engine : str, optional
        Engine name.

    Returns
    -------
    callable
        ``df(*args, **kwargs)``: a float for a float argument, an ndarray of the
        argument's shape and dtype for an array argument, the same structure for a
        tuple or NamedTuple argument (``None`` for its int and bool entries); a
        tuple of those if ``wrt`` is a tuple. With ``has_aux``: ``(gradient, aux)``.
        Keyword arguments are passed to ``f`` and never differentiated.

    Raises
    ------
    ArgumentTypeError
        If both ``wrt`` and ``argnums`` are given, or (at the call) an argument
        is a dict (use a NamedTuple) or a list (use a tuple or an array).

    Examples
    --------
    >>> import math, pyjlad
    >>> df = pyjlad.grad(lambda x, y: math.sin(x) * y, wrt=(0, 1))
    >>> df(0.0, 2.0)
    (2.0, 0.0)
    >>> import collections
    >>> Line = collections.namedtuple("Line", "slope offset")
    >>> pyjlad.grad(lambda p, x, scale=1.0: scale * (p.slope * x + p.offset) ** 2)(Line(2.0, 1.0), 3.0, scale=0.5)
    Line(slope=21.0, offset=7.0)
    """
    return _transform(_Grad, f, wrt, argnums, has_aux, engine)


def gradient(f: Callable[..., Any], *args: Any, wrt: Wrt | None = None, argnums: Wrt | None = None,
             has_aux: bool = False, engine: str | None = None, **kwargs: Any) -> Any:
    """Gradient of the scalar function ``f`` at ``args``.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` dispatcher, ``@numba.cfunc`` or plain Python function
        returning a real scalar.
    *args
        Arguments to ``f``: floats, ints, bools and NumPy arrays (1-3
        dimensions, float64/float32 to differentiate; any strides), and tuples
        and NamedTuples of them. Inputs are never modified by pyjlad.
    wrt : int or tuple of int, optional
        Argument position(s) to differentiate (default 0; negative ones count
        from the end; integers and bools are constants and cannot be named).
    argnums : int or tuple of int, optional
        JAX's name for ``wrt``.
    has_aux : bool
        As in :func:`grad`: the result is ``(gradient, aux)``.
    **kwargs
        Keyword arguments passed to ``f`` (never differentiated; ``wrt``,
        ``argnums``, ``has_aux`` and ``engine`` are pyjlad's: pass an argument
        of ``f`` with one of those names by position, or use :func:`grad`).
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
    return _transform(_Grad, f, wrt, argnums, has_aux, engine)(*args, **kwargs)


def value_and_gradient(f: Callable[..., Any], *args: Any, wrt: Wrt | None = None, argnums: Wrt | None = None,
                       has_aux: bool = False, engine: str | None = None, **kwargs: Any) -> tuple[Any, Any]:
    """``(f(*args), gradient(f, *args, wrt=wrt))`` computed in one reverse sweep.

    Examples
    --------
    >>> import pyjlad
    >>> pyjlad.value_and_gradient(lambda a, b: a * b, 2.0, 3.0, wrt=(0, 1))
    (6.0, (3.0, 2.0))
    """
    return _transform(_ValueAndGrad, f, wrt, argnums, has_aux, engine)(*args, **kwargs)
