"""The chunked vector sweeps behind :mod:`pyjlad.vector_products`: ``W`` directions per run of the function.

:func:`forward_chunks` pushes ``count`` tangent directions through ``f`` ``W`` at a time,
:func:`reverse_chunks` pulls ``count`` cotangents back. What a sweep derives from its
:class:`~pyjlad.vector_plan.SweepPlan` (the activities, which arrays are interleaved, the
compiled sweep) is worked out once and kept with the plan (:class:`_Prepared`), and the
interleaved buffers (:mod:`pyjlad.vector_lanes`) of a call are reused by the next one: the
per-call cost is the function's own, plus copies in and out.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from numba.core.errors import NumbaPerformanceWarning

from .activity import Activity
from .chunk_threads import chunk_threads, run_chunks, sweep_width
from .engines import compiled_sweep
from .errors import ArgumentError, EnzymeError, PyjladError, UnsupportedFunctionError
from .memo import cached_for
from .out_of_bounds import check_guards
from .outputs import OutputShapeChanged
from .shadow_guards import guarded
from .sweep import Sweep
from .vector_lanes import Lanes
from .vector_plan import Refused, SweepPlan, fresh, shadowed, stack

__all__ = ["CotangentShapeError", "NotInterleaved", "UnitChunks", "forward_chunks", "reverse_chunks", "sweeper"]

#: Directions yielded per chunk: ``make(start, stop, width)`` gives, per argument, a
#: stacked ``(width, *shape)`` array (zero past ``stop - start``) or ``None``.
Chunks = Callable[[int, int, int], list[Any]]


#: Interleaved buffers kept for the next call: sets of at most this many bytes, this many sets per
#: shapes (concurrent calls), for this many shapes.
_SPARE_BYTES, _SPARE_SETS, _SPARE_SHAPES = 1 << 20, 2, 8


class NotInterleaved(PyjladError):
    """The interleaved layout does not apply here: stack the shadows instead (never reaches the user)."""


class CotangentShapeError(OutputShapeChanged, ArgumentError):
    """Cotangents shaped otherwise than the output as planned. The plan's output shape may be an earlier call's
    (:func:`pyjlad.vector_plan.sweep_plan` remembers it by the arrays' shapes and the integers: a bool, or the
    values, can change it), so the caller measures the output and sweeps again first
    (:func:`pyjlad.vector_products.planned`); measured, the error is the caller's, an :class:`ArgumentError`.
    Until 2026-12-06 a batched ``vjp`` refused right cotangents after an earlier call with another output size."""


class UnitChunks:
    """Chunks of the unit directions of argument ``index`` (``shape``), in C order (a :data:`Chunks`).

    An interleaved sweep sets its ones in place (:meth:`~pyjlad.vector_lanes.Lanes.load_units`);
    otherwise each call gives rows of one identity, padded with zero rows to whole chunks: each
    chunk gets its own rows (a C-contiguous view), so a sweep that zeroes or writes them spoils no
    other chunk.
    """

    def __init__(self, index: int, shape: tuple[int, ...], dtype: Any, nargs: int) -> None:
        self.index, self.shape, self.dtype, self.nargs = index, shape, dtype, nargs
        self.size = math.prod(shape)
        self._eyes: dict[int, np.ndarray] = {}

    def __call__(self, start: int, stop: int, width: int) -> list[Any]:
        eye = self._eyes.get(width)
        if eye is None:
            eye = self._eyes[width] = unit_rows(-(-self.size // width) * width, self.size, self.dtype)
        out: list[Any] = [None] * self.nargs
        out[self.index] = eye[start:start + width].reshape((width, *self.shape))  # rows past size: zero
        return out


def unit_rows(rows: int, size: int, dtype: Any) -> np.ndarray:
    """``np.eye(rows, size, dtype=dtype)`` for ``rows >= size``, without its per-call overhead."""
    eye = np.zeros((rows, size), dtype)
    eye.reshape(-1)[:size * (size + 1):size + 1] = 1
    return eye


def sweeper(f: Any, engine: str | None, kind: str, mode: str, acts: tuple[Activity, ...], wrt: int,
            width: int, interleaved: tuple[int, ...] = ()) -> Callable[[tuple[Any, ...], tuple[Any, ...]], float]:
    """``run(args, shadows) -> value``: one vector sweep (``Sweep(kind, mode, acts, wrt, width=width,
    interleaved=interleaved)``); :class:`~pyjlad.vector_plan.Refused` (remembered for ``f`` and the sweep)
    where Enzyme or pyjlad cannot build it. Interleaved, :class:`NotInterleaved` where its first run fails
    in any way (a function Numba cannot compile for strided arrays, or one that refuses them at run time):
    the stacked sweep then runs instead, and raises the function's own error if it was not the layout."""
    return cached_for(f, ("vector-sweep", kind, mode, acts, wrt, width, engine, interleaved),
                      lambda: _runner(compiled_sweep(f, Sweep(kind, mode, acts, wrt, width=width,
                                                              interleaved=interleaved), engine), interleaved))


