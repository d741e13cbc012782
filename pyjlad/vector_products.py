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

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types as nbtypes

from .activity import Activity
from .engines import compiled_sweep, default_engine_name
from .errors import ArgumentError, ArgumentTypeError, EnzymeError, UnsupportedFunctionError
from .export import as_numba_function, describe_function, numba_argtypes, result_type
from .memo import cached_for
from .outputs import output_layout, output_wrapper
from .product_args import differentiable, result_kind, written_output
from .pytrees import has_container
from .sweep import Sweep, compact_overlapping

__all__ = ["DEFAULT_CHUNK", "check_chunk", "forward_directions", "reverse_directions", "hessian_columns",
           "jacobian_vector", "jvp_batched", "vjp_batched"]

#: Directions per sweep when none is given (measured: benchmarks/vector_mode.py).
DEFAULT_CHUNK = 8

#: Directions yielded per chunk: ``make(start, stop, width)`` gives, per argument, a
#: stacked ``(width, *shape)`` array (zero past ``stop - start``) or ``None``.
Chunks = Callable[[int, int, int], list[Any]]


class _Refused(Exception):
    """Vector mode does not apply here: sweep one direction at a time instead."""


def check_chunk(chunk: int | None) -> int:
    """``chunk`` (``None``: :data:`DEFAULT_CHUNK`) checked to be a positive integer."""
    if chunk is None:
        return DEFAULT_CHUNK
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ArgumentTypeError(f"chunk must be a positive integer (directions per sweep), got {chunk!r}")
    return int(chunk)


def _fresh(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    """C-contiguous copies of the array arguments (the layout the vector drivers address)."""
    return tuple(np.array(x, copy=True, order="C") if isinstance(x, np.ndarray) else x for x in primals)


def _vector_engine(engine: str | None) -> bool:
    return (engine or default_engine_name()) in ("embedded", "llvm", "enzyme")


def _run(f: Any, sweep: Sweep, engine: str | None, args: tuple[Any, ...], shadows: tuple[Any, ...]) -> float:
    """One vector sweep; :class:`_Refused` (remembered for ``f`` and ``sweep``) where Enzyme or pyjlad
    cannot build it."""
    refused = cached_for(f, ("vector-refused", sweep, engine), lambda: [False])
    if refused[0]:
        raise _Refused
    try:
        value, _, _ = compiled_sweep(f, sweep, engine)(args, shadows, 0.0)
    except (EnzymeError, UnsupportedFunctionError) as exc:
        refused[0] = True
        raise _Refused from exc
    return value


def _stack(x: Any, width: int) -> np.ndarray:
    dtype = x.dtype if isinstance(x, (np.ndarray, np.floating)) else np.float64
    return np.zeros((width, *np.shape(x)), dtype)


def _plan(f: Any, primals: tuple[Any, ...]) -> tuple[str, Any, Any, Any, Any]:
    """``(kind, function to sweep, output layout, the written argument, a zero output)``, or
    :class:`_Refused`."""
    if has_container(primals):
        raise _Refused
    kind = result_kind(f, primals)
    if kind == "scalar":
        restype = result_type(f, numba_argtypes(primals))
        return kind, f, None, None, (np.float32(0) if restype == nbtypes.float32 else np.float64(0))
    if kind == "none":
        written = written_output(f, primals)
        return kind, f, None, written, primals[written]
    value = as_numba_function(f)(*_fresh(primals))
    if not (isinstance(value, np.ndarray) and value.dtype in (np.float64, np.float32)):
        raise _Refused
    layout = output_layout(value, describe_function(f))
    return kind, output_wrapper(f, len(primals), layout), layout, None, np.zeros(value.shape, value.dtype)


def forward_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int, make: Chunks,
                       width: int, engine: str | None) -> tuple[Any, np.ndarray] | None:
    """``(value, tangents)``: the output tangents of ``count`` directions, stacked ``(count, *out_shape)``.

    ``active[i]``: argument ``i`` gets tangents from ``make``. ``None`` where vector mode
    does not apply (the caller then sweeps one direction at a time).
    """
    if width < 2 or not _vector_engine(engine):
        return None
    try:
        kind, g, layout, written, out_like = _plan(f, primals)
        acts = [Activity.DUP if a or i == written else Activity.CONST for i, a in enumerate(active)]
        if layout is not None:
            acts = [Activity.DUP, *acts]
        sweep = Sweep("ad", "forward", tuple(acts), width=width)
        result, value = None, None
        for start in range(0, count, width):
            stop = min(count, start + width)
            args = _fresh(primals)
            tangents = make(start, stop, width)
            shadows = [t if t is not None else _stack(x, width)
                       for x, t, act in zip(args, tangents, acts[-len(args):]) if act is Activity.DUP]
            out = _stack(out_like, width)
            if layout is not None:
                args, shadows = (np.empty_like(out_like), *args), [out, *shadows]
            elif kind == "none":
                out = shadows[[i for i, a in enumerate(acts) if a is Activity.DUP].index(written)]
            else:
                shadows.append(out)
            value = _run(g, sweep, engine, args, tuple(shadows))
            if result is None:
                result = np.zeros((count, *out.shape[1:]), out.dtype)
            result[start:stop] = out[:stop - start]
        value = args[0] if layout is not None else (float(value) if kind == "scalar" else None)
        return value, result
    except _Refused:
        return None


