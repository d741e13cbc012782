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
from typing import Any, TypeVar

import numpy as np
from numba import types as nbtypes

from .chunk_threads import chunk_threads, run_chunks, sweep_width
from .engines import default_engine_name
from .errors import ArgumentTypeError
from .export import result_type
from .memo import cached_for
from .out_of_bounds import check_guards
from .outputs import OutputShapeChanged
from .product_args import differentiable
from .pytrees import has_container
from .shadow_guards import guarded
from .sweep import compact_overlapping
from .vector_lanes import HessianLanes
from .vector_plan import Refused, SweepPlan, argtypes_of, call_key, fresh, sweep_plan, type_key, writes_of
from .vector_replay import remember, replayed
from .vector_sweeps import (
    Chunks,
    NotInterleaved,
    UnitChunks,
    forward_chunks,
    reverse_chunks,
    sweeper,
    unit_rows,
)

__all__ = ["DEFAULT_CHUNK", "check_chunk", "forward_directions", "reverse_directions", "hessian_columns",
           "jacobian_vector", "unit_chunks", "active_of"]

#: Directions per sweep when none is given (measured: benchmarks/vector_mode.py and docs/vector-mode.md: 32 was
#: 1-25% faster than 16 at 64x64 and 256x256, at twice the shadow memory).
DEFAULT_CHUNK = 32

T = TypeVar("T")


def check_chunk(chunk: int | None) -> int:
    """``chunk`` (``None``: :data:`DEFAULT_CHUNK`) checked to be a positive integer.

    Examples
    --------
    >>> check_chunk(None), check_chunk(4)
    (32, 4)
    """
    if chunk is None:
        return DEFAULT_CHUNK
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ArgumentTypeError(f"chunk must be a positive integer (directions per sweep), got {chunk!r}")
    return int(chunk)


def _vector_engine(engine: str | None) -> bool:
    return (engine or default_engine_name()) in ("embedded", "llvm", "enzyme")


def _layout_tries(f: Any, engine: str | None, key: tuple[Any, ...]) -> tuple[bool, ...]:
    """The layouts to try, best first: interleaved (:mod:`pyjlad.vector_lanes`) unless refused for ``f``."""
    return (False,) if _interleaving_refused(f, engine, key)[0] else (True, False)


def _interleaving_refused(f: Any, engine: str | None, key: tuple[Any, ...]) -> list[bool]:
    return cached_for(f, ("vector-interleaving-refused", engine, key), lambda: [False])


def forward_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks,
                       width: int, engine: str | None) -> tuple[Any, np.ndarray] | None:
    """``(value, tangents)``: the output tangents of ``count`` directions, stacked ``(count, *out_shape)``.

    ``active[i]``: argument ``i`` gets tangents from ``make``. ``None`` where vector mode
    does not apply (the caller then sweeps one direction at a time). A call like an earlier one
    replays its sweeps (:mod:`pyjlad.vector_replay`).
    """
    name = engine or default_engine_name()
    if width < 2 or count == 0 or not _vector_engine(name):
        return None

    def first(plan: SweepPlan) -> tuple[Callable[[Any], Any], Any] | None:
        return _layout_replay(f, engine, ("forward", plan.key, active), (primals, make), lambda call, interleaved:
                              forward_chunks(plan, call[0], active, count, call[1], width, engine, interleaved))

    return _with_replay(f, ("forward-directions", active, count, width, name, call_key(primals)), (primals, make),
                        lambda: planned(f, primals, first))


def planned(f: Any, primals: tuple[Any, ...], sweep: Callable[[SweepPlan], T]) -> T:
    """``sweep(plan)`` with the :func:`~pyjlad.vector_plan.sweep_plan` of ``f`` for ``primals``; again with
    the output measured where the plan's output shape, remembered from an earlier call, was not this one's."""
    try:
        return sweep(sweep_plan(f, primals))
    except OutputShapeChanged:
        return sweep(sweep_plan(f, primals, measure=True))


def _with_replay(f: Any, key: tuple, call: Any, first: Callable[[], tuple[Callable[[Any], T], T] | None]) -> T | None:
    """The result of the replay kept for ``f`` and ``key`` on ``call``; else of ``first()``, which gives
    ``(replay, result)`` (the replay then kept) or ``None`` (and :class:`Refused`: ``None``)."""
    found = replayed(f, key, call)
    if found is not None:
        return found
    try:
        got = first()
    except Refused:
        return None
    if got is None:
        return None
    remember(f, key, got[0])
    return got[1]


def _layout_replay(f: Any, engine: str | None, tries: tuple[Any, ...], call: Any,
                   sweep: Callable[[Any, bool], T]) -> tuple[Callable[[Any], T], T] | None:
    """``(replay, sweep(call, interleaved))`` for the layout :func:`_chosen_layout` chose; ``replay(call)``
    sweeps another call in it. ``None`` where no layout ran."""
    interleaved, result = _chosen_layout(f, engine, tries, lambda interleaved: sweep(call, interleaved))
    if result is None:
        return None
    return (lambda other: sweep(other, interleaved)), result