def _runner(compiled: Any, interleaved: tuple[int, ...]) -> Callable[[tuple[Any, ...], tuple[Any, ...]], float]:
    refused, ran = [False], [False]

    def run(args: tuple[Any, ...], shadows: tuple[Any, ...]) -> float:
        if refused[0]:
            raise NotInterleaved if interleaved else Refused
        try:
            # The first run compiles f for the interleaved lanes' strided views, pyjlad's layout, not the
            # caller's: Numba's warning that '@' is faster on contiguous arrays would be about nothing the
            # caller wrote or can change.
            first = interleaved and not ran[0]
            with warnings.catch_warnings() if first else contextlib.nullcontext():
                if first:
                    warnings.simplefilter("ignore", NumbaPerformanceWarning)
                value, _, _ = compiled(args, shadows, 0.0)
        except OutputShapeChanged:
            raise  # the output buffer's size was a guess (pyjlad.vector_plan), not the layout
        except (EnzymeError, UnsupportedFunctionError) as exc:
            refused[0] = True
            raise (NotInterleaved if interleaved else Refused) from exc
        except Exception as exc:
            if not interleaved or ran[0]:
                raise
            refused[0] = True
            raise NotInterleaved from exc
        ran[0] = True
        return value

    return run


class _Prepared:
    """What the sweeps of one plan derive from it, once: activities, the interleaved arrays, the sweep."""

    def __init__(self, plan: SweepPlan, primals: tuple[Any, ...], mode: str, active: tuple[bool, ...], width: int,
                 interleaved: bool, engine: str | None) -> None:
        differentiated = Activity.DUP if mode == "forward" else Activity.DIFF
        self.acts = tuple(differentiated if a or shadowed(i, plan.written, plan.writes, primals) else Activity.CONST
                          for i, a in enumerate(active))
        self.dup = [i for i, a in enumerate(self.acts) if a is not Activity.CONST]
        # Interleaved: each differentiated array the function does not write (one it writes keeps its layout:
        # it may write it through a view, such as ravel(), that is a copy of a strided array), and the output.
        self.laned = tuple(i for i in self.dup if isinstance(primals[i], np.ndarray)
                           and not (plan.writes and plan.writes[i])) if interleaved else ()
        self.out_laned = interleaved and plan.layout is not None
        indices = (0, *(i + 1 for i in self.laned)) if self.out_laned else self.laned
        swept = ((Activity.DUP,) if plan.layout is not None else ()) + self.acts
        self.run = sweeper(plan.function, engine, "ad", mode, swept, -1, width, indices)
        self.width = width
        self.swept = False  # whether a call's chunks have all run (the next call's may all start at once)
        self._spares: dict[tuple, list] = {}  # by shapes: buffers of calls that have returned

    def borrow(self, primals: tuple[Any, ...], out_like: Any) -> _LaneSet:
        """Interleaved buffers for these shapes: a spare set, or new ones."""
        shapes = (np.shape(out_like) if self.out_laned else None, *(primals[i].shape for i in self.laned))
        try:
            return self._spares.get(shapes, []).pop()
        except IndexError:
            return _LaneSet({i: Lanes(primals[i], self.width) for i in self.laned},
                            Lanes(out_like, self.width) if self.out_laned else None, shapes)

    def give_back(self, buffers: _LaneSet) -> None:
        """Keep ``buffers`` for the next call, if small (allocating large ones costs little next to their sweeps,
        and keeping them would hold the memory)."""
        if buffers.nbytes > _SPARE_BYTES:
            return
        if buffers.shapes not in self._spares and len(self._spares) >= _SPARE_SHAPES:
            self._spares.clear()
        spares = self._spares.setdefault(buffers.shapes, [])
        if len(spares) < _SPARE_SETS:
            spares.append(buffers)


class _LaneSet:
    """The interleaved buffers of one call: the arguments' (by position) and the output's."""

    __slots__ = ("lanes", "nbytes", "out", "shapes")

    def __init__(self, lanes: dict[int, Lanes], out: Lanes | None, shapes: tuple) -> None:
        self.lanes, self.out, self.shapes = lanes, out, shapes
        self.nbytes = sum(lane.buffer.nbytes for lane in (*lanes.values(), *([out] if out else [])))


