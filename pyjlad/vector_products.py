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
same results. Every sweep runs on fresh copies of the arguments it writes.

Jacobian and batched sweeps interleave (:mod:`pyjlad.vector_lanes`) each
differentiated array the function does not write, and the output buffer: the
``W`` directions of an element adjacent, so the derivative loads and stores them
as vectors. The function then runs on a strided view of each (Numba's ``A``
layout, compiled once more); where that fails to build, the sweep falls back to
``W`` stacked copies, remembered per function. (Hessians: stacked.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types as nbtypes

from . import config
from .activity import Activity
from .engines import compiled_sweep, default_engine_name
from .errors import ArgumentError, ArgumentTypeError, EnzymeError, PyjladError, UnsupportedFunctionError
from .export import result_type
from .memo import cached_for
from .product_args import differentiable
from .pytrees import has_container
from .sweep import Sweep, compact_overlapping
from .vector_lanes import HessianLanes, Lanes, interleaved_indices, lanes_for, loaded
from .vector_plan import Refused, argtypes_of, fresh, shadowed, stack, sweep_plan, type_key, writes_of

__all__ = ["DEFAULT_CHUNK", "check_chunk", "forward_directions", "reverse_directions", "hessian_columns",
           "jacobian_vector", "unit_chunks", "active_of"]

#: Directions per sweep when none is given (measured: benchmarks/vector_mode.py).
DEFAULT_CHUNK = 16

#: Directions yielded per chunk: ``make(start, stop, width)`` gives, per argument, a
#: stacked ``(width, *shape)`` array (zero past ``stop - start``) or ``None``.
Chunks = Callable[[int, int, int], list[Any]]


class _NotInterleaved(PyjladError):
    """The interleaved layout does not apply here: stack the shadows instead (never reaches the user)."""


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


def _vector_engine(engine: str | None) -> bool:
    return (engine or default_engine_name()) in ("embedded", "llvm", "enzyme")


def _sweeper(f: Any, engine: str | None, kind: str, mode: str, acts: tuple[Activity, ...], wrt: int,
             width: int, interleaved: tuple[int, ...] = ()) -> Callable[[tuple[Any, ...], tuple[Any, ...]], float]:
    """``run(args, shadows) -> value``: one vector sweep (``Sweep(kind, mode, acts, wrt, width=width,
    interleaved=interleaved)``); :class:`Refused` (remembered for ``f`` and the sweep) where Enzyme or
    pyjlad cannot build it. Interleaved, :class:`_NotInterleaved` where its first run fails in any way
    (a function Numba cannot compile for strided arrays, or one that refuses them at run time): the
    stacked sweep then runs instead, and raises the function's own error if it was not the layout."""
    refused, ran, compiled = cached_for(f, ("vector-sweep", kind, mode, acts, wrt, width, engine, interleaved),
                                        lambda: ([False], [False], compiled_sweep(
                                            f, Sweep(kind, mode, acts, wrt, width=width, interleaved=interleaved),
                                            engine)))
    if refused[0]:
        raise _NotInterleaved if interleaved else Refused

    def run(args: tuple[Any, ...], shadows: tuple[Any, ...]) -> float:
        try:
            value, _, _ = compiled(args, shadows, 0.0)
        except (EnzymeError, UnsupportedFunctionError) as exc:
            refused[0] = True
            raise (_NotInterleaved if interleaved else Refused) from exc
        except Exception as exc:
            if not interleaved or ran[0]:
                raise
            refused[0] = True
            raise _NotInterleaved from exc
        ran[0] = True
        return value

    return run


def _parallel_reverse(f: Any) -> bool:
    """Whether reverse sweeps of ``f`` run its ``prange`` loops in parallel (a ``parallel=True`` function with
    the parallel-derivatives setting on: :mod:`pyjlad.parallel_derivatives`); those take one sweep per
    direction, each parallel, where a vector-mode sweep would run serially."""
    return config.parallel_derivatives() and bool(getattr(f, "targetoptions", {}).get("parallel"))


def _layout_tries(f: Any, engine: str | None, key: tuple[Any, ...]) -> tuple[bool, ...]:
    """The layouts to try, best first: interleaved (:mod:`pyjlad.vector_lanes`) unless refused for ``f``."""
    return (False,) if _interleaving_refused(f, engine, key)[0] else (True, False)


def _interleaving_refused(f: Any, engine: str | None, key: tuple[Any, ...]) -> list[bool]:
    return cached_for(f, ("vector-interleaving-refused", engine, key), lambda: [False])


def forward_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks,
                       width: int, engine: str | None, plan: Any = None) -> tuple[Any, np.ndarray] | None:
    """``(value, tangents)``: the output tangents of ``count`` directions, stacked ``(count, *out_shape)``.

    ``active[i]``: argument ``i`` gets tangents from ``make``. ``None`` where vector mode
    does not apply (the caller then sweeps one direction at a time). ``plan``: :func:`~pyjlad.vector_plan.sweep_plan`'s, if known.
    """
    if width < 2 or count == 0 or not _vector_engine(engine):
        return None
    try:
        plan = plan or sweep_plan(f, primals)
        key = ("forward", type_key(primals), active)
        for interleaved in _layout_tries(f, engine, key):
            try:
                return _forward(f, primals, active, count, make, width, engine, plan, interleaved)
            except _NotInterleaved:
                _interleaving_refused(f, engine, key)[0] = True
    except Refused:
        pass
    return None