def reverse_directions(f: Any, primals: tuple[Any, ...], active: tuple[bool, ...], count: int,
                       seeds: Callable[[int, int, int], np.ndarray], width: int,
                       engine: str | None) -> tuple[Any, list[Any]] | None:
    """``(value, cotangents)``: for ``count`` output cotangents (``seeds(start, stop, width)`` gives
    them stacked, zero past ``stop - start``), the input cotangents of each ``active`` argument,
    stacked ``(count, *shape)`` (``None`` for the others). ``None`` where vector mode does not apply.
    """
    if width < 2 or not _vector_engine(engine):
        return None
    try:
        kind, g, layout, written, out_like = _plan(f, primals)
        acts = [Activity.DIFF if (a or i == written) else Activity.CONST for i, a in enumerate(active)]
        sweep = Sweep("ad", "reverse", ((Activity.DUP,) if layout else ()) + tuple(acts), width=width)
        results: list[Any] = [None] * len(primals)
        value = None
        for start in range(0, count, width):
            stop = min(count, start + width)
            args = _fresh(primals)
            seed = np.asarray(seeds(start, stop, width), dtype=np.asarray(out_like).dtype)
            if seed.shape[1:] != np.shape(out_like):
                raise ArgumentError(f"the cotangents have shape {seed.shape[1:]}; the output has {np.shape(out_like)}")
            stacks = [_stack(x, width) if act is Activity.DIFF else None for x, act in zip(args, acts)]
            if kind == "none":
                stacks[written][...] = seed
            shadows = [s for s in stacks if s is not None]
            if layout is not None:
                args, shadows = (np.empty_like(out_like), *args), [seed, *shadows]
            elif kind == "scalar":
                shadows.append(seed)
            value = _run(g, sweep, engine, args, tuple(shadows))
            for i, s in enumerate(stacks):
                if s is not None and active[i]:
                    if results[i] is None:
                        results[i] = np.zeros((count, *s.shape[1:]), s.dtype)
                    results[i][start:stop] = s[:stop - start]
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
    hess = np.zeros((n, n), x.dtype)
    sweep = Sweep("hvp", "reverse", (), wrt, width=width)
    try:
        for start in range(0, n, width):
            stop = min(n, start + width)
            passed = compact_overlapping(_fresh(args), [wrt])
            v = np.zeros((width, n), x.dtype)
            v[np.arange(stop - start), np.arange(start, stop)] = 1.0
            hv = np.zeros((width, *x.shape), x.dtype)
            _run(f, sweep, engine, passed, (v.reshape((width, *x.shape)), np.zeros(x.shape, x.dtype), hv))
            hess[:, start:stop] = hv.reshape(width, n)[:stop - start].T
    except _Refused:
        return None
    return hess.reshape(x.shape + x.shape)


def unit_chunks(index: int, shape: tuple[int, ...], dtype: Any, nargs: int) -> Chunks:
    """Chunks of the unit directions of argument ``index`` (``shape``), in C order."""
    size = int(np.prod(shape, dtype=np.int64))

    def make(start: int, stop: int, width: int) -> list[Any]:
        stacked = np.zeros((width, size), dtype)
        stacked[np.arange(stop - start), np.arange(start, stop)] = 1.0
        out: list[Any] = [None] * nargs
        out[index] = stacked.reshape((width, *shape))
        return out

    return make


def stacked_chunks(stacks: list[Any]) -> Chunks:
    """Chunks of the user's stacked directions (``None`` for an argument without any)."""

    def make(start: int, stop: int, width: int) -> list[Any]:
        out: list[Any] = []
        for s in stacks:
            if s is None:
                out.append(None)
                continue
            chunk = np.zeros((width, *s.shape[1:]), s.dtype)
            chunk[:stop - start] = s[start:stop]
            out.append(chunk)
        return out

    return make


def check_stacked(values: Any, like: Any, what: str) -> np.ndarray:
    """``values`` as a float array of shape ``(count, *shape of like)``."""
    stacked = np.asarray(values)
    if stacked.ndim != np.ndim(like) + 1 or stacked.shape[1:] != np.shape(like):
        raise ArgumentError(f"batched {what} must have shape (count, *{np.shape(like)}), got {stacked.shape}")
    if not np.issubdtype(stacked.dtype, np.floating) and not np.issubdtype(stacked.dtype, np.integer):
        raise ArgumentTypeError(f"batched {what} must be real numbers, got dtype {stacked.dtype}")
    return stacked