def _prepared(plan: SweepPlan, primals: tuple[Any, ...], mode: str, active: tuple[bool, ...], width: int,
              interleaved: bool, engine: str | None) -> _Prepared:
    key = (mode, active, width, interleaved, engine)
    found = plan.memo.get(key)
    if found is None:
        found = plan.memo[key] = _Prepared(plan, primals, mode, active, width, interleaved, engine)
    return found


class _ChunkState:
    """What one thread's chunks use: the interleaved buffers it borrowed, the output it writes (a function
    with an output parameter, not interleaved), and its last chunk's arguments and value."""

    __slots__ = ("args", "buffers", "output", "value")

    def __init__(self, prep: _Prepared, primals: tuple[Any, ...], plan: SweepPlan) -> None:
        self.buffers = prep.borrow(primals, plan.out_like)
        self.output = np.empty_like(plan.out_like) if plan.layout is not None and self.buffers.out is None else None
        self.args: list[Any] = []
        self.value: Any = None


def _chunks(plan: SweepPlan, prep: _Prepared, primals: tuple[Any, ...], count: int, width: int,
            work: Callable[[_ChunkState, int], None]) -> _ChunkState:
    """``work(state, start)`` for each chunk (on several threads for a ``parallel=True`` function:
    :mod:`pyjlad.chunk_threads`); a state that ran a chunk (its value and arguments: the function's output
    is the same in every chunk), every state's buffers given back."""
    states = run_chunks(range(0, count, width), chunk_threads(plan.function),
                        lambda: _ChunkState(prep, primals, plan), work, first_alone=not prep.swept)
    prep.swept = True
    for state in states:
        prep.give_back(state.buffers)
    return next(state for state in states if state.args)


