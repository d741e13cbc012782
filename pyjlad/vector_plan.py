"""What a vector-mode sweep of a function needs to know first: its argument types, what it returns and writes.

:func:`plan` gives, for a function and its arguments, the function to sweep (the function
itself, or a wrapper writing its float-array result into a buffer: :mod:`pyjlad.outputs`),
the output's layout and a zero output, and which arguments the function writes; the
rest of :mod:`pyjlad.vector_products` runs the sweeps. Types are remembered by a key
cheaper to compute than Numba's ``typeof`` (:func:`type_key`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import types as nbtypes

from .abi import ArrayArg
from .errors import PyjladError
from .export import as_numba_function, describe_function, export, numba_argtypes, result_type
from .memo import cached_for
from .outputs import output_layout, output_wrapper
from .product_args import differentiable
from .pytrees import has_container
from .random_draws import before_run
from .shadow_guards import guarded

__all__ = ["Refused", "SweepPlan", "argtypes_of", "call_key", "fresh", "shadowed", "size_key", "sweep_plan", "stack",
           "type_key", "writes_of"]


class Refused(PyjladError):
    """Vector mode does not apply here: sweep one direction at a time instead (never reaches the user)."""


def fresh(primals: tuple[Any, ...], writes: tuple[bool, ...] | None = None) -> tuple[Any, ...]:
    """The arguments for one sweep, arrays C-contiguous (the layout the vector drivers address):
    a fresh copy of each array the function writes (``writes``; every array when not given), the
    array itself when it is C-contiguous and not written."""
    return tuple((np.array(x, copy=True, order="C") if writes is None or writes[i] else np.ascontiguousarray(x))
                 if isinstance(x, np.ndarray) else x for i, x in enumerate(primals))


def stack(x: Any, width: int) -> np.ndarray:
    """Zeroed shadows of ``x`` for a width-``width`` sweep, stacked ``(width, *shape)``, with a guard zone
    after the last (:func:`pyjlad.shadow_guards.guarded`)."""
    dtype = x.dtype if isinstance(x, (np.ndarray, np.floating)) else np.float64
    return guarded((width, *np.shape(x)), dtype)


_TYPES: dict[tuple[Any, ...], tuple[Any, ...]] = {}
#: The array flags Numba's type of an array depends on: C_CONTIGUOUS, F_CONTIGUOUS, ALIGNED, WRITEABLE.
_TYPED_FLAGS = 0x1 | 0x2 | 0x100 | 0x400


def type_key(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    """What decides Numba's types of ``primals`` (dtype, ndim, layout and flags of an array; the type
    of a float or bool; the size of an int), cheap to hash; the types themselves where that is not all."""
    key = []
    for x in primals:
        if isinstance(x, np.ndarray) and x.dtype.kind in "fiub":
            key.append((x.dtype, x.ndim, x.flags.num & _TYPED_FLAGS))
        elif isinstance(x, (float, bool, np.floating, np.integer, np.bool_)):
            key.append(type(x))
        elif isinstance(x, int):
            key.append((int, x.bit_length() > 62))
        else:
            return tuple(numba_argtypes(primals))
    return tuple(key)


def argtypes_of(primals: tuple[Any, ...], key: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """``numba_argtypes(primals)``, remembered by :func:`type_key` (``key``, if known)."""
    key = type_key(primals) if key is None else key
    found = _TYPES.get(key)
    if found is None:
        found = _TYPES[key] = tuple(numba_argtypes(primals))
    return found


def writes_of(f: Any, argtypes: tuple[Any, ...]) -> tuple[bool, ...]:
    """Which arguments ``f`` (returning a float or nothing) writes."""
    return cached_for(f, ("vector-writes", argtypes), lambda: tuple(
        isinstance(a, ArrayArg) and a.writes for a in export(f, argtypes).abi.args))


def _signature(f: Any, argtypes: tuple[Any, ...]) -> tuple[str, Any, tuple[bool, ...], Any]:
    """``(result kind, the written argument, which arguments f writes, scalar result dtype)``."""
    restype = result_type(f, argtypes)
    kind = "scalar" if isinstance(restype, nbtypes.Float) else "none" if restype == nbtypes.none else "other"
    if kind == "other":
        return kind, None, (), None
    abi = export(f, argtypes).abi
    writes = tuple(isinstance(a, ArrayArg) and a.writes for a in abi.args)
    written = next((i for i, a in enumerate(abi.args) if writes[i] and a.differentiable), None)
    if kind == "none" and written is None:
        raise Refused  # the one-direction path explains it
    return kind, written, writes, np.float32 if restype == nbtypes.float32 else np.float64


class SweepPlan(NamedTuple):
    """What :func:`sweep_plan` found: how to sweep a function for arguments of these types."""

    kind: str  # "scalar" (f returns a float), "none" (f writes an output argument), "array" (f returns arrays)
    function: Any  # the function to sweep: f, or its output wrapper ("array")
    layout: Any  # the output layout ("array"), or None
    written: Any  # the output argument ("none"), or None
    out_like: Any  # an output of f's shape and dtype (never written to)
    writes: tuple[bool, ...]  # which of f's arguments the swept function writes
    key: tuple  # the arguments' type key (type_key)
    memo: dict  # for the callers: what they derive from this plan, kept with it
    source: Any = None  # f itself, where ``function`` is its output wrapper ("array")


class _Record:
    """What is remembered per function and argument types."""

    def __init__(self, signature: tuple) -> None:
        self.signature = signature
        self.known_writes: Any = None  # the arguments f writes, once its wrapper's analysis is known
        self.outputs: dict[tuple[Any, ...], tuple] = {}  # by output shape and dtype: (layout, wrapper, writes, memo,
        #                                                  a zero output)
        self.results: dict[tuple[Any, ...], tuple] = {}  # by size_key: the output's (shape, dtype) last measured
        self.memo: dict = {}


#: Sizes remembered per function and argument types (:func:`size_key`); more clear the table.
_RESULT_SIZES = 64


def call_key(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    """:func:`type_key` and :func:`size_key` in one (what a repeated call must match to be replayed).

    >>> import numpy as np
    >>> call_key((np.zeros(3), 4)) == call_key((np.ones(3), 4)) != call_key((np.ones(2), 4))
    True
    """
    key = []
    for x in primals:
        if isinstance(x, np.ndarray) and x.dtype.kind in "fiub":
            key.append((x.dtype, x.shape, x.flags.num & _TYPED_FLAGS))
        elif isinstance(x, (float, bool, np.floating, np.bool_)):
            key.append(type(x))
        elif isinstance(x, (int, np.integer)):
            key.append((type(x), int(x)))
        else:
            return type_key(primals), size_key(primals)
    return tuple(key)


def size_key(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a result's shape usually depends on: the arrays' shapes and the integers' values.

    >>> import numpy as np
    >>> size_key((np.zeros((2, 3)), 4, 0.5))
    ((2, 3), 4, None)
    """
    return tuple(x.shape if isinstance(x, np.ndarray) else
                 x if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) else None
                 for x in primals)


