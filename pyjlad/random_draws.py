"""One draw of a function's random numbers for a transform that runs the function more than once.

A forward ``jacobian`` runs ``f`` once per chunk of columns (and once more to learn an array result's shape), a
batched ``jvp`` once per chunk of tangents, a ``jvp`` of an array result twice. Numba's ``np.random`` and
``random`` draw from a per-thread state, so until 2026-12-06 each run of an ``f`` drawing unseeded numbers drew
new ones and the Jacobian's columns came from different draws (found by a user-style probe).

Within :func:`one_draw` (each transform of :mod:`pyjlad.products` runs in one), :func:`before_run` puts the
calling thread's two states (``np.random``'s and ``random``'s, Numba's ``rnd_state_t``, copied whole: the
Mersenne Twister, its position and the spare normal deviate) back as they were when the transform began,
before each run: every run draws what one plain call of ``f`` would have drawn, and leaves the states as that
call would. Only for a function whose compiled code reads a random state (:func:`draws_random`); the chunks of
a ``parallel=True`` function that run on Numba's threads (:mod:`pyjlad.chunk_threads`) draw from those threads'
states, as its ``prange`` loops do.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from numba import _helperlib
from numba.core.dispatcher import Dispatcher

from .errors import PyjladError
from .export_compile import as_numba_function, compile_result, numba_argtypes
from .memo import cached_for

__all__ = ["REPLAYING", "before_run", "draws_random", "one_draw", "one_draw_per_call"]

#: Numba's ``MT_N``: the Mersenne Twister's words.
_MT_WORDS = 624
#: How many threads are inside :func:`one_draw` for a function that draws (read on every sweep: a list, not a
#: function call, when none is).
REPLAYING = [0]
_count_lock = threading.Lock()
_local = threading.local()
_STATE_SYMBOL = "_random_state"  # numba_get_np_random_state, numba_get_py_random_state


class _RandomState(ctypes.Structure):
    """Numba's ``rnd_state_t`` (``numba/_random.c``), laid out by the C compiler's rules as ctypes lays it out."""

    _fields_ = [("index", ctypes.c_int), ("mt", ctypes.c_uint * _MT_WORDS), ("has_gauss", ctypes.c_int),
                ("gauss", ctypes.c_double), ("is_initialized", ctypes.c_int)]


_SIZE = ctypes.sizeof(_RandomState)


def _snapshot() -> tuple[tuple[int, bytes], ...]:
    """The calling thread's two states, whole (initialized first if this thread has not drawn yet)."""
    pointers = (_helperlib.rnd_get_np_state_ptr(), _helperlib.rnd_get_py_state_ptr())
    return tuple((pointer, ctypes.string_at(pointer, _SIZE)) for pointer in pointers)


def _restore(snapshot: tuple[tuple[int, bytes], ...]) -> None:
    for pointer, raw in snapshot:
        ctypes.memmove(pointer, raw, _SIZE)


def _reads_a_random_state(target: Dispatcher, argtypes: tuple) -> bool:
    try:
        return _STATE_SYMBOL in compile_result(target, argtypes).library.get_llvm_str()
    except (PyjladError, RuntimeError):  # not compiled for these, or loaded from Numba's cache (no IR)
        return False


def draws_random(f: Any, args: Sequence[Any]) -> bool:
    """Whether ``f``'s compiled code for ``args`` (its callees included) reads Numba's random state.

    >>> import numpy as np
    >>> from numba import njit
    >>> draws_random(njit(lambda x: x * np.random.normal()), (1.0,)), draws_random(njit(lambda x: x * 2.0), (1.0,))
    (True, False)
    """
    try:
        target = as_numba_function(f)
        argtypes = numba_argtypes(tuple(args))
    except (PyjladError, TypeError, ValueError):
        return False
    if not isinstance(target, Dispatcher):
        return False
    return cached_for(target, ("draws random", argtypes), lambda: _reads_a_random_state(target, argtypes))


@contextlib.contextmanager
def one_draw(f: Any, args: Sequence[Any]) -> Iterator[None]:
    """Within it, each :func:`before_run` on this thread restores the random states it began with, where ``f``
    draws random numbers (:func:`draws_random`); nested, the outermost one decides."""
    if getattr(_local, "start", None) is not None or not draws_random(f, args):
        yield
        return
    _local.start = _snapshot()
    with _count_lock:
        REPLAYING[0] += 1
    try:
        yield
    finally:
        _local.start = None
        with _count_lock:
            REPLAYING[0] -= 1


def before_run() -> None:
    """Before a run of the function: the states :func:`one_draw` began with, back (nothing outside one)."""
    start = getattr(_local, "start", None)
    if start is not None:
        _restore(start)


T = TypeVar("T", bound=Callable[..., Any])


def one_draw_per_call(point: Callable[..., tuple[Any, Sequence[Any]]]) -> Callable[[T], T]:
    """Run a transform in :func:`one_draw` of the function and arguments ``point(*its arguments)`` names."""

    def decorate(transform: T) -> T:
        @functools.wraps(transform)
        def transformed(*args: Any, **kwargs: Any) -> Any:
            try:
                f, primals = point(*args, **kwargs)
            except TypeError:  # a call the transform refuses itself, in its words
                return transform(*args, **kwargs)
            with one_draw(f, primals):
                return transform(*args, **kwargs)
        return transformed  # type: ignore[return-value]
    return decorate