def forward_chunks(plan: SweepPlan, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks,
                   width: int, engine: str | None, interleaved: bool,
                   columns: bool = False) -> tuple[Any, np.ndarray]:
    """``(value, tangents)``: the output tangents of ``count`` directions, stacked ``(count, *out_shape)``
    (see :func:`pyjlad.vector_products.forward_directions`); with ``columns``, ``(*out_shape, count)``
    (a Jacobian's layout: interleaved output tangents are copied straight into it, and the value is
    not kept). At most ``width`` directions per sweep (:func:`~pyjlad.chunk_threads.sweep_width`)."""
    width = sweep_width(width, count, chunk_threads(plan.function))
    prep = _prepared(plan, primals, "forward", active, width, interleaved, engine)
    kind, layout, written, out_like, writes = plan.kind, plan.layout, plan.written, plan.out_like, plan.writes
    unwritten = None if any(writes) else fresh(primals, writes)  # the same arrays for every chunk
    # One zeroed result, padded to whole chunks: a chunk's output tangents are written into
    # its rows (a C-contiguous view), no copy. (A written argument's tangents: copied out.)
    padded = -(-count // width) * width
    out_shape = np.shape(out_like)
    direct = columns and prep.out_laned  # interleaved output tangents copied into the columns
    result = [np.zeros((padded, *out_shape), out_like.dtype) if kind != "none" and not direct else None]
    target = np.empty((*out_shape, count), out_like.dtype).reshape(-1, count) if direct else None
    units = make.index if isinstance(make, UnitChunks) and make.index in prep.laned else None
    lock = threading.Lock()

    def chunk(state: _ChunkState, start: int) -> None:
        lanes, out_lanes = state.buffers.lanes, state.buffers.out
        stop = min(count, start + width)
        args = list(unwritten if unwritten is not None else fresh(primals, writes))
        tangents = make(start, stop, width) if units is None or len(lanes) > 1 else None
        for i, lane in lanes.items():
            if i == units:
                lane.load_units(args[i], start, stop)
            else:
                lane.load(args[i], tangents[i])
            args[i] = lane.primal
        shadows = [lanes[i].shadows if i in lanes else tangents[i] if tangents and tangents[i] is not None
                   else stack(args[i], width) for i in prep.dup]
        if kind == "none":
            out = shadows[prep.dup.index(written)]
            with lock:
                if result[0] is None:
                    result[0] = np.zeros((padded, *out.shape[1:]), out.dtype)
        else:
            out = result[0][start:start + width] if result[0] is not None else None
            if out_lanes is not None:
                out_lanes.clear()  # (its primal: the output, which the function writes whole)
                args, shadows = [out_lanes.primal, *args], [out_lanes.shadows, *shadows]
            elif layout is not None:
                args, shadows = [state.output, *args], [out, *shadows]
            else:
                shadows.append(out)
        state.value = prep.run(tuple(args), tuple(shadows))
        state.args = args
        if kind == "none":
            result[0][start:stop] = out[:stop - start]
        elif direct:
            target[:, start:stop] = out_lanes.shadows.reshape(-1, width)[:, :stop - start]
        elif out_lanes is not None:
            out[...] = out_lanes.directions()

    first = _chunks(plan, prep, primals, count, width, chunk)
    value = first.value
    if columns or kind == "none":  # (a function returning nothing: its value is None, as from jvp)
        value = None
    elif layout is not None:
        value = np.array(first.args[0])
    elif kind == "scalar":
        value = float(value)
    if direct:
        return value, target.reshape((*out_shape, count))
    return value, np.moveaxis(result[0][:count], 0, -1) if columns else result[0][:count]


def reverse_chunks(plan: SweepPlan, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
                   seeds: Any, width: int, engine: str | None, interleaved: bool) -> tuple[Any, list[Any]]:
    """``(value, cotangents)`` for ``count`` output cotangents (``seeds(start, stop, width)``, stacked, or a
    :class:`UnitChunks` of the output; see :func:`pyjlad.vector_products.reverse_directions`), at most
    ``width`` per sweep (:func:`~pyjlad.chunk_threads.sweep_width`)."""
    width = sweep_width(width, count, chunk_threads(plan.function))
    prep = _prepared(plan, primals, "reverse", active, width, interleaved, engine)
    kind, layout, written, out_like, writes = plan.kind, plan.layout, plan.written, plan.out_like, plan.writes
    unwritten = None if any(writes) else fresh(primals, writes)
    padded = -(-count // width) * width
    # The active arguments' cotangents accumulate into rows of one zeroed array each (views).
    whole = [guarded((padded, *np.shape(x)), stack(x, 1).dtype) if active[i] and act is Activity.DIFF
             else None for i, (x, act) in enumerate(zip(primals, prep.acts))]
    out_dtype = np.asarray(out_like).dtype
    units = prep.out_laned and isinstance(seeds, UnitChunks)

    def chunk(state: _ChunkState, start: int) -> None:
        lanes, out_lanes = state.buffers.lanes, state.buffers.out
        stop = min(count, start + width)
        args = list(unwritten if unwritten is not None else fresh(primals, writes))
        seed = None if units else np.asarray(seeds(start, stop, width)[0] if isinstance(seeds, UnitChunks)
                                             else seeds(start, stop, width), dtype=out_dtype)
        if seed is not None and seed.shape[1:] != np.shape(out_like):
            raise CotangentShapeError(f"the cotangents have shape {seed.shape[1:]}; the output has {np.shape(out_like)}")
        for i, lane in lanes.items():
            lane.load(args[i])
            args[i] = lane.primal
        stacks = [lanes[i].shadows if i in lanes else w[start:start + width] if w is not None
                  else stack(x, width) if act is Activity.DIFF else None
                  for i, (x, act, w) in enumerate(zip(args, prep.acts, whole))]
        if kind == "none":
            stacks[written][...] = seed
        shadows = [s for s in stacks if s is not None]
        if out_lanes is not None:
            if units:
                out_lanes.clear()  # (its primal: the output, which the function writes whole)
                out_lanes.set_units(start, stop)
            else:
                out_lanes.load(None, seed)
            args, shadows = [out_lanes.primal, *args], [out_lanes.shadows, *shadows]
        elif layout is not None:
            args, shadows = [state.output, *args], [seed, *shadows]
        elif kind == "scalar":
            shadows.append(seed)
        state.value = prep.run(tuple(args), tuple(shadows))
        state.args = args
        # Each array's shadows (stacked, interleaved, or rows of its whole cotangents) have a guard zone after
        # them: a function reading past an argument's end has its adjoint added there.
        check_guards(plan.source or plan.function, primals,
                     [(i, lanes[i].buffer if i in lanes else whole[i] if whole[i] is not None else stacks[i])
                      for i, act in enumerate(prep.acts) if act is Activity.DIFF and isinstance(primals[i], np.ndarray)])
        for i, lane in lanes.items():
            if whole[i] is not None:
                whole[i][start:start + width] = lane.directions()

    first = _chunks(plan, prep, primals, count, width, chunk)
    value = first.value
    if kind == "none":  # (a function returning nothing: its value is None, as from vjp)
        value = None
    elif layout is not None:
        value = np.array(first.args[0])
    elif kind == "scalar":
        value = float(value)
    return value, [w[:count] if w is not None else None for w in whole]