def _forward(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks, width: int,
             engine: str | None, plan: Any, interleaved: bool) -> tuple[Any, np.ndarray]:
    kind, g, layout, written, out_like, writes = plan
    acts = tuple(Activity.DUP if a or shadowed(i, written, writes, primals) else Activity.CONST
                 for i, a in enumerate(active))
    if layout is not None:
        acts = (Activity.DUP, *acts)
    output = np.empty_like(out_like) if layout is not None else None  # written by every sweep
    value = None
    unwritten = None if any(writes) else fresh(primals, writes)  # the same arrays for every chunk
    # One zeroed result, padded to whole chunks: a chunk's output tangents are written into
    # its rows (a C-contiguous view), no copy. (A written argument's tangents: copied out.)
    padded = -(-count // width) * width
    result = np.zeros((padded, *np.shape(out_like)), np.asarray(out_like).dtype) if kind != "none" else None
    dup = [i for i, a in enumerate(acts[-len(primals):]) if a is Activity.DUP]
    lanes = lanes_for(primals, dup, writes, width) if interleaved else {}
    out_lanes = Lanes(out_like, width) if interleaved and layout is not None else None
    run = _sweeper(g, engine, "ad", "forward", acts, -1, width, interleaved_indices(lanes, out_lanes))
    for start in range(0, count, width):
        stop = min(count, start + width)
        args = unwritten if unwritten is not None else fresh(primals, writes)
        tangents = make(start, stop, width)
        if lanes:
            args = loaded(args, lanes, tangents)
        shadows = [lanes[i].shadows if i in lanes else tangents[i] if tangents[i] is not None
                   else stack(args[i], width) for i in dup]
        if kind == "none":
            out = lanes[written].directions() if written in lanes else shadows[dup.index(written)]
            if result is None:
                result = np.zeros((padded, *out.shape[1:]), out.dtype)
        else:
            out = result[start:start + width]
            if out_lanes is not None:
                out_lanes.load(output)
                args, shadows = (out_lanes.primal, *args), [out_lanes.shadows, *shadows]
            elif layout is not None:
                args, shadows = (output, *args), [out, *shadows]
            else:
                shadows.append(out)
        value = run(args, tuple(shadows))
        if kind == "none":
            result[start:stop] = out[:stop - start]
        elif out_lanes is not None:
            out[...] = out_lanes.directions()
    result = result[:count]
    value = np.ascontiguousarray(args[0]) if layout is not None else (float(value) if kind == "scalar" else None)
    return value, result


def reverse_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
                       seeds: Callable[[int, int, int], np.ndarray], width: int,
                       engine: str | None, plan: Any = None) -> tuple[Any, list[Any]] | None:
    """``(value, cotangents)``: for ``count`` output cotangents (``seeds(start, stop, width)`` gives
    them stacked, zero past ``stop - start``), the input cotangents of each ``active`` argument,
    stacked ``(count, *shape)`` (``None`` for the others). ``None`` where vector mode does not apply.
    ``plan``: :func:`~pyjlad.vector_plan.sweep_plan`'s, if known.
    """
    if width < 2 or count == 0 or not _vector_engine(engine) or _parallel_reverse(f):
        return None
    try:
        plan = plan or sweep_plan(f, primals)
        key = ("reverse", type_key(primals), active)
        for interleaved in _layout_tries(f, engine, key):
            try:
                return _reverse(f, primals, active, count, seeds, width, engine, plan, interleaved)
            except _NotInterleaved:
                _interleaving_refused(f, engine, key)[0] = True
    except Refused:
        pass
    return None