def _chosen_layout(f: Any, engine: str | None, tries: tuple[Any, ...], sweep: Callable[[bool], Any],
                   interleaving: bool = True) -> tuple[bool, Any]:
    """``(interleaved, sweep(interleaved))`` for the first layout that ran, interleaved first unless refused
    for ``f`` and ``tries`` (then remembered); ``(False, None)`` where none did."""
    for interleaved in _layout_tries(f, engine, tries) if interleaving else (False,):
        try:
            return interleaved, sweep(interleaved)
        except NotInterleaved:
            _interleaving_refused(f, engine, tries)[0] = True
    return False, None


def reverse_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
                       seeds: Callable[[int, int, int], np.ndarray], width: int,
                       engine: str | None) -> tuple[Any, list[Any]] | None:
    """``(value, cotangents)``: for ``count`` output cotangents (``seeds(start, stop, width)`` gives
    them stacked, zero past ``stop - start``), the input cotangents of each ``active`` argument,
    stacked ``(count, *shape)`` (``None`` for the others). ``None`` where vector mode does not apply.
    A call like an earlier one replays its sweeps.
    """
    name = engine or default_engine_name()
    if width < 2 or count == 0 or not _vector_engine(name):
        return None

    def first(plan: SweepPlan) -> tuple[Callable[[Any], Any], Any] | None:
        return _layout_replay(f, engine, ("reverse", plan.key, active), (primals, seeds), lambda call, interleaved:
                              reverse_chunks(plan, call[0], active, count, call[1], width, engine, interleaved))

    return _with_replay(f, ("reverse-directions", active, count, width, name, call_key(primals)), (primals, seeds),
                        lambda: planned(f, primals, first))


def hessian_columns(f: Any, args: tuple[Any, ...], wrt: int, width: int, engine: str | None) -> np.ndarray | None:
    """The Hessian of ``f`` with respect to the array ``args[wrt]``, ``width`` columns per sweep
    (forward over reverse, the outer forward sweep of width ``width``); ``None`` where vector
    mode does not apply."""
    x = args[wrt]
    name = engine or default_engine_name()
    if width < 2 or not _vector_engine(name) or not isinstance(x, np.ndarray) or has_container(args):
        return None
    key = type_key(args)

    def first() -> tuple[Callable[[Any], np.ndarray], np.ndarray] | None:
        argtypes = argtypes_of(args, key)
        writes = cached_for(f, ("vector-hvp-writes", key), lambda: writes_of(f, argtypes) if isinstance(
            result_type(f, argtypes), nbtypes.Float) else None)
        spare: list[Any] = []
        interleaved, columns = _chosen_layout(f, engine, ("hessian", key, wrt), lambda interleaved: _hessian(
            f, args, wrt, width, engine, writes, interleaved, spare), interleaving=bool(writes) and not writes[wrt])
        if columns is None:
            return None
        return (lambda a: _hessian(f, a, wrt, width, engine, writes, interleaved, spare)), columns

    return _with_replay(f, ("hessian", wrt, width, name, key), args, first)