def sweep_plan(f: Any, primals: tuple[Any, ...], measure: bool = False) -> SweepPlan:
    """How to sweep ``f`` for ``primals``, or :class:`Refused`.

    For ``f`` returning an array, the output's shape and dtype are those measured by running ``f``
    on the last call with the same :func:`size_key` (``measure``, or none yet: run ``f`` now). A
    guess that is wrong makes the sweep raise :class:`~pyjlad.outputs.OutputShapeChanged` before
    it writes the output: the caller then plans again with ``measure=True``
    (:func:`pyjlad.vector_products.planned`)."""
    if has_container(primals):
        raise Refused
    key = type_key(primals)  # (cheaper to hash than Numba's types)
    record = cached_for(f, ("vector-plan", key), lambda: _Record(_signature(f, argtypes_of(primals, key))))
    kind, written, writes, dtype = record.signature
    if kind == "scalar":
        return SweepPlan(kind, f, None, None, dtype(0), writes, key, record.memo)
    if kind == "none":
        return SweepPlan(kind, f, None, written, primals[written], writes, key, record.memo)
    sizes = size_key(primals)
    result = None if measure else record.results.get(sizes)
    if result is None:
        # f's output shape: from one run of f, on copies of the arrays it writes (once known, from
        # its wrapper's analysis; until then of every array).
        before_run()  # (the draws of the sweeps after it: pyjlad.random_draws)
        value = as_numba_function(f)(*fresh(primals, record.known_writes))
        if not (isinstance(value, np.ndarray) and value.dtype in (np.float64, np.float32)):
            raise Refused
        if len(record.results) >= _RESULT_SIZES:
            record.results.clear()
        result = record.results[sizes] = (value.shape, value.dtype)
    found = record.outputs.get(result)
    if found is None:
        like = np.zeros(*result)  # (typed writable: the wrapper writes its buffer)
        planned = _output_plan(f, primals, argtypes_of(primals, key), like)
        like.setflags(write=False)  # shared by the calls: shape and dtype only
        found = record.outputs[result] = (*planned, {}, like)
        record.known_writes = found[2]
    layout, wrapper, writes, memo, like = found
    return SweepPlan("array", wrapper, layout, None, like, writes, key, memo, f)


def _output_plan(f: Any, primals: tuple[Any, ...], argtypes: tuple[Any, ...], value: np.ndarray) -> tuple:
    """``(layout, wrapper, which arguments the wrapper writes)`` for ``f`` returning ``value``."""
    layout = output_layout(value, describe_function(f))
    wrapper = output_wrapper(f, len(primals), layout)
    return layout, wrapper, writes_of(wrapper, (*argtypes_of((value,)), *argtypes))[1:]


def shadowed(i: int, written: Any, writes: tuple[bool, ...], primals: tuple[Any, ...]) -> bool:
    """Whether argument ``i`` gets a (zero) shadow though not differentiated: the written output, or a
    float array ``f`` writes (a scratch buffer written from active values and read back would lose
    their derivatives as constant memory)."""
    return i == written or (bool(writes) and writes[i] and differentiable(primals[i]))