def _reverse(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
             seeds: Callable[[int, int, int], np.ndarray], width: int, engine: str | None, plan: Any,
             interleaved: bool) -> tuple[Any, list[Any]]:
    kind, g, layout, written, out_like, writes = plan
    acts = tuple(Activity.DIFF if a or shadowed(i, written, writes, primals) else Activity.CONST
                 for i, a in enumerate(active))
    output = np.empty_like(out_like) if layout is not None else None  # written by every sweep
    value = None
    unwritten = None if any(writes) else fresh(primals, writes)
    padded = -(-count // width) * width
    # The active arguments' cotangents accumulate into rows of one zeroed array each (views).
    whole = [np.zeros((padded, *np.shape(x)), stack(x, 1).dtype) if active[i] and act is Activity.DIFF
             else None for i, (x, act) in enumerate(zip(primals, acts))]
    out_dtype = np.asarray(out_like).dtype
    lanes = lanes_for(primals, [i for i, a in enumerate(acts) if a is Activity.DIFF], writes, width) if interleaved else {}
    out_lanes = Lanes(out_like, width) if interleaved and layout is not None else None
    run = _sweeper(g, engine, "ad", "reverse", ((Activity.DUP,) if layout else ()) + acts, -1, width,
                   interleaved_indices(lanes, out_lanes))
    for start in range(0, count, width):
        stop = min(count, start + width)
        args = unwritten if unwritten is not None else fresh(primals, writes)
        seed = np.asarray(seeds(start, stop, width), dtype=out_dtype)
        if seed.shape[1:] != np.shape(out_like):
            raise ArgumentError(f"the cotangents have shape {seed.shape[1:]}; the output has {np.shape(out_like)}")
        if lanes:
            args = loaded(args, lanes, None)
        stacks = [lanes[i].shadows if i in lanes else w[start:start + width] if w is not None
                  else stack(x, width) if act is Activity.DIFF else None
                  for i, (x, act, w) in enumerate(zip(args, acts, whole))]
        if kind == "none":
            if written in lanes:
                np.copyto(lanes[written].directions(), seed)
            else:
                stacks[written][...] = seed
        shadows = [s for s in stacks if s is not None]
        if out_lanes is not None:
            out_lanes.load(output, seed)
            args, shadows = (out_lanes.primal, *args), [out_lanes.shadows, *shadows]
        elif layout is not None:
            args, shadows = (output, *args), [seed, *shadows]
        elif kind == "scalar":
            shadows.append(seed)
        value = run(args, tuple(shadows))
        for i, lane in lanes.items():
            if whole[i] is not None:
                whole[i][start:start + width] = lane.directions()
    results = [w[:count] if w is not None else None for w in whole]
    value = np.ascontiguousarray(args[0]) if layout is not None else (float(value) if kind == "scalar" else None)
    return value, results


def hessian_columns(f: Any, args: tuple[Any, ...], wrt: int, width: int, engine: str | None) -> np.ndarray | None:
    """The Hessian of ``f`` with respect to the array ``args[wrt]``, ``width`` columns per sweep
    (forward over reverse, the outer forward sweep of width ``width``); ``None`` where vector
    mode does not apply."""
    x = args[wrt]
    if width < 2 or not _vector_engine(engine) or not isinstance(x, np.ndarray) or has_container(args):
        return None
    try:
        key = type_key(args)
        argtypes = argtypes_of(args, key)
        writes = cached_for(f, ("vector-hvp-writes", key), lambda: writes_of(f, argtypes) if isinstance(
            result_type(f, argtypes), nbtypes.Float) else None)
        tries = ("hessian", key, wrt)
        for interleaved in _layout_tries(f, engine, tries) if writes and not writes[wrt] else (False,):
            try:
                return _hessian(f, args, wrt, width, engine, writes, interleaved)
            except _NotInterleaved:
                _interleaving_refused(f, engine, tries)[0] = True
    except Refused:
        pass
    return None


def _hessian(f: Any, args: tuple[Any, ...], wrt: int, width: int, engine: str | None, writes: Any,
             interleaved: bool) -> np.ndarray:
    x = args[wrt]
    n = x.size
    run = _sweeper(f, engine, "hvp", "reverse", (), wrt, width, (wrt,) if interleaved else ())
    padded = -(-n // width) * width
    eye = _eye(padded, n, x.dtype)  # the directions: rows (zero past n), one block per sweep
    columns = np.zeros((padded, n), x.dtype)  # H e_j in row j: the sweeps write into views
    reuse = writes is not None and not any(writes)  # f writes no argument: the same ones for every sweep
    shared = compact_overlapping(fresh(args, writes), [wrt]) if reuse else None
    lanes = HessianLanes(x, width) if interleaved else None
    for start in range(0, n, width):
        passed = shared if reuse else compact_overlapping(fresh(args, writes), [wrt])
        directions = eye[start:start + width].reshape((width, *x.shape))
        if lanes is not None:
            lanes.load(x, directions)
            passed = (*passed[:wrt], lanes.primal, *passed[wrt + 1:])
            run(passed, lanes.shadows())
            columns[start:start + width] = lanes.products().reshape(width, n)
        else:
            run(passed, (directions, np.zeros(x.shape, x.dtype), columns[start:start + width].reshape((width, *x.shape))))
    return np.ascontiguousarray(columns[:n].T).reshape(x.shape + x.shape)


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
        plan = sweep_plan(f, args)
    except Refused:
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
