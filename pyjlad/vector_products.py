"""Several directions per sweep: Jacobians, Hessians and batched ``jvp``/``vjp`` in Enzyme's vector mode.

A width-``W`` sweep (:class:`~pyjlad.sweep.Sweep` with ``width=W``; drivers in
:mod:`pyjlad.engines.vector_driver`) pushes ``W`` tangents forward, or ``W``
cotangents back, through one run of the function: the primal work, loop control
and memory traffic are shared by the ``W`` directions. ``n`` directions are
taken in chunks of ``W`` (the last one padded with zero directions), so the
extra memory is ``W`` shadows of each differentiated array, whatever ``n``.

Vector mode is the embedded engine's, for functions that call no custom rule,
BLAS or LAPACK; elsewhere (and with ``chunk=1``) each direction gets its own
sweep, as :func:`pyjlad.jvp`/:func:`pyjlad.vjp`/:func:`pyjlad.hvp` do, with the
same results. Every sweep runs on fresh contiguous copies of the arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types as nbtypes

from . import config
from .abi import ArrayArg
from .activity import Activity
from .engines import compiled_sweep, default_engine_name
from .errors import ArgumentError, ArgumentTypeError, EnzymeError, PyjladError, UnsupportedFunctionError
from .export import as_numba_function, describe_function, export, numba_argtypes, result_type
from .memo import cached_for
from .outputs import output_layout, output_wrapper
from .product_args import differentiable
from .pytrees import has_container
from .sweep import Sweep, compact_overlapping

__all__ = ["DEFAULT_CHUNK", "check_chunk", "forward_directions", "reverse_directions", "hessian_columns",
           "jacobian_vector", "unit_chunks", "active_of"]

#: Directions per sweep when none is given (measured: benchmarks/vector_mode.py).
DEFAULT_CHUNK = 16

#: Directions yielded per chunk: ``make(start, stop, width)`` gives, per argument, a
#: stacked ``(width, *shape)`` array (zero past ``stop - start``) or ``None``.
Chunks = Callable[[int, int, int], list[Any]]


class _Refused(PyjladError):
    """Vector mode does not apply here: sweep one direction at a time instead (never reaches the user)."""


def check_chunk(chunk: int | None) -> int:
    """``chunk`` (``None``: :data:`DEFAULT_CHUNK`) checked to be a positive integer.

    Examples
    --------
    >>> check_chunk(None), check_chunk(4)
    (16, 4)
    """
    if chunk is None:
        return DEFAULT_CHUNK
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ArgumentTypeError(f"chunk must be a positive integer (directions per sweep), got {chunk!r}")
    return int(chunk)


def _fresh(primals: tuple[Any, ...], writes: tuple[bool, ...] | None = None) -> tuple[Any, ...]:
    """The arguments for one sweep, arrays C-contiguous (the layout the vector drivers address):
    a fresh copy of each array the function writes (``writes``; every array when not given), the
    array itself when it is C-contiguous and not written."""
    return tuple((np.array(x, copy=True, order="C") if writes is None or writes[i] else np.ascontiguousarray(x))
                 if isinstance(x, np.ndarray) else x for i, x in enumerate(primals))


def _vector_engine(engine: str | None) -> bool:
    return (engine or default_engine_name()) in ("embedded", "llvm", "enzyme")


def _sweeper(f: Any, engine: str | None, kind: str, mode: str, acts: tuple[Activity, ...], wrt: int,
             width: int) -> Callable[[tuple[Any, ...], tuple[Any, ...]], float]:
    """``run(args, shadows) -> value``: one vector sweep (``Sweep(kind, mode, acts, wrt, width=width)``);
    :class:`_Refused` (remembered for ``f`` and the sweep) where Enzyme or pyjlad cannot build it."""
    refused, compiled = cached_for(f, ("vector-sweep", kind, mode, acts, wrt, width, engine), lambda: (
        [False], compiled_sweep(f, Sweep(kind, mode, acts, wrt, width=width), engine)))
    if refused[0]:
        raise _Refused

    def run(args: tuple[Any, ...], shadows: tuple[Any, ...]) -> float:
        try:
            value, _, _ = compiled(args, shadows, 0.0)
        except (EnzymeError, UnsupportedFunctionError) as exc:
            refused[0] = True
            raise _Refused from exc
        return value

    return run


def _parallel_reverse(f: Any) -> bool:
    """Whether reverse sweeps of ``f`` run its ``prange`` loops in parallel (a ``parallel=True`` function with
    the parallel-derivatives setting on: :mod:`pyjlad.parallel_derivatives`); those take one sweep per
    direction, each parallel, where a vector-mode sweep would run serially."""
    return config.parallel_derivatives() and bool(getattr(f, "targetoptions", {}).get("parallel"))


def _stack(x: Any, width: int) -> np.ndarray:
    dtype = x.dtype if isinstance(x, (np.ndarray, np.floating)) else np.float64
    return np.zeros((width, *np.shape(x)), dtype)


_TYPES: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _type_key(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    """What decides Numba's types of ``primals`` (dtype, ndim, layout and flags of an array; the type
    of a float or bool; the size of an int), cheap to hash; the types themselves where that is not all."""
    key = []
    for x in primals:
        if isinstance(x, np.ndarray) and x.dtype.kind in "fiub":
            key.append((x.dtype.str, x.ndim, x.flags.c_contiguous, x.flags.f_contiguous, x.flags.writeable,
                        x.flags.aligned))
        elif isinstance(x, (float, bool, np.floating, np.integer, np.bool_)):
            key.append(type(x))
        elif isinstance(x, int):
            key.append((int, x.bit_length() > 62))
        else:
            return tuple(numba_argtypes(primals))
    return tuple(key)


def _argtypes(primals: tuple[Any, ...], key: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """``numba_argtypes(primals)``, remembered by :func:`_type_key` (``key``, if known)."""
    key = _type_key(primals) if key is None else key
    found = _TYPES.get(key)
    if found is None:
        found = _TYPES[key] = tuple(numba_argtypes(primals))
    return found


def _writes(f: Any, argtypes: tuple[Any, ...]) -> tuple[bool, ...]:
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
        raise _Refused  # the one-direction path explains it
    return kind, written, writes, np.float32 if restype == nbtypes.float32 else np.float64


def _plan(f: Any, primals: tuple[Any, ...]) -> tuple[str, Any, Any, Any, Any, tuple[bool, ...]]:
    """``(kind, function to sweep, output layout, the written argument, a zero output, which arguments
    f writes)``, or :class:`_Refused`."""
    if has_container(primals):
        raise _Refused
    key = _type_key(primals)  # (cheaper to hash than Numba's types)
    argtypes = _argtypes(primals, key)
    kind, written, writes, dtype = cached_for(f, ("vector-plan", key), lambda: _signature(f, argtypes))
    if kind == "scalar":
        return kind, f, None, None, dtype(0), writes
    if kind == "none":
        return kind, f, None, written, primals[written], writes
    # f's output shape: from one run of f, on copies of the arrays it writes (once known, from
    # its wrapper's analysis; until then of every array).
    known = cached_for(f, ("vector-known-writes", key), lambda: [None])
    value = as_numba_function(f)(*_fresh(primals, known[0]))
    if not (isinstance(value, np.ndarray) and value.dtype in (np.float64, np.float32)):
        raise _Refused
    layout, wrapper, writes = cached_for(f, ("vector-output", key, value.shape, value.dtype.str),
                                         lambda: _output_plan(f, primals, argtypes, value))
    known[0] = writes
    return kind, wrapper, layout, None, np.zeros(value.shape, value.dtype), writes


def _output_plan(f: Any, primals: tuple[Any, ...], argtypes: tuple[Any, ...], value: np.ndarray) -> tuple:
    """``(layout, wrapper, which arguments the wrapper writes)`` for ``f`` returning ``value``."""
    layout = output_layout(value, describe_function(f))
    wrapper = output_wrapper(f, len(primals), layout)
    return layout, wrapper, _writes(wrapper, (*_argtypes((value,)), *argtypes))[1:]


def _shadowed(i: int, written: Any, writes: tuple[bool, ...], primals: tuple[Any, ...]) -> bool:
    """Whether argument ``i`` gets a (zero) shadow though not differentiated: the written output, or a
    float array ``f`` writes (a scratch buffer written from active values and read back would lose
    their derivatives as constant memory)."""
    return i == written or (bool(writes) and writes[i] and differentiable(primals[i]))


def forward_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks,
                       width: int, engine: str | None, plan: Any = None) -> tuple[Any, np.ndarray] | None:
    """``(value, tangents)``: the output tangents of ``count`` directions, stacked ``(count, *out_shape)``.

    ``active[i]``: argument ``i`` gets tangents from ``make``. ``None`` where vector mode
    does not apply (the caller then sweeps one direction at a time). ``plan``: :func:`_plan`'s, if known.
    """
    if width < 2 or count == 0 or not _vector_engine(engine):
        return None
    try:
        kind, g, layout, written, out_like, writes = plan or _plan(f, primals)
        acts = tuple(Activity.DUP if a or _shadowed(i, written, writes, primals) else Activity.CONST
                     for i, a in enumerate(active))
        if layout is not None:
            acts = (Activity.DUP, *acts)
        run = _sweeper(g, engine, "ad", "forward", acts, -1, width)
        output = np.empty_like(out_like) if layout is not None else None  # written by every sweep
        value = None
        unwritten = None if any(writes) else _fresh(primals, writes)  # the same arrays for every chunk
        # One zeroed result, padded to whole chunks: a chunk's output tangents are written into
        # its rows (a C-contiguous view), no copy. (A written argument's tangents: copied out.)
        padded = -(-count // width) * width
        result = np.zeros((padded, *np.shape(out_like)), np.asarray(out_like).dtype) if kind != "none" else None
        dup = [i for i, a in enumerate(acts[-len(primals):]) if a is Activity.DUP]
        for start in range(0, count, width):
            stop = min(count, start + width)
            args = unwritten if unwritten is not None else _fresh(primals, writes)
            tangents = make(start, stop, width)
            shadows = [tangents[i] if tangents[i] is not None else _stack(args[i], width) for i in dup]
            if kind == "none":
                out = shadows[dup.index(written)]
                if result is None:
                    result = np.zeros((padded, *out.shape[1:]), out.dtype)
            else:
                out = result[start:start + width]
                if layout is not None:
                    args, shadows = (output, *args), [out, *shadows]
                else:
                    shadows.append(out)
            value = run(args, tuple(shadows))
            if kind == "none":
                result[start:stop] = out[:stop - start]
        result = result[:count]
        value = args[0] if layout is not None else (float(value) if kind == "scalar" else None)
        return value, result
    except _Refused:
        return None


def reverse_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
                       seeds: Callable[[int, int, int], np.ndarray], width: int,
                       engine: str | None, plan: Any = None) -> tuple[Any, list[Any]] | None:
    """``(value, cotangents)``: for ``count`` output cotangents (``seeds(start, stop, width)`` gives
    them stacked, zero past ``stop - start``), the input cotangents of each ``active`` argument,
    stacked ``(count, *shape)`` (``None`` for the others). ``None`` where vector mode does not apply.
    ``plan``: :func:`_plan`'s, if known.
    """
    if width < 2 or count == 0 or not _vector_engine(engine) or _parallel_reverse(f):
        return None
    try:
        kind, g, layout, written, out_like, writes = plan or _plan(f, primals)
        acts = tuple(Activity.DIFF if a or _shadowed(i, written, writes, primals) else Activity.CONST
                     for i, a in enumerate(active))
        run = _sweeper(g, engine, "ad", "reverse", ((Activity.DUP,) if layout else ()) + acts, -1, width)
        output = np.empty_like(out_like) if layout is not None else None  # written by every sweep
        results: list[Any] = [None] * len(primals)
        value = None
        unwritten = None if any(writes) else _fresh(primals, writes)
        padded = -(-count // width) * width
        # The active arguments' cotangents accumulate into rows of one zeroed array each (views).
        whole = [np.zeros((padded, *np.shape(x)), _stack(x, 1).dtype) if active[i] and act is Activity.DIFF
                 else None for i, (x, act) in enumerate(zip(primals, acts))]
        out_dtype = np.asarray(out_like).dtype
        for start in range(0, count, width):
            stop = min(count, start + width)
            args = unwritten if unwritten is not None else _fresh(primals, writes)
            seed = np.asarray(seeds(start, stop, width), dtype=out_dtype)
            if seed.shape[1:] != np.shape(out_like):
                raise ArgumentError(f"the cotangents have shape {seed.shape[1:]}; the output has {np.shape(out_like)}")
            stacks = [w[start:start + width] if w is not None else _stack(x, width) if act is Activity.DIFF else None
                      for x, act, w in zip(args, acts, whole)]
            if kind == "none":
                stacks[written][...] = seed
            shadows = [s for s in stacks if s is not None]
            if layout is not None:
                args, shadows = (output, *args), [seed, *shadows]
            elif kind == "scalar":
                shadows.append(seed)
            value = run(args, tuple(shadows))
        results = [w[:count] if w is not None else None for w in whole]
        value = args[0] if layout is not None else (float(value) if kind == "scalar" else None)
        return value, results
    except _Refused:
        return None


def hessian_columns(f: Any, args: tuple[Any, ...], wrt: int, width: int, engine: str | None) -> np.ndarray | None:
    """The Hessian of ``f`` with respect to the array ``args[wrt]``, ``width`` columns per sweep
    (forward over reverse, the outer forward sweep of width ``width``); ``None`` where vector
    mode does not apply."""
    x = args[wrt]
    if width < 2 or not _vector_engine(engine) or not isinstance(x, np.ndarray) or has_container(args):
        return None
    n = x.size
    try:
        run = _sweeper(f, engine, "hvp", "reverse", (), wrt, width)
        key = _type_key(args)
        argtypes = _argtypes(args, key)
        writes = cached_for(f, ("vector-hvp-writes", key), lambda: _writes(f, argtypes) if isinstance(
            result_type(f, argtypes), nbtypes.Float) else None)
        padded = -(-n // width) * width
        eye = _eye(padded, n, x.dtype)  # the directions: rows (zero past n), one block per sweep
        columns = np.zeros((padded, n), x.dtype)  # H e_j in row j: the sweeps write into views
        reuse = writes is not None and not any(writes)  # f writes no argument: the same ones for every sweep
        shared = compact_overlapping(_fresh(args, writes), [wrt]) if reuse else None
        for start in range(0, n, width):
            passed = shared if reuse else compact_overlapping(_fresh(args, writes), [wrt])
            run(passed, (eye[start:start + width].reshape((width, *x.shape)), np.zeros(x.shape, x.dtype),
                         columns[start:start + width].reshape((width, *x.shape))))
        hess = columns[:n].T
    except _Refused:
        return None
    return np.ascontiguousarray(hess).reshape(x.shape + x.shape)


def _eye(rows: int, size: int, dtype: Any) -> np.ndarray:
    """``np.eye(rows, size, dtype=dtype)`` for ``rows >= size``, without its per-call overhead."""
    eye = np.zeros((rows, size), dtype)
    eye.reshape(-1)[:size * (size + 1):size + 1] = 1
    return eye


def unit_chunks(index: int, shape: tuple[int, ...], dtype: Any, nargs: int) -> Chunks:
    """Chunks of the unit directions of argument ``index`` (``shape``), in C order."""
    size = math.prod(shape)
    eyes: dict[int, np.ndarray] = {}

    def make(start: int, stop: int, width: int) -> list[Any]:
        # Rows of one identity, padded with zero rows to whole chunks: each chunk gets its own
        # rows (a C-contiguous view), so a sweep that zeroes or writes them spoils no other chunk.
        eye = eyes.get(width)
        if eye is None:
            eye = eyes[width] = _eye(-(-size // width) * width, size, dtype)
        out: list[Any] = [None] * nargs
        out[index] = eye[start:start + width].reshape((width, *shape))  # rows past size: zero
        return out

    return make


def active_of(primals: tuple[Any, ...], wanted: Any) -> tuple[bool, ...]:
    """Per argument: differentiable and wanted (``wanted(i)``)."""
    return tuple(differentiable(x) and wanted(i) for i, x in enumerate(primals))


def jacobian_vector(f: Any, args: tuple[Any, ...], indices: tuple[int, ...], mode: str, width: int,
                    engine: str | None) -> list[np.ndarray] | None:
    """:func:`pyjlad.jacobian` in vector mode: ``width`` rows (reverse) or columns (forward) per
    sweep; ``None`` where vector mode does not apply (or ``f``'s output is no float or float array:
    the caller explains)."""
    if width < 2 or not _vector_engine(engine):
        return None
    try:
        plan = _plan(f, args)
    except _Refused:
        return None
    out_shape, out_dtype = np.shape(plan[4]), np.asarray(plan[4]).dtype
    out_size = math.prod(out_shape)
    shapes = {i: np.shape(args[i]) for i in indices}
    dtypes = {i: np.result_type(out_dtype, np.asarray(args[i]).dtype) for i in indices}
    if mode == "reverse":
        seeds = unit_chunks(0, out_shape, out_dtype, 1)
        got = reverse_directions(f, args, active_of(args, lambda i: i in indices), out_size,
                                 lambda start, stop, width: seeds(start, stop, width)[0], width, engine, plan)
        if got is None:
            return None
        return [got[1][i].reshape(out_shape + shapes[i]).astype(dtypes[i], copy=False) for i in indices]
    out = []
    for i in indices:
        size = math.prod(shapes[i])
        dtype = np.asarray(args[i]).dtype
        got = forward_directions(f, args, active_of(args, lambda j, i=i: j == i), size,
                                 unit_chunks(i, shapes[i], dtype, len(args)), width, engine, plan)
        if got is None:
            return None
        columns = got[1].reshape(size, out_size).T.reshape(out_shape + shapes[i])
        out.append(columns.astype(dtypes[i], copy=False))
    return out