def active_of(primals: tuple[Any, ...], wanted: Any) -> tuple[bool, ...]:
    """Per argument: differentiable and wanted (``wanted(i)``)."""
    return tuple(differentiable(x) and wanted(i) for i, x in enumerate(primals))


def jacobian_vector(f: Any, args: tuple[Any, ...], indices: tuple[int, ...], mode: str, out_shape: tuple[int, ...],
                    out_dtype: Any, width: int, engine: str | None) -> list[np.ndarray] | None:
    """:func:`pyjlad.jacobian` in vector mode: ``width`` rows (reverse) or columns (forward) per
    sweep; ``None`` where vector mode does not apply."""
    out_size = int(np.prod(out_shape, dtype=np.int64))
    shapes = {i: np.shape(args[i]) for i in indices}
    dtypes = {i: np.result_type(out_dtype, np.asarray(args[i]).dtype) for i in indices}
    if mode == "reverse":
        seeds = unit_chunks(0, out_shape, out_dtype, 1)
        got = reverse_directions(f, args, active_of(args, lambda i: i in indices), out_size,
                                 lambda start, stop, width: seeds(start, stop, width)[0], width, engine)
        if got is None:
            return None
        return [got[1][i].reshape(out_shape + shapes[i]).astype(dtypes[i], copy=False) for i in indices]
    out = []
    for i in indices:
        size = int(np.prod(shapes[i], dtype=np.int64))
        dtype = np.asarray(args[i]).dtype
        got = forward_directions(f, args, active_of(args, lambda j, i=i: j == i), size,
                                 unit_chunks(i, shapes[i], dtype, len(args)), width, engine)
        if got is None:
            return None
        columns = got[1].reshape(size, out_size).T.reshape(out_shape + shapes[i])
        out.append(columns.astype(dtypes[i], copy=False))
    return out


def _stacked_results(parts: list[Any]) -> Any:
    """One result per direction stacked on a new leading axis (tuples entry by entry, ``None`` kept)."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        return tuple(_stacked_results([p[k] for p in parts]) for k in range(len(first)))
    return np.stack([np.asarray(p) for p in parts])


def _count(stacks: list[Any], what: str) -> int:
    counts = {len(s) for s in stacks if s is not None}
    if len(counts) != 1:
        raise ArgumentError(f"batched {what}: give at least one, all with the same leading length, got "
                            f"lengths {sorted(counts)}")
    count = counts.pop()
    if count == 0:
        raise ArgumentError(f"batched {what}: the leading axis (the directions) is empty")
    return count


def jvp_batched(f: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...], width: int,
                engine: str | None) -> tuple[Any, Any]:
    """:func:`pyjlad.jvp` with ``batched=True``: tangents stacked on a leading axis."""
    from .product_args import copy_arrays, refuse_containers
    from .products import jvp

    refuse_containers(primals, "batched jvp")
    stacks = [None if t is None else
              check_stacked(t, x, f"tangent of argument {i}").astype(np.asarray(x).dtype, copy=False)
              for i, (x, t) in enumerate(zip(primals, tangents))]
    count = _count(stacks, "jvp tangents")
    got = forward_directions(f, primals, tuple(s is not None for s in stacks), count, stacked_chunks(stacks),
                             width, engine)
    if got is not None:
        return got
    parts = [jvp(f, copy_arrays(primals), tuple(None if s is None else s[b] for s in stacks), engine=engine)
             for b in range(count)]
    return parts[0][0], _stacked_results([p[1] for p in parts])


def vjp_batched(f: Any, primals: tuple[Any, ...], cotangents: Any, width: int,
                engine: str | None) -> tuple[Any, tuple[Any, ...]]:
    """:func:`pyjlad.vjp` with ``batched=True``: cotangents stacked on a leading axis."""
    from .product_args import check_real, copy_arrays, refuse_containers
    from .products import vjp

    refuse_containers(primals, "batched vjp")
    parts = list(cotangents) if isinstance(cotangents, tuple) else [cotangents]
    for part in parts:
        check_real(part, "cotangent")
    stacks = [np.asarray(p) for p in parts]
    if any(s.ndim == 0 for s in stacks):
        raise ArgumentError("batched vjp: the cotangent needs a leading axis (one entry per direction)")
    count = _count(stacks, "vjp cotangents")
    if not isinstance(cotangents, tuple):
        active = active_of(primals, lambda i: True)
        got = reverse_directions(f, primals, active, count, lambda a, b, w: stacked_chunks(stacks)(a, b, w)[0],
                                 width, engine)
        if got is not None:
            return got[0], tuple(got[1])
    results = [vjp(f, copy_arrays(primals), tuple(s[b] for s in stacks) if isinstance(cotangents, tuple)
                   else stacks[0][b], engine=engine) for b in range(count)]
    return results[0][0], tuple(_stacked_results([r[1][i] for r in results]) for i in range(len(primals)))
