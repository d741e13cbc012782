"""Batched ``jvp``/``vjp`` (``batched=True``): directions stacked on a leading axis, in vector mode.

The stacked tangents (cotangents) go through :mod:`pyjlad.vector_products` ``chunk`` at a
time; where vector mode does not apply, one :func:`pyjlad.jvp` (:func:`pyjlad.vjp`) per
direction on copies of the arguments, with the same results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError
from .vector_products import Chunks, active_of, forward_directions, reverse_directions

__all__ = ["jvp_batched", "vjp_batched", "check_stacked", "stacked_chunks"]


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
