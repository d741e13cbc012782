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

from .engines import default_engine_name
from .errors import ArgumentTypeError
from .export import result_type
from .memo import cached_for
from .outputs import OutputShapeChanged
from .product_args import differentiable
from .pytrees import has_container
from .sweep import compact_overlapping
from .vector_lanes import HessianLanes
from .vector_plan import Refused, SweepPlan, argtypes_of, fresh, sweep_plan, type_key, writes_of
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
    does not apply (the caller then sweeps one direction at a time).
    """
    if width < 2 or count == 0 or not _vector_engine(engine):
        return None
    try:
        return planned(f, primals, lambda plan: _forward(f, plan, primals, active, count, make, width, engine))
    except Refused:
        return None


def planned(f: Any, primals: tuple[Any, ...], sweep: Callable[[SweepPlan], T]) -> T:
    """``sweep(plan)`` with the :func:`~pyjlad.vector_plan.sweep_plan` of ``f`` for ``primals``; again with
    the output measured where the plan's output shape, remembered from an earlier call, was not this one's."""
    try:
        return sweep(sweep_plan(f, primals))
    except OutputShapeChanged:
        return sweep(sweep_plan(f, primals, measure=True))


def _forward(f: Any, plan: SweepPlan, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks,
             width: int, engine: str | None) -> tuple[Any, np.ndarray] | None:
    return _best_layout(f, engine, ("forward", plan.key, active), lambda interleaved: forward_chunks(
        plan, primals, active, count, make, width, engine, interleaved))


def _best_layout(f: Any, engine: str | None, tries: tuple[Any, ...], sweep: Callable[[bool], Any],
                 interleaving: bool = True) -> Any:
    """``sweep(interleaved)``, interleaved first unless refused for ``f`` and ``tries`` (then remembered)."""
    for interleaved in _layout_tries(f, engine, tries) if interleaving else (False,):
        try:
            return sweep(interleaved)
        except NotInterleaved:
            _interleaving_refused(f, engine, tries)[0] = True
    return None


def reverse_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
                       seeds: Callable[[int, int, int], np.ndarray], width: int,
                       engine: str | None) -> tuple[Any, list[Any]] | None:
    """``(value, cotangents)``: for ``count`` output cotangents (``seeds(start, stop, width)`` gives
    them stacked, zero past ``stop - start``), the input cotangents of each ``active`` argument,
    stacked ``(count, *shape)`` (``None`` for the others). ``None`` where vector mode does not apply.
    """
    if width < 2 or count == 0 or not _vector_engine(engine):
        return None
    try:
        return planned(f, primals, lambda plan: _reverse(f, plan, primals, active, count, seeds, width, engine))
    except Refused:
        return None


def _reverse(f: Any, plan: SweepPlan, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
             seeds: Any, width: int, engine: str | None) -> tuple[Any, list[Any]] | None:
    return _best_layout(f, engine, ("reverse", plan.key, active), lambda interleaved: reverse_chunks(
        plan, primals, active, count, seeds, width, engine, interleaved))


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
        return _best_layout(f, engine, ("hessian", key, wrt), lambda interleaved: _hessian(
            f, args, wrt, width, engine, writes, interleaved), interleaving=bool(writes) and not writes[wrt])
    except Refused:
        return None


def _hessian(f: Any, args: tuple[Any, ...], wrt: int, width: int, engine: str | None, writes: Any,
             interleaved: bool) -> np.ndarray:
    x = args[wrt]
    n = x.size
    run = sweeper(f, engine, "hvp", "reverse", (), wrt, width, (wrt,) if interleaved else ())
    padded = -(-n // width) * width
    eye = unit_rows(padded, n, x.dtype)  # the directions: rows (zero past n), one block per sweep
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
    the caller explains)."""
    if width < 2 or not _vector_engine(engine):
        return None
    try:
        return planned(f, args, lambda plan: _jacobian(f, plan, args, indices, mode, width, engine))
    except Refused:
        return None


def _jacobian(f: Any, plan: SweepPlan, args: tuple[Any, ...], indices: tuple[int, ...], mode: str, width: int,
              engine: str | None) -> list[np.ndarray] | None:
    out_shape, out_dtype = np.shape(plan.out_like), plan.out_like.dtype
    out_size = math.prod(out_shape)
    if out_size == 0:
        return None
    if mode == "reverse":
        active = _memo(plan, ("jacobian-active", indices), lambda: active_of(args, lambda i: i in indices))
        got = _reverse(f, plan, args, active, out_size, unit_chunks(0, out_shape, out_dtype, 1), width, engine)
        if got is None:
            return None
        return [got[1][i].reshape(out_shape + np.shape(args[i])).astype(
            np.promote_types(out_dtype, np.asarray(args[i]).dtype), copy=False) for i in indices]
    out = []
    for i in indices:
        shape = np.shape(args[i])
        size = math.prod(shape)
        active = _memo(plan, ("jacobian-active", i), lambda i=i: active_of(args, lambda j: j == i))
        dtype = np.asarray(args[i]).dtype
        got = _forward(f, plan, args, active, size, unit_chunks(i, shape, dtype, len(args)), width, engine) \
            if size else None
        if got is None:
            return None
        columns = got[1].reshape(size, out_size).T.reshape(out_shape + shape)
        out.append(columns.astype(np.promote_types(out_dtype, dtype), copy=False))
    return out


def _memo(plan: SweepPlan, key: tuple, make: Callable[[], Any]) -> Any:
    found = plan.memo.get(key)
    if found is None:
        found = plan.memo[key] = make()
    return found