def _hessian(f: Any, args: tuple[Any, ...], wrt: int, width: int, engine: str | None, writes: Any,
             interleaved: bool, spare: list[Any] | None = None) -> np.ndarray:
    """The Hessian, ``width`` columns per sweep. ``spare``: a list in which a replay keeps the interleaved
    buffer and the directions for its next call (taken while a call runs: concurrent calls make their own)."""
    x = args[wrt]
    n = x.size
    width = sweep_width(width, n, chunk_threads(f))  # (at most ``width``: narrower for few columns, or threads)
    run = sweeper(f, engine, "hvp", "reverse", (), wrt, width, (wrt,) if interleaved else ())
    padded = -(-n // width) * width
    try:
        kept = spare.pop() if spare is not None else None
    except IndexError:  # (none kept, or taken by a concurrent call)
        kept = None
    if kept is not None and (kept[1].primal.shape != x.shape or kept[1].width != width):
        kept = None  # (a replay's key holds types, not shapes; the width follows the size and the threads)
    # The directions: rows (zero past n), one block per sweep (a sweep of the stacked layout may write into its
    # block: kept between calls only where interleaved, which copies them into the lanes).
    eye = kept[0] if kept is not None else unit_rows(padded, n, x.dtype)
    kept_lanes = [kept[1]] if kept is not None and interleaved else []
    hessian = np.empty((n, n), x.dtype)  # column j: H e_j
    reuse = writes is not None and not any(writes)  # f writes no argument: the same ones for every sweep
    shared = compact_overlapping(fresh(args, writes), [wrt]) if reuse else None

    def new_lanes() -> HessianLanes | None:  # (each thread's own; the calling thread's first: the kept ones)
        return (kept_lanes.pop() if kept_lanes else HessianLanes(x, width)) if interleaved else None

    def columns(lanes: HessianLanes | None, start: int) -> None:
        stop = min(n, start + width)
        passed = shared if reuse else compact_overlapping(fresh(args, writes), [wrt])
        directions = eye[start:start + width].reshape((width, *x.shape))
        if lanes is not None:
            lanes.load(x, directions)
            passed = (*passed[:wrt], lanes.primal, *passed[wrt + 1:])
            run(passed, lanes.shadows())
            check_guards(f, args, ((wrt, lanes.buffer),))  # (its guard zone: pyjlad.shadow_guards)
            hessian[:, start:stop] = lanes.columns()[:, :stop - start]
        else:
            products, gradient = guarded((width, *x.shape), x.dtype), guarded(x.shape, x.dtype)
            run(passed, (directions, gradient, products))
            check_guards(f, args, ((wrt, gradient), (wrt, products)))
            hessian[:, start:stop] = products.reshape(width, n)[:stop - start].T

    # (A replay's sweep has run before: its first chunk need not run alone.)
    lanes = run_chunks(range(0, n, width), chunk_threads(f), new_lanes, columns, first_alone=kept is None)[0]
    if spare is not None and lanes is not None and not spare:
        spare.append((eye, lanes))
    return hessian.reshape(x.shape + x.shape)


def unit_chunks(index: int, shape: tuple[int, ...], dtype: Any, nargs: int) -> Chunks:
    """Chunks of the unit directions of argument ``index`` (``shape``), in C order."""
    return UnitChunks(index, tuple(shape), dtype, nargs)


def active_of(primals: tuple[Any, ...], wanted: Any) -> tuple[bool, ...]:
    """Per argument: differentiable and wanted (``wanted(i)``)."""
    return tuple(differentiable(x) and wanted(i) for i, x in enumerate(primals))


def jacobian_vector(f: Any, args: tuple[Any, ...], indices: tuple[int, ...], mode: str, width: int,
                    engine: str | None) -> list[np.ndarray] | None:
    """:func:`pyjlad.jacobian` in vector mode: ``width`` rows (reverse) or columns (forward) per
    sweep; ``None`` where vector mode does not apply (or ``f``'s output is no float or float array:
    the caller explains). A call like an earlier one replays its sweeps (:mod:`pyjlad.vector_replay`)."""
    name = engine or default_engine_name()
    if width < 2 or not _vector_engine(name):
        return None
    return _with_replay(f, ("jacobian", indices, mode, width, name, call_key(args)), args,
                        lambda: planned(f, args, lambda plan: _jacobian(f, plan, args, indices, mode, width, engine)))


def _jacobian(f: Any, plan: SweepPlan, args: tuple[Any, ...], indices: tuple[int, ...], mode: str, width: int,
              engine: str | None) -> tuple[Callable[[tuple[Any, ...]], list[np.ndarray]], list[np.ndarray]] | None:
    """``(replay, jacobians)``: the Jacobians, and how to compute them again for arguments of the same
    types and sizes (``replay(args)``, the layouts already chosen)."""
    out_shape, out_dtype = np.shape(plan.out_like), plan.out_like.dtype
    out_size = math.prod(out_shape)
    if out_size == 0:
        return None
    # (Shapes and dtypes: the same for every call replayed, whose key holds the arguments' types and sizes.)
    shapes = {i: np.shape(args[i]) for i in indices}
    dtypes = {i: np.promote_types(out_dtype, np.asarray(args[i]).dtype) for i in indices}
    if mode == "reverse":
        active = active_of(args, lambda i: i in indices)

        def pull(a: tuple[Any, ...], interleaved: bool) -> list[np.ndarray]:
            got = reverse_chunks(plan, a, active, out_size, unit_chunks(0, out_shape, out_dtype, 1), width, engine,
                                 interleaved)
            return [got[1][i].reshape(out_shape + shapes[i]).astype(dtypes[i], copy=False) for i in indices]

        return _layout_replay(f, engine, ("reverse", plan.key, active), args, pull)
    pushes: list[Callable[[tuple[Any, ...]], np.ndarray]] = []
    jacobians = []
    for i in indices:
        size = math.prod(shapes[i])
        if not size:
            return None
        active = active_of(args, lambda j, i=i: j == i)

        def push(a: tuple[Any, ...], interleaved: bool, i: int = i, active: tuple[bool, ...] = active,
                 size: int = size) -> np.ndarray:
            units = UnitChunks(i, shapes[i], np.asarray(a[i]).dtype, len(a))
            _, columns = forward_chunks(plan, a, active, size, units, width, engine, interleaved, columns=True)
            return columns.reshape(out_shape + shapes[i]).astype(dtypes[i], copy=False)

        got = _layout_replay(f, engine, ("forward", plan.key, active), args, push)
        if got is None:
            return None
        pushes.append(got[0])
        jacobians.append(got[1])

    def replay(a: tuple[Any, ...]) -> list[np.ndarray]:  # (holds no argument or result of this call)
        return [push(a) for push in pushes]

    return replay, jacobians
